"""ProcessSet objects and dadt.common.process_sets' own logic, without a running job: argument
checking, ids, repr/eq, the init(process_sets=...) agreement check and the add/remove bookkeeping
(against a stand-in for dadt._core's process-set calls). The collectives on sets run under the
launcher: test/python_multirank/test_process_sets.py."""

import pytest

from dadt.common import process_sets as ps_mod
from dadt.common.process_sets import ProcessSet, global_process_set


class _FakeCore:
    """dadt._core's process-set contract, for one rank of a 4-rank job (ids: lowest free >= 1)."""

    class CoreError(Exception):
        pass

    def __init__(self, rank=1, size=4):
        self._rank, self._size, self.table = rank, size, {0: list(range(size))}

    def is_initialized(self):
        return True

    def rank(self):
        return self._rank

    def size(self):
        return self._size

    def add_process_set(self, ranks):
        for i, r in self.table.items():
            if r == ranks:
                raise ValueError("duplicate process set: ranks %s are already process set %d"
                                 % (ranks, i))
        new = next(i for i in range(1, 100) if i not in self.table)
        self.table[new] = list(ranks)
        return new

    def remove_process_set(self, set_id):
        if set_id == 0:
            raise ValueError("the global process set cannot be removed")
        return self.table.pop(set_id, None) is not None

    def process_set_ids(self):
        return sorted(self.table)

    def process_set_ranks(self, set_id):
        return list(self.table[set_id])


@pytest.fixture
def core(monkeypatch):
    fake = _FakeCore()
    from dadt.common import basics
    monkeypatch.setattr(basics, "_core", fake)
    monkeypatch.setattr(ps_mod, "_core", lambda: fake)
    ps_mod.forget_all()
    yield fake
    ps_mod.forget_all()


def test_ranks_are_sorted_and_unregistered_until_added():
    s = ProcessSet([3, 1])
    assert s.ranks == [1, 3]
    assert s.process_set_id is None
    assert s.size() is None and s.rank() is None and s.included() is None


@pytest.mark.parametrize("bad", [[0, "1"], [0, 1.0], [True], 5, None])
def test_bad_ranks_are_a_value_error_naming_them(bad):
    with pytest.raises(ValueError, match="ProcessSet takes"):
        ProcessSet(bad)


def test_repr_and_eq_follow_horovod():
    a, b = ProcessSet([0, 2]), ProcessSet([2, 0])
    assert str(a) == "ProcessSet(process_set_id=None, ranks=[0, 2], mpi_comm=None)"
    assert repr(a) == str(a)
    assert a == b and hash(a) == hash(b)
    b.process_set_id = 1
    assert a != b
    assert a != [0, 2]
    assert str(global_process_set).startswith("ProcessSet(process_set_id=0,")


def test_add_fills_in_id_and_membership(core):
    s = ps_mod.add_process_set([1, 3])
    assert isinstance(s, ProcessSet) and s.process_set_id == 1
    assert s.size() == 2 and s.rank() == 0 and s.included() is True  # this rank is 1
    other = ps_mod.add_process_set(ProcessSet([0, 2]))
    assert other.process_set_id == 2 and other.rank() is None and other.included() is False
    assert ps_mod.set_id(other) == 2 and ps_mod.set_size(other) == 2
    with pytest.raises(ValueError, match="not a member"):
        ps_mod.set_rank(other)
    assert ps_mod.set_rank(s) == 0


def test_duplicate_is_the_runtime_value_error(core):
    ps_mod.add_process_set([0, 1])
    with pytest.raises(ValueError, match=r"duplicate process set: ranks \[0, 1\] are already "
                                         r"process set 1"):
        ps_mod.add_process_set([1, 0])


def test_remove_clears_every_object_of_the_set_and_ids_are_reused(core):
    s = ps_mod.add_process_set([1, 2])
    twin = ProcessSet([1, 2])
    ps_mod.fill_in_running([twin])
    assert twin.process_set_id == s.process_set_id == 1
    assert ps_mod.remove_process_set(s) is True
    assert s.process_set_id is None and twin.process_set_id is None
    assert s.ranks == [1, 2]  # may be added again
    assert ps_mod.remove_process_set(s) is False  # not registered: no collective
    assert ps_mod.add_process_set(s).process_set_id == 1


