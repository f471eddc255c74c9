"""Process sets (docs/process-sets.md) under the launcher: collectives of disjoint and overlapping
sets at once, a set of one rank, removal while another set works, the errors of a non-member and
of ranks that disagree. Written for 4 ranks (the layouts shrink with size(); tests that need more
ranks skip themselves on every rank alike).

Every rank calls add_process_set / remove_process_set (collective over the job) in the same order;
only a set's members call its collectives.
"""
import pytest
import torch

import dadt.torch as dadt
from dadt.common.basics import _core


def _need(ranks, reason):
    """Skips (on every rank alike: it depends on size() only) below `ranks` ranks."""
    if dadt.size() < ranks:
        pytest.skip(reason)


def _split():
    """Even and odd ranks: two disjoint sets (the odd one is empty at size 1)."""
    return ([r for r in range(dadt.size()) if r % 2 == 0],
            [r for r in range(dadt.size()) if r % 2 == 1])


@pytest.fixture
def sets():
    """Sets registered by a test, removed (collectively, on every rank) at its end."""
    made = []
    yield made
    for s in reversed(made):
        if s.process_set_id is not None:
            dadt.remove_process_set(s)


def _expected_sum(members, shape, salt):
    return sum(torch.full(shape, float(r + salt)) for r in members)


def test_disjoint_sets_run_the_same_names_concurrently(sets, nm):
    _need(2, "two sets need 2 ranks")
    even, odd = _split()
    sets += [dadt.add_process_set(even), dadt.add_process_set(odd)]
    mine = sets[0] if dadt.rank() in even else sets[1]
    other = sets[1] if mine is sets[0] else sets[0]
    assert mine.included() and not other.included()
    assert mine.rank() == mine.ranks.index(dadt.rank()) and mine.size() == len(mine.ranks)
    salt = 10 if mine is sets[0] else 100  # different tensors in the two sets, same names
    shape = (3, 2)
    handles = [dadt.allreduce_async(torch.full(shape, float(dadt.rank() + salt)), name=nm("same"),
                                    op=dadt.Sum, process_set=mine),
               dadt.allreduce_async(torch.full(shape, float(dadt.rank() + salt)), name=nm("avg"),
                                    process_set=mine)]
    gathered = dadt.allgather(torch.full((dadt.rank() + 1, 2), float(dadt.rank())),
                              name=nm("gather"), process_set=mine)
    root = mine.ranks[-1]
    bcast = dadt.broadcast(torch.full((4,), float(dadt.rank())), root_rank=root,
                           name=nm("bcast"), process_set=mine)
    rows = 2 * mine.size() + 1
    scattered = dadt.reducescatter(torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2),
                                   name=nm("rs"), op=dadt.Sum, process_set=mine)
    a2a, received = dadt.alltoall(torch.full((mine.size(),), float(dadt.rank())),
                                  splits=[1] * mine.size(), name=nm("a2a"), process_set=mine)
    summed, averaged = [dadt.synchronize(h) for h in handles]
    dadt.barrier(process_set=mine)

    assert torch.equal(summed, _expected_sum(mine.ranks, shape, salt))
    assert torch.allclose(averaged, _expected_sum(mine.ranks, shape, salt) / mine.size())
    want = torch.cat([torch.full((r + 1, 2), float(r)) for r in mine.ranks])  # set-rank order
    assert torch.equal(gathered, want)
    assert torch.equal(bcast, torch.full((4,), float(root)))
    first, count = _core.scatter_rows(rows, mine.size(), mine.rank())
    full = torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2) * mine.size()
    assert torch.equal(scattered, full[first:first + count])
    assert torch.equal(a2a, torch.tensor([float(r) for r in mine.ranks]))
    assert received.tolist() == [1] * mine.size()


def test_set_of_one_rank_completes_locally(sets, nm):
    _need(2, "at size 1 the one-rank set is the global set")
    last = dadt.size() - 1
    sets.append(dadt.add_process_set([last]))
    one = sets[0]
    assert one.size() == 1
    if dadt.rank() == last:
        t = torch.arange(6, dtype=torch.float32)
        assert torch.equal(dadt.allreduce(t, name=nm("avg"), process_set=one), t)
        assert torch.equal(dadt.allgather(t, name=nm("ag"), process_set=one), t)
        assert torch.equal(dadt.broadcast(t, last, name=nm("bc"), process_set=one), t)
        dadt.barrier(process_set=one)
        assert one.rank() == 0
    else:
        assert one.rank() is None and one.included() is False


