"""mode="gossip" (AD-PSGD) against its equations.

The loss <w, x> has a gradient (x) that does not depend on the weights, so whatever pairs the
coordinator makes and whenever the swaps land, gossip keeps the sum of the weights over the ranks
(each swap adds opposite halves on its two ranks) and flush() averages them: after flush, every
rank must hold exactly the mean over ranks of what plain local SGD would reach on each rank,
w0 - lr * sum_t g_r(t). The reference is computed here from that rule, not from dadt's code.
"""
import pytest
import torch

import dadt.torch as dadt
from collective_utils import assert_rows_identical, gather_rows

LR = 0.1
STEPS = 12


def _grad(rank, step):
    base = torch.tensor([1.0, 2.0, 4.0, -1.0, 3.0], dtype=torch.float64)
    return base * (rank + 1) * (1 + (step % 3)) + 0.25 * rank


class _Dot(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(5, dtype=torch.float64))

    def forward(self, x):
        return (self.w * x).sum()


def _train(world, graph, flush=True):
    model = _Dot()
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                    named_parameters=model.named_parameters(), mode="gossip",
                                    graph=graph)
    for t in range(STEPS):
        opt.zero_grad()
        model(_grad(world.rank, t)).backward()
        opt.step()
        dadt.barrier()  # gives every exchange the chance to find its partner
    before_flush = model.w.detach().clone()
    if flush:
        opt.flush()
    return model, opt, before_flush


@pytest.mark.parametrize("graph", ["complete", "ring", "exponential", "bipartite"])
def test_flush_leaves_every_rank_with_the_mean_of_the_local_trajectories(world, nm, graph):
    model, opt, before_flush = _train(world, graph)
    expected = torch.stack([-LR * sum(_grad(r, t) for t in range(STEPS))
                            for r in range(world.size)]).mean(dim=0)
    rows = gather_rows(model.w, nm("weights"))
    exchanges = dadt.allgather(torch.tensor([opt._engine.exchanges]), name=nm("count"))
    assert_rows_identical(rows, "after flush")
    torch.testing.assert_close(model.w.detach(), expected, rtol=0, atol=1e-12)
    if world.size > 1:
        assert exchanges.sum().item() > 0, "no exchange found a partner in %d steps" % STEPS
        local = -LR * sum(_grad(world.rank, t) for t in range(STEPS))
        moved = dadt.allgather(torch.tensor([int(not torch.allclose(before_flush, local))]),
                               name=nm("moved"))
        assert moved.sum().item() > 0, "the exchanges never changed a rank's weights"


def test_gossip_refuses_what_it_cannot_do(world):
    model = _Dot()
    sgd = torch.optim.SGD(model.parameters(), lr=LR)
    with pytest.raises(ValueError, match="graph must be one of"):
        dadt.DistributedOptimizer(sgd, named_parameters=model.named_parameters(), mode="gossip",
                                  graph="star")
    with pytest.raises(ValueError, match="graph= is an option of mode='gossip'"):
        dadt.DistributedOptimizer(sgd, named_parameters=model.named_parameters(), graph="ring")
    with pytest.raises(ValueError, match="compression"):
        dadt.DistributedOptimizer(sgd, named_parameters=model.named_parameters(), mode="gossip",
                                  compression=dadt.Compression.fp16)


def test_a_checkpoint_holds_every_exchange_that_found_a_partner(world, nm):
    model, opt, _ = _train(world, "complete", flush=False)
    if world.size > 1:
        assert opt._engine._pending, "each step leaves an exchange in flight"
    state = opt.state_dict()  # applies the exchanges that found a partner, withdraws the others
    assert "state" in state and not opt._engine._pending
    opt.flush()
    assert_rows_identical(gather_rows(model.w, nm("weights")), "after flush")


def _sgp_reference(n, steps):
    """Every rank's z = x / w after each step of SGP with one step of overlap, simulated from
    the rule of docs/training-modes.md: x += the optimizer's step; add what was pushed to this
    rank at the step before; push half of (x, w) to rank + 2^(t mod log2 n)."""
    hops = 0
    while (1 << hops) < n:
        hops += 1
    x = [torch.zeros(5, dtype=torch.float64) for _ in range(n)]
    w = [1.0] * n
    in_flight, history = [], []
    for t in range(steps):
        for r in range(n):
            x[r] = x[r] - LR * _grad(r, t)
        for dst, xm, wm in in_flight:
            x[dst] = x[dst] + xm
            w[dst] += wm
        in_flight = []
        if n > 1:
            for r in range(n):
                x[r], w[r] = x[r] / 2, w[r] / 2
                in_flight.append(((r + (1 << (t % hops))) % n, x[r].clone(), w[r]))
        history.append([x[r] / w[r] for r in range(n)])
    return history


def test_sgp_follows_push_sum_step_by_step(world, nm):
    model = _Dot()
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                    named_parameters=model.named_parameters(), mode="gossip",
                                    algorithm="sgp")
    got = []
    for t in range(STEPS):
        opt.zero_grad()
        model(_grad(world.rank, t)).backward()
        opt.step()
        got.append(model.w.detach().clone())
    opt.flush()
    rows = gather_rows(model.w, nm("weights"))
    reference = _sgp_reference(world.size, STEPS)
    for t in range(STEPS):
        torch.testing.assert_close(got[t], reference[t][world.rank], rtol=0, atol=1e-12,
                                   msg="rank %d after step %d" % (world.rank, t))
    assert_rows_identical(rows, "after flush")
    torch.testing.assert_close(model.w.detach(), torch.stack(reference[-1]).mean(dim=0),
                               rtol=0, atol=1e-12)


def test_sgp_flush_after_unequal_steps_is_an_error_on_every_rank(world, nm, require_two_ranks):
    from collective_utils import Deadline
    model = _Dot()
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                    named_parameters=model.named_parameters(), mode="gossip",
                                    algorithm="sgp")
    for t in range(3 + (world.rank == 0)):  # rank 0 takes one step more
        opt.zero_grad()
        model(_grad(world.rank, t)).backward()
        opt.step()
    with Deadline():
        with pytest.raises(ValueError, match="same number of steps.*took 3 to 4 steps"):
            opt.flush()
    # Nothing is left in flight: the job goes on.
    assert dadt.allreduce(torch.ones(1), name=nm("after"), op=dadt.Sum).item() == world.size