def test_removing_the_global_set_is_refused(core):
    with pytest.raises(ValueError, match="global process set"):
        ps_mod.remove_process_set(global_process_set)
    with pytest.raises(ValueError, match="takes a ProcessSet"):
        ps_mod.remove_process_set([0, 1])


def test_collectives_refuse_unregistered_sets_and_other_types(core):
    assert ps_mod.set_id(None) == 0 and ps_mod.set_id(global_process_set) == 0
    assert ps_mod.enqueue_kwargs(global_process_set) == {}
    with pytest.raises(ValueError, match="is not registered"):
        ps_mod.set_id(ProcessSet([0, 1]))
    with pytest.raises(ValueError, match="must be a dadt ProcessSet"):
        ps_mod.set_id([0, 1])
    s = ps_mod.add_process_set([0, 1])
    assert ps_mod.enqueue_kwargs(s) == {"process_set_id": 1}


def test_shutdown_forgets_every_set_but_the_global_one(core):
    s = ps_mod.add_process_set([0, 1])
    ps_mod.forget_all()
    assert s.process_set_id is None
    assert global_process_set.process_set_id == 0


def test_init_lists_must_agree_naming_the_first_rank_that_differs():
    ps_mod.check_same_lists([[[0, 1]], [[0, 1]]])
    with pytest.raises(ValueError, match=r"rank 2 has \[\[0, 2\]\], rank 0 has \[\[0, 1\]\]"):
        ps_mod.check_same_lists([[[0, 1]], [[0, 1]], [[0, 2]], [[0, 3]]])


def test_register_at_init_adds_in_list_order_after_agreement(core):
    a, b = ProcessSet([2, 3]), ProcessSet([0, 1])
    seen = []

    def gather(value):
        seen.append(value)
        return [value] * 4  # every rank passed the same list
    ps_mod.register_at_init([a, [1, 2], b], gather=gather)
    assert seen == [[[2, 3], [1, 2], [0, 1]]]
    assert (a.process_set_id, b.process_set_id) == (1, 3)
    assert global_process_set.ranks == [0, 1, 2, 3]


def test_register_at_init_disagreement_adds_nothing(core):
    with pytest.raises(ValueError, match="same list on every rank"):
        ps_mod.register_at_init([[0, 1]], gather=lambda v: [v, [[0, 2]], v, v])
    assert core.process_set_ids() == [0]


@pytest.mark.parametrize("value", [None, "dynamic"])
def test_register_at_init_none_or_dynamic_adds_nothing(core, value):
    ps_mod.register_at_init(value, gather=lambda v: pytest.fail("no collective expected"))
    assert core.process_set_ids() == [0]


def test_register_at_init_refuses_other_values(core):
    with pytest.raises(ValueError, match="takes a list"):
        ps_mod.register_at_init("static")
    with pytest.raises(ValueError, match="takes a list"):
        ps_mod.register_at_init(ProcessSet([0]))


def test_fill_in_running_needs_registered_sets(core):
    with pytest.raises(ValueError, match="not a registered process set"):
        ps_mod.fill_in_running([[0, 3]])


def test_mpi4py_communicator_gives_its_ranks_in_the_job(core, monkeypatch):
    mpi = pytest.importorskip("mpi4py.MPI")
    comm = mpi.COMM_SELF  # one process: world rank 0 (MPI initialises as a singleton)
    s = ProcessSet(comm)
    assert s.mpi_comm is comm and s.ranks is None
    assert ps_mod.add_process_set(s).ranks == [mpi.COMM_WORLD.Get_rank()]


def test_generated_names_are_counted_per_set_and_restart_at_removal(core):
    from dadt.common.util import collective_name, reset_collective_names
    reset_collective_names()
    s = ps_mod.add_process_set([1, 2])
    assert collective_name("barrier", None, s) == "barrier.set1.noname.0"
    assert collective_name("barrier", None, s) == "barrier.set1.noname.1"
    # A member-only collective does not move the global counter the other ranks also use.
    assert collective_name("barrier", None) == "barrier.noname.0"
    assert collective_name("barrier", None, global_process_set) == "barrier.noname.1"
    assert collective_name("barrier", "mine", s) == "mine"
    ps_mod.remove_process_set(s)
    again = ps_mod.add_process_set([0, 3])  # reuses id 1
    assert collective_name("barrier", None, again) == "barrier.set1.noname.0"
