"""Contiguous views that start inside a larger storage (DLPack byte offsets), and autograd through allreduce."""
import torch

import dadt.torch as dadt
from collective_utils import assert_equal, inputs_for, reduce_expected, values


def test_allreduce_of_offset_views(world, nm):
    base = inputs_for("Sum", (40,), torch.float32, world.rank, world.size)
    storage = base.clone()
    view = storage[7:30]  # contiguous, storage offset 7
    assert view.is_contiguous() and view.storage_offset() == 7
    out = dadt.allreduce(view, name=nm("copy"), op=dadt.Sum)
    ret = dadt.allreduce_(view, name=nm("inplace"), op=dadt.Sum)
    full = reduce_expected("Sum", (40,), torch.float32, world.size)
    assert_equal(out, full[7:30], "allreduce of a view")
    assert ret is view
    assert_equal(storage[7:30], full[7:30], "allreduce_ of a view writes the view")
    assert_equal(storage[:7], base[:7], "allreduce_ of a view must not touch the storage before it")
    assert_equal(storage[30:], base[30:], "allreduce_ of a view must not touch the storage after it")


def test_broadcast_into_row_of_matrix(world, nm):
    storage = values((4, 6), torch.int64, world.rank)
    before = storage.clone()
    dadt.broadcast_(storage[2], root_rank=0, name=nm())  # row 2: offset 12 elements
    assert_equal(storage[2], values((4, 6), torch.int64, 0)[2], "broadcast_ of a row")
    for r in (0, 1, 3):
        assert_equal(storage[r], before[r], f"row {r} must be untouched")


def test_allgather_alltoall_reducescatter_of_offset_views(world, nm):
    n, r = world.size, world.rank
    big = values((2 * n + 10, 3), torch.float32, r)
    gathered = dadt.allgather(big[5:7], name=nm("allgather"))
    out, _ = dadt.alltoall(big[3:3 + n], splits=torch.ones(n, dtype=torch.int32), name=nm("alltoall"))
    src = inputs_for("Sum", (n + 5, 3), torch.float32, r, n)
    padded = torch.cat([torch.full((4, 3), 99.0), src])
    scattered = dadt.reducescatter(padded[4:], name=nm("reducescatter"), op=dadt.Sum)

    assert_equal(gathered, torch.cat([values((2 * n + 10, 3), torch.float32, q)[5:7] for q in range(n)]), "allgather")
    assert_equal(out, torch.cat([values((2 * n + 10, 3), torch.float32, q)[3 + r:4 + r] for q in range(n)]),
                 "alltoall")
    full = reduce_expected("Sum", (n + 5, 3), torch.float32, n)
    base, extra = divmod(n + 5, n)
    start = r * base + min(r, extra)
    assert_equal(scattered, full[start:start + base + (1 if r < extra else 0)], "reducescatter")


def test_allreduce_autograd(world, nm):
    x = torch.full((3,), float(world.rank + 1), requires_grad=True)
    y = dadt.allreduce(x, name=nm("sum"), op=dadt.Sum)
    (y * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    z = torch.full((2,), float(world.rank), requires_grad=True)
    w = dadt.allreduce(z, name=nm("avg"), op=dadt.Average)
    w.sum().backward()
    # d/dx of sum_r x_r is the allreduce (Sum) of the upstream gradients.
    assert_equal(x.grad, torch.tensor([1.0, 2.0, 3.0]) * world.size, "gradient through allreduce Sum")
    assert_equal(z.grad, torch.ones(2), "gradient through allreduce Average")