def test_overlapping_sets(sets, nm):
    _need(3, "two overlapping sets that differ need 3 ranks")
    n = dadt.size()
    low, high = list(range(0, n - 1)), list(range(1, n))  # share ranks 1 .. n-2
    sets += [dadt.add_process_set(low), dadt.add_process_set(high)]
    handles = []
    for s, salt in zip(sets, (0, 50)):  # every rank in the same order: low, then high
        if dadt.rank() in s.ranks:
            handles.append((s, salt, dadt.allreduce_async(
                torch.full((5,), float(dadt.rank() + salt)), name=nm("x"), op=dadt.Sum,
                process_set=s)))
    for s, salt, h in handles:
        assert torch.equal(dadt.synchronize(h), _expected_sum(s.ranks, (5,), salt))
    grads = dadt.grouped_allreduce([torch.ones(2), torch.ones(3)], name=nm("g"), op=dadt.Sum,
                                   process_set=sets[1]) if dadt.rank() in high else None
    if grads is not None:
        assert [g.tolist() for g in grads] == [[len(high)] * 2, [len(high)] * 3]


def test_removing_a_set_while_another_is_in_use(sets, nm):
    _need(4, "two sets of two ranks need 4 ranks")
    a, b = dadt.add_process_set([0, 1]), dadt.add_process_set([2, 3])
    sets += [a, b]
    busy = []
    if dadt.rank() in (2, 3):  # set b has work in flight while every rank removes set a
        busy = [dadt.allreduce_async(torch.full((64,), float(i + dadt.rank())), name=nm("b%d" % i),
                                     op=dadt.Sum, process_set=b) for i in range(8)]
    assert dadt.remove_process_set(a) is True
    assert a.process_set_id is None and a.size() is None
    for i, h in enumerate(busy):
        assert torch.equal(dadt.synchronize(h), torch.full((64,), float(2 * i + 5)))
    with pytest.raises(ValueError, match="not registered"):
        dadt.allreduce(torch.ones(1), name=nm("gone"), process_set=a)
    assert dadt.remove_process_set(a) is False
    assert _core.process_set_ids() == [0, b.process_set_id]
    if dadt.rank() in (2, 3):
        assert dadt.allreduce(torch.ones(1), name=nm("b.after"), op=dadt.Sum,
                              process_set=b).item() == 2.0


def test_removing_a_set_fails_its_pending_tensor(sets, nm):
    _need(3, "a set of 2 that is not the global set needs 3 ranks")
    pair = dadt.add_process_set([0, 1])
    sets.append(pair)
    h = None
    if dadt.rank() == 0:  # rank 1 never submits: the tensor is pending when the set goes
        h = dadt.allreduce_async(torch.ones(3), name=nm("orphan"), process_set=pair)
    dadt.remove_process_set(pair)
    if h is not None:
        with pytest.raises(Exception, match="removed"):
            dadt.synchronize(h)
    dadt.barrier()


def test_non_member_gets_a_value_error_alone(sets, nm):
    _need(3, "a non-member beside a 2-rank set needs 3 ranks")
    pair = dadt.add_process_set([0, 1])
    sets.append(pair)
    if dadt.rank() not in pair.ranks:
        with pytest.raises(ValueError, match="not a member"):
            dadt.allreduce(torch.ones(2), name=nm("x"), process_set=pair)
        with pytest.raises(ValueError, match="not a member"):
            dadt.broadcast(torch.ones(2), 0, name=nm("b"), process_set=pair)
    else:  # the members are not disturbed
        assert dadt.allreduce(torch.ones(2), name=nm("x"), op=dadt.Sum,
                              process_set=pair).tolist() == [2.0, 2.0]
        with pytest.raises(ValueError):  # root outside the set
            dadt.broadcast(torch.ones(2), 2, name=nm("root"), process_set=pair)
    dadt.barrier()


def test_disagreement_and_bad_sets_are_a_value_error_on_every_rank(sets):
    _need(3, "disagreeing lists need 3 ranks")
    mine = [0, 1] if dadt.rank() == 0 else [0, 2]
    with pytest.raises(ValueError):
        dadt.add_process_set(mine)
    sets.append(dadt.add_process_set([0, 1]))
    with pytest.raises(ValueError, match="duplicate process set"):
        dadt.add_process_set([1, 0])
    with pytest.raises(ValueError):
        dadt.add_process_set([0, dadt.size()])
    with pytest.raises(ValueError):
        dadt.add_process_set([])
    with pytest.raises(ValueError):
        dadt.remove_process_set(dadt.global_process_set)
    assert _core.process_set_ids() == [0, sets[0].process_set_id]  # nothing half-registered


