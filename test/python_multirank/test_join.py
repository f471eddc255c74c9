"""join(): ranks with less work join early and contribute zeros to the others' allreduces."""
import torch

import dadt.torch as dadt
from collective_utils import assert_equal


def test_join_uneven_allreduces(world, nm):
    r, n = world.rank, world.size
    results = []
    # Rank r runs r + 1 steps, so at step i only ranks r >= i still take part.
    for i in range(r + 1):
        s = dadt.allreduce(torch.full((4,), float(r + 1)), name=nm(f"sum{i}"), op=dadt.Sum)
        a = dadt.allreduce(torch.full((3,), float(r + 1), dtype=torch.float64), name=nm(f"avg{i}"), op=dadt.Average)
        k = dadt.allreduce(torch.full((2, 2), r + 1, dtype=torch.int32), name=nm(f"int{i}"), op=dadt.Sum)
        results.append((s, a, k))
    last = dadt.join()
    # Everyone together again: the job is usable and agrees on who joined last.
    lasts = dadt.allgather(torch.tensor([last], dtype=torch.int64), name=nm("last"))

    for i, (s, a, k) in enumerate(results):
        total = sum(q + 1 for q in range(i, n))  # joined ranks contribute zeros
        assert_equal(s, torch.full((4,), float(total)), f"step {i} Sum")
        assert torch.allclose(a, torch.full((3,), total / n, dtype=torch.float64), rtol=1e-12, atol=0), (
            f"step {i}: Average must divide by size() ({n}): got {a.tolist()}, expected {total / n}")
        assert_equal(k, torch.full((2, 2), total, dtype=torch.int32), f"step {i} int Sum")
    # The last rank has the most steps: its last allreduce can only finish after all others joined.
    assert last == n - 1, f"join() returned {last}, expected the last rank to join ({n - 1})"
    assert lasts.tolist() == [n - 1] * n


def test_join_without_work(world, nm):
    last = dadt.join()
    lasts = dadt.allgather(torch.tensor([last], dtype=torch.int64), name=nm())
    assert 0 <= last < world.size
    assert lasts.tolist() == [last] * world.size, f"ranks disagree on the last joined rank: {lasts.tolist()}"


def test_join_twice_in_a_row(world, nm):
    # A second round of uneven work after a first join.
    lasts = []
    for rnd in range(2):
        for i in range(world.size - world.rank):  # reversed: rank 0 has the most work
            dadt.allreduce(torch.ones(2), name=nm(f"r{rnd}.{i}"), op=dadt.Sum)
        lasts.append(dadt.join())
    out = dadt.allreduce(torch.ones(3), name=nm("after"), op=dadt.Sum)
    assert lasts == [0, 0], f"join() returned {lasts}, expected rank 0 (most work) to join last"
    assert_equal(out, torch.full((3,), float(world.size)), "allreduce after join")
