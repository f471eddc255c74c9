"""Grouped allgather and grouped reducescatter (Horovod's grouped_allgather/_reducescatter), and
the gradients of reducescatter, which follow Horovod's: the allgathered gradient, times the number
of ranks for Sum and not divided by it for Average."""
import pytest
import torch

import dadt.torch as dadt


def test_grouped_allgather_gathers_each_member_with_rank_dependent_rows(world, nm):
    tensors = [torch.full((world.rank + 1, k + 1), float(10 * k + world.rank)) for k in range(3)]
    out = dadt.grouped_allgather(tensors, name=nm())
    for k, o in enumerate(out):
        expect = torch.cat([torch.full((r + 1, k + 1), float(10 * k + r)) for r in range(world.size)])
        assert torch.equal(o, expect), k


def test_grouped_allgather_async_returns_the_list(world, nm):
    h = dadt.grouped_allgather_async([torch.ones(2) * world.rank, torch.arange(3)], name=nm())
    a, b = dadt.synchronize(h)
    assert a.tolist() == [float(r) for r in range(world.size) for _ in range(2)]
    assert b.tolist() == list(range(3)) * world.size


def test_grouped_allgather_gradient_is_this_ranks_rows_of_the_average(world, nm):
    xs = [torch.ones(world.rank + 2, 3, requires_grad=True) for _ in range(2)]
    outs = dadt.grouped_allgather(xs, name=nm())
    # Every rank weighs the gathered rows of rank r by r + 1 (and member k by k + 1).
    for k, o in enumerate(outs):
        weights = torch.cat([torch.full((r + 2, 3), float(r + 1)) for r in range(world.size)])
        (o * weights * (k + 1)).sum().backward()
    for k, x in enumerate(xs):
        assert torch.equal(x.grad, torch.full((world.rank + 2, 3), float((world.rank + 1) * (k + 1))))


@pytest.mark.parametrize("op_name", ["Sum", "Average"])
def test_grouped_reducescatter_matches_reducescatter_member_by_member(world, nm, op_name):
    op = getattr(dadt, op_name)
    tensors = [torch.arange(2 * world.size * 3, dtype=torch.float32).reshape(2 * world.size, 3) + world.rank,
               torch.ones(world.size + 1, 2) * (world.rank + 1)]
    grouped = dadt.grouped_reducescatter(tensors, name=nm("g"), op=op)
    single = [dadt.reducescatter(t, name=nm("s%d" % i), op=op) for i, t in enumerate(tensors)]
    for g, s in zip(grouped, single):
        assert torch.equal(g, s)


@pytest.mark.parametrize("op_name,factor", [("Sum", "size"), ("Average", 1)])
def test_reducescatter_gradient_is_horovods(world, nm, op_name, factor):
    op = getattr(dadt, op_name)
    scale = world.size if factor == "size" else factor
    x = torch.ones(2 * world.size, 3, requires_grad=True)
    dadt.reducescatter(x, name=nm("single"), op=op).sum().backward()
    assert torch.equal(x.grad, torch.full((2 * world.size, 3), float(scale)))
    ys = [torch.ones(world.size, 2, requires_grad=True) for _ in range(2)]
    for out in dadt.grouped_reducescatter(ys, name=nm("grouped"), op=op):
        out.sum().backward()
    for y in ys:
        assert torch.equal(y.grad, torch.full((world.size, 2), float(scale)))


def test_a_scalar_member_refuses_the_whole_group_before_anything_is_sent(world, nm):
    with pytest.raises(ValueError, match="a scalar has no first dimension"):
        dadt.grouped_reducescatter([torch.ones(world.size), torch.tensor(1.0)], name=nm())
    # Nothing of the refused group is in flight: the same names work at once.
    out = dadt.grouped_reducescatter([torch.ones(world.size), torch.ones(world.size)], name=nm(),
                                     op=dadt.Sum)
    assert all(torch.equal(o, torch.full((1,), float(world.size))) for o in out)
