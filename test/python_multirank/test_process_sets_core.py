"""Process sets through dadt._core, the contract the Python layer builds on (docs/process-sets.md).

Runs at any size >= 2 (the sets are derived from size()); at 4 ranks: two disjoint sets {0, 1} and
{2, 3} reduce the same name at once, a set of one rank {3}, the overlapping set {1, 2, 3}, a remove
while another set is busy, and a collective from a non-member failing on the caller only. Every
rank adds and removes the same sets in the same order; each test removes what it added.
"""
import pytest
import torch

import dadt.torch as dadt
from dadt import _core

multi_rank = pytest.mark.usefixtures("require_two_ranks")


def run(op, name, tensor, out=None, set_id=0, reduce_op=_core.REDUCE_SUM, root=0):
    h = _core.enqueue(op, name, tensor.__dlpack__(), None if out is None else out.__dlpack__(),
                      reduce_op=reduce_op, root_rank=root, process_set_id=set_id)
    try:
        _core.wait(h)
        capsule = _core.take_output(h)
        return None if capsule is None else torch.from_dlpack(capsule)
    finally:
        _core.release(h)


@multi_rank
def test_disjoint_sets_reduce_the_same_name_at_once(world, nm):
    n, r = world.size, world.rank
    low, high = list(range(n // 2)), list(range(n // 2, n))
    low_id = _core.add_process_set(low)
    high_id = _core.add_process_set(high)
    ids = _core.process_set_ids()
    ranks = _core.process_set_ranks(high_id)
    mine, members = (low_id, low) if r in low else (high_id, high)
    total = torch.full((6,), float(r + 1))
    run(_core.OP_ALLREDUCE, nm("w"), total, total, set_id=mine)
    mean = torch.full((6,), float(r + 1))
    run(_core.OP_ALLREDUCE, nm("avg"), mean, mean, set_id=mine, reduce_op=_core.REDUCE_AVERAGE)
    gathered = run(_core.OP_ALLGATHER, nm("g"), torch.tensor([float(r)]), set_id=mine)
    repeated = []  # the same name again: negotiated through the response cache's refs
    for i in range(4):
        t = torch.full((3,), float(i))
        run(_core.OP_ALLREDUCE, nm("rep"), t, t, set_id=mine)
        repeated.append(t[0].item())
    assert _core.remove_process_set(low_id) is True
    assert _core.remove_process_set(high_id) is True
    assert _core.remove_process_set(high_id) is False
    assert low_id in ids and high_id in ids and ids[0] == 0
    assert ranks == high
    assert total.tolist() == [float(sum(m + 1 for m in members))] * 6
    assert mean.tolist() == [sum(m + 1 for m in members) / len(members)] * 6
    assert gathered.tolist() == [float(m) for m in members]
    assert repeated == [float(i * len(members)) for i in range(4)]


@multi_rank
def test_a_set_of_one_and_an_overlapping_set(world, nm):
    n, r = world.size, world.rank
    alone = _core.add_process_set([n - 1])
    upper = list(range(1, n))  # overlaps the global set and, at 3+ ranks, {n - 1}
    upper_id = _core.add_process_set(upper) if n > 2 else None
    own = torch.full((3,), float(r + 1))
    if r == n - 1:
        run(_core.OP_ALLREDUCE, nm("one"), own, own, set_id=alone, reduce_op=_core.REDUCE_AVERAGE)
    got = rows = None
    if upper_id is not None and r in upper:
        got = torch.full((2,), float(10 * r))
        run(_core.OP_BROADCAST, nm("b"), got, got, set_id=upper_id, root=upper[-1])
        rows = run(_core.OP_REDUCESCATTER, nm("rs"), torch.ones(5, 2), set_id=upper_id)
    assert _core.remove_process_set(alone)
    if upper_id is not None:
        assert _core.remove_process_set(upper_id)
    if r == n - 1:
        assert own.tolist() == [float(n)] * 3
    if got is not None:
        assert got.tolist() == [10.0 * upper[-1]] * 2  # root is a global rank
        _, count = _core.scatter_rows(5, len(upper), upper.index(r))
        assert rows.shape == (count, 2) and rows.flatten().tolist() == [float(len(upper))] * 2 * count


@multi_rank
def test_remove_while_another_set_is_busy(world, nm):
    n, r = world.size, world.rank
    low, high = list(range(n // 2)), list(range(n // 2, n))
    low_id = _core.add_process_set(low)
    high_id = _core.add_process_set(high)
    busy, handles = [], []
    if r in high:
        for i in range(10):
            t = torch.ones(10000)
            busy.append(t)
            handles.append(_core.enqueue(_core.OP_ALLREDUCE, nm(f"t{i}"), t.__dlpack__(),
                                         t.__dlpack__(), reduce_op=_core.REDUCE_SUM,
                                         process_set_id=high_id))
    removed = _core.remove_process_set(low_id)
    for h in handles:
        _core.wait(h)
        _core.release(h)
    assert _core.remove_process_set(high_id)
    assert removed is True
    assert low_id not in _core.process_set_ids()
    for t in busy:
        assert t[0].item() == float(len(high))


@multi_rank
def test_errors_non_member_on_the_caller_refused_adds_on_every_rank(world, nm):
    n, r = world.size, world.rank
    first = _core.add_process_set([0])
    err = None
    if r != 0:  # not a member: refused at once, on this rank only
        try:
            _core.enqueue(_core.OP_ALLREDUCE, nm("x"), torch.ones(2).__dlpack__(),
                          torch.ones(2).__dlpack__(), process_set_id=first)
        except _core.CoreError as e:
            err = e
    try:
        _core.add_process_set([0])
        dup = None
    except ValueError as e:
        dup = e
    try:
        _core.add_process_set([0, 1] if r == 0 else [1, 0, n])
        differ = None
    except ValueError as e:
        differ = e
    try:
        _core.remove_process_set(0)
        global_err = None
    except ValueError as e:
        global_err = e
    assert _core.remove_process_set(first)
    with pytest.raises(ValueError, match=f"process set {first} is not registered"):
        _core.process_set_ranks(first)
    if r != 0:
        assert err is not None and err.code == _core.ERR_INVALID_ARGUMENT
        assert f"rank {r} is not a member of process set {first} (ranks [0])" in str(err)
    assert str(dup) == f"duplicate process set: ranks [0] are already process set {first} (ranks [0])"
    assert "ranks disagree on add_process_set" in str(differ)
    assert "cannot be removed" in str(global_err)


def test_global_set_and_lookups(world, nm):
    ids = _core.process_set_ids()
    ranks = _core.process_set_ranks(0)
    try:  # set changes go through add/remove_process_set only, never through enqueue
        _core.enqueue(7, nm("op"), None, None)
        raw = None
    except _core.CoreError as e:
        raw = e
    assert ids[0] == 0 and ids == sorted(ids)
    assert ranks == list(range(world.size))
    assert raw is not None and raw.code == _core.ERR_INVALID_ARGUMENT and "unknown op_type 7" in str(raw)
    with pytest.raises(ValueError, match="process set 999 is not registered"):
        _core.process_set_ranks(999)


def test_shutdown_drops_every_set(nm):
    # Runs last in this file: a fresh init() has only the global set.
    if dadt.size() > 1:
        _core.add_process_set([0])
    dadt.shutdown()
    dadt.init()
    assert _core.process_set_ids() == [0]