def test_gradients_use_the_sets_size(sets, nm):
    _need(2, "sets of a subset need 2 ranks")
    even, odd = _split()
    sets += [dadt.add_process_set(even), dadt.add_process_set(odd)]
    mine = sets[0] if dadt.rank() in even else sets[1]
    n = mine.size()
    x = torch.ones(4 * n, 3, requires_grad=True)
    dadt.reducescatter(x, name=nm("rs"), op=dadt.Sum, process_set=mine).backward(
        torch.ones(4, 3))
    assert torch.equal(x.grad, torch.full((4 * n, 3), float(n)))  # Horovod: times set size
    y = torch.ones(2, 3, requires_grad=True)
    dadt.allgather(y, name=nm("ag"), process_set=mine).sum().backward()
    assert torch.equal(y.grad, torch.ones(2, 3))


def test_objects_and_parameters_on_a_set(sets, nm):
    _need(2, "a set of a subset needs 2 ranks")
    even, odd = _split()
    sets += [dadt.add_process_set(even), dadt.add_process_set(odd)]
    mine = sets[0] if dadt.rank() in even else sets[1]
    root = mine.ranks[0]
    got = dadt.broadcast_object({"from": dadt.rank()}, root_rank=root, name=nm("obj"),
                                process_set=mine)
    assert got == {"from": root}
    assert dadt.allgather_object(dadt.rank(), name=nm("objs"), process_set=mine) == mine.ranks
    model = torch.nn.Linear(3, 2)
    torch.nn.init.constant_(model.weight, float(dadt.rank()))
    dadt.broadcast_parameters(model.state_dict(), root_rank=root, process_set=mine)
    assert torch.equal(model.weight, torch.full((2, 3), float(root)))


def test_distributed_optimizer_averages_within_its_set_only(sets, nm):
    _need(2, "a set of a subset needs 2 ranks")
    even, odd = _split()
    sets += [dadt.add_process_set(even), dadt.add_process_set(odd)]
    mine = sets[0] if dadt.rank() in even else sets[1]
    model = torch.nn.Linear(2, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                    named_parameters=[(nm("w"), model.weight)], process_set=mine)
    model(torch.full((1, 2), float(dadt.rank() + 1))).sum().backward()  # grad = rank + 1
    opt.step()
    mean = sum(r + 1 for r in mine.ranks) / mine.size()
    assert torch.allclose(model.weight, torch.full((1, 2), -mean))
    with pytest.raises(ValueError, match="mode"):
        dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                  named_parameters=[(nm("w2"), model.weight)], process_set=mine,
                                  mode="async")


def test_init_registers_the_listed_sets_and_shutdown_drops_them(nm):
    _need(2, "sets of a subset need 2 ranks")
    even, odd = _split()
    kept = dadt.add_process_set(even)
    dadt.barrier()  # shutdown() ends the job for every rank: nobody may still be working
    dadt.shutdown()
    assert kept.process_set_id is None  # dropped with the incarnation
    listed = [dadt.ProcessSet(even), dadt.ProcessSet(odd)]
    dadt.init(process_sets=listed)
    try:
        assert [s.process_set_id for s in listed] == [1, 2]
        assert _core.process_set_ids() == [0, 1, 2]
        assert dadt.global_process_set.ranks == list(range(dadt.size()))
        mine = listed[0] if dadt.rank() in even else listed[1]
        assert dadt.allreduce(torch.ones(1), name=nm("x"), op=dadt.Sum,
                              process_set=mine).item() == mine.size()
        dadt.init(process_sets=[dadt.ProcessSet(even)])  # running: fills in ids, adds nothing
        assert _core.process_set_ids() == [0, 1, 2]
    finally:
        dadt.barrier()
        dadt.shutdown()
        dadt.init()
    assert listed[0].process_set_id is None and _core.process_set_ids() == [0]


def test_init_with_different_lists_is_a_value_error_on_every_rank():
    _need(2, "disagreeing lists need 2 ranks")
    mine = [[0]] if dadt.rank() == 0 else [[1]]
    dadt.barrier()
    dadt.shutdown()
    try:
        with pytest.raises(ValueError, match="rank 1 has"):
            dadt.init(process_sets=mine)
        assert _core.process_set_ids() == [0]
        assert dadt.is_initialized()  # the runtime runs; only the sets were refused
    finally:
        dadt.barrier()
        dadt.shutdown()
        dadt.init()
