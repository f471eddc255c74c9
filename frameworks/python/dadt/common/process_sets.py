"""Process sets: groups of ranks that run collectives among themselves (Horovod's API).

    even = dadt.add_process_set([0, 2])            # collective over every rank
    dadt.allreduce(t, process_set=even)            # only ranks 0 and 2 take part
    dadt.remove_process_set(even)                  # collective again; even.process_set_id -> None

The runtime keeps the table of sets (docs/process-sets.md): ``dadt._core.add_process_set`` and
``remove_process_set`` are negotiated over the global set, so every rank gets the same id, and
disagreement, a duplicate, a bad rank or an empty set is a ValueError on every rank. This module
keeps the Python objects that stand for the sets and fills in or clears their ids; every front
end (torch, TensorFlow, Keras, JAX) re-exports it and turns ``process_set=`` into an id with
`set_id`.

Adding and removing after ``init()`` is always allowed (Horovod needs
``HOROVOD_DYNAMIC_PROCESS_SETS=1``; docs/api.md, "Differences from Horovod").
"""

from typing import Any, Callable, Dict, List, Optional, Sequence

from dadt.common.util import NOT_INITIALIZED

__all__ = ["ProcessSet", "global_process_set", "add_process_set", "remove_process_set"]


def _is_mpi_comm(obj: Any) -> bool:
    """True for an mpi4py communicator (without importing mpi4py when the caller did not)."""
    import sys
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and isinstance(obj, mpi.Comm)


class ProcessSet:
    """A set of dadt processes that run collectives together.

    Made from a list of global ranks (kept sorted) or from an mpi4py communicator (its processes'
    ranks in the job). Pass it to ``init(process_sets=[...])`` or ``add_process_set()``; once
    registered, ``process_set_id`` is its id in the runtime (None before, and again after
    ``remove_process_set`` or ``shutdown``).
    """

    process_set_id: Optional[int] = None
    ranks: Optional[List[int]] = None
    mpi_comm: Any = None

    def __init__(self, ranks_or_comm: Any):
        if _is_mpi_comm(ranks_or_comm):
            self.mpi_comm = ranks_or_comm
            return
        try:
            ranks = list(ranks_or_comm)
        except TypeError:
            raise ValueError("ProcessSet takes a list of ranks or an mpi4py communicator, got %s"
                             % type(ranks_or_comm).__name__) from None
        bad = [r for r in ranks if isinstance(r, bool) or not isinstance(r, int)]
        if bad:
            raise ValueError("ProcessSet takes a list of int ranks; got %r in %r"
                             % (bad[0], ranks))
        self.ranks = sorted(int(r) for r in ranks)

    def size(self) -> Optional[int]:
        """The number of processes in the set; None while it is not registered."""
        if self.process_set_id is None:
            return None
        return len(self.ranks)

    def rank(self) -> Optional[int]:
        """This process's rank within the set (its place among ``ranks``); None while the set is
        not registered or when this process is not a member."""
        if self.process_set_id is None:
            return None
        from dadt.common.basics import rank
        try:
            return self.ranks.index(rank())
        except ValueError:
            return None

    def included(self) -> Optional[bool]:
        """True when this process belongs to the set; None while it is not registered."""
        if self.process_set_id is None:
            return None
        return self.rank() is not None

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, ProcessSet):
            return NotImplemented
        return self.ranks == other.ranks and self.process_set_id == other.process_set_id

    def __hash__(self) -> int:
        return hash(tuple(self.ranks) if self.ranks is not None else id(self))

    def __str__(self) -> str:
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=%s)" % (
            self.process_set_id, self.ranks, self.mpi_comm)

    __repr__ = __str__


# Every rank, id 0, from init() to shutdown(); its ranks are filled in by init().
global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

# id -> the ProcessSet objects registered under it (several objects may stand for one set).
_registered: Dict[int, List[ProcessSet]] = {}


def _core():
    from dadt.common.basics import _core as core
    return core


def _require_initialized() -> None:
    if not _core().is_initialized():
        raise ValueError(NOT_INITIALIZED)


def _job_ranks_of_comm(comm: Any) -> List[int]:
    """The job ranks of an mpi4py communicator's processes, in the communicator's order. The job
    is MPI_COMM_WORLD, or the communicator init(comm=...) was given (dadt.common.basics)."""
    from mpi4py import MPI
    from dadt.common import basics
    job = basics.job_comm() or MPI.COMM_WORLD
    group, job_group = comm.Get_group(), job.Get_group()
    try:
        ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), job_group)
    finally:
        group.Free()
        job_group.Free()
    if any(r == MPI.UNDEFINED for r in ranks):
        raise ValueError("the communicator of %s has processes outside the dadt job" % comm)
    return [int(r) for r in ranks]


def _ranks_of(process_set: ProcessSet) -> List[int]:
    """The set's sorted global ranks, read from its communicator when it was made from one."""
    if process_set.ranks is None and process_set.mpi_comm is not None:
        process_set.ranks = sorted(_job_ranks_of_comm(process_set.mpi_comm))
    if process_set.ranks is None:
        raise ValueError("%s has no ranks (it was removed, or made from nothing)" % process_set)
    return process_set.ranks


def _as_process_set(value: Any) -> ProcessSet:
    return value if isinstance(value, ProcessSet) else ProcessSet(value)


def add_process_set(process_set: Any) -> ProcessSet:
    """Registers a process set; every rank must call it, in the same order, with the same ranks.

    Arguments:
        process_set: A ProcessSet, a list of global ranks, or an mpi4py communicator.

    Returns:
        The registered ProcessSet (the one passed, with its id filled in).

    Raises:
        ValueError on every rank when the ranks disagree across ranks, are empty, name a rank
        outside ``[0, size())``, repeat a rank, or are already a registered set ("duplicate
        process set: ranks [...] are already process set N").
    """
    _require_initialized()
    process_set = _as_process_set(process_set)
    ranks = _ranks_of(process_set)
    from dadt.common.basics import call
    new_id = int(call(_core().add_process_set, list(ranks)))
    process_set.process_set_id = new_id
    _registered.setdefault(new_id, []).append(process_set)
    return process_set


def remove_process_set(process_set: ProcessSet) -> bool:
    """Removes a registered process set; every rank must call it, in the same order.

    Returns True when the set was removed, False when it was not registered (its id is None, or
    the runtime no longer knows it). Afterwards the id of every ProcessSet object of that set is
    None; the id may be given to a later set. The global set cannot be removed (ValueError).
    """
    if not isinstance(process_set, ProcessSet):
        raise ValueError("remove_process_set takes a ProcessSet, got %s"
                         % type(process_set).__name__)
    set_id_ = process_set.process_set_id
    if set_id_ == 0:
        raise ValueError("the global process set (id 0) cannot be removed")
    if set_id_ is None:
        return False
    _require_initialized()
    from dadt.common.basics import call
    removed = bool(call(_core().remove_process_set, int(set_id_)))
    from dadt.common.util import reset_set_names
    reset_set_names(set_id_)  # a later set reusing the id names its collectives from 0
    for ps in _registered.pop(set_id_, []) + [process_set]:
        ps.process_set_id = None
    return removed


def set_id(process_set: Optional[ProcessSet]) -> int:
    """The runtime id of a collective's ``process_set=`` argument (None: the global set).

    Raises ValueError for a set that is not registered; membership is the runtime's check (a
    collective on a set this rank is not in is a ValueError on this rank)."""
    if process_set is None:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise ValueError("process_set must be a dadt ProcessSet (from add_process_set), got %s"
                         % type(process_set).__name__)
    if process_set.process_set_id is None:
        raise ValueError("%s is not registered (never added with add_process_set, or removed, "
                         "or dadt was shut down since)" % process_set)
    return int(process_set.process_set_id)


def set_size(process_set: Optional[ProcessSet]) -> int:
    """The number of ranks of a collective's ``process_set=`` (the job's size for the global
    set)."""
    from dadt.common.basics import size
    if set_id(process_set) == 0:
        return size()
    return len(process_set.ranks)


def set_rank(process_set: Optional[ProcessSet]) -> int:
    """This rank's place in a collective's ``process_set=`` (ValueError when not a member)."""
    from dadt.common.basics import rank
    if set_id(process_set) == 0:
        return rank()
    set_rank_ = process_set.rank()
    if set_rank_ is None:
        raise ValueError("rank %d is not a member of %s" % (rank(), process_set))
    return set_rank_


def check_registered(process_set: Optional[ProcessSet]) -> int:
    """`set_id`, and the runtime's word that the id is a registered set (ValueError otherwise).
    A collective built into a graph (tf.function, tf.compat.v1) calls it when it is built, as
    Horovod's ops do; an eager collective needs not: the runtime refuses the id as it enqueues."""
    set_id_ = set_id(process_set)
    if set_id_:
        _require_initialized()
        from dadt.common.basics import call
        call(_core().process_set_ranks, set_id_)
    return set_id_


# What Horovod's process-set queries (size_op(process_set_id), process_set_included_op) return for
# an id that is not a registered set: HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET.
UNKNOWN_SET = -3


def size_of_id(process_set_id: int) -> int:
    """The number of ranks of the registered set ``process_set_id`` (0: every rank), or
    UNKNOWN_SET."""
    from dadt.common.basics import call
    _require_initialized()
    try:
        return len(call(_core().process_set_ranks, int(process_set_id)))
    except ValueError:
        return UNKNOWN_SET


def included_in_id(process_set_id: int) -> int:
    """1 when this rank belongs to the registered set ``process_set_id``, 0 when not, or
    UNKNOWN_SET (Horovod's process_set_included_op)."""
    from dadt.common.basics import call, rank
    _require_initialized()
    try:
        return int(rank() in call(_core().process_set_ranks, int(process_set_id)))
    except ValueError:
        return UNKNOWN_SET


def keeps_own_gradients(process_set: Optional[ProcessSet]) -> bool:
    """Horovod's rule for a gradient reduction given ``process_set=`` (DistributedOptimizer,
    DistributedGradientTape, in every front end): a rank outside the set takes no part and keeps
    its own gradients unchanged, so one job may train a model per set. True on such a rank."""
    return set_id(process_set) != 0 and not process_set.included()


def check_same_lists(lists_by_rank: Sequence[List[List[int]]]) -> None:
    """init(process_sets=...): every rank's list of sets (each a list of ranks) must be rank 0's;
    otherwise a ValueError, the same on every rank, naming the first rank whose list differs."""
    first = lists_by_rank[0]
    for r, lists in enumerate(lists_by_rank):
        if lists != first:
            raise ValueError("init(process_sets=...) must get the same list on every rank: rank %d "
                             "has %s, rank 0 has %s" % (r, lists, first))


def register_at_init(process_sets: Any,
                     gather: Optional[Callable[[Any], List[Any]]] = None) -> None:
    """The ``process_sets=`` of init(), after the runtime started: None or "dynamic" adds nothing
    (adding later is always allowed); a list is checked to be the same on every rank (``gather``
    collects every rank's value; default: an allgather over the global set) and added in order."""
    global_process_set.ranks = list(range(_core().size()))
    if process_sets is None or (isinstance(process_sets, str) and process_sets == "dynamic"):
        return
    if isinstance(process_sets, (str, ProcessSet)) or not hasattr(process_sets, "__iter__"):
        raise ValueError("init(process_sets=...) takes a list of ProcessSet objects (or lists of "
                         "ranks) or \"dynamic\", got %r" % (process_sets,))
    sets = [_as_process_set(ps) for ps in process_sets]
    lists = [list(_ranks_of(ps)) for ps in sets]
    if gather is None:
        from dadt.common.array_ops import allgather_object
        gather = lambda value: allgather_object(value, name="dadt.init.process_sets")  # noqa: E731
    check_same_lists(gather(lists))
    for ps in sets:
        add_process_set(ps)


def fill_in_running(process_sets: Any) -> None:
    """init(process_sets=[...]) when the runtime already runs (a no-op init, as Horovod's): each
    listed set gets the id of the registered set with its ranks; a set that is not registered is
    a ValueError (add it with add_process_set). Local: no collective."""
    if isinstance(process_sets, str) and process_sets == "dynamic":
        return
    core = _core()
    by_ranks = {tuple(core.process_set_ranks(i)): i for i in core.process_set_ids()}
    for ps in process_sets:
        ps = _as_process_set(ps)
        found = by_ranks.get(tuple(_ranks_of(ps)))
        if found is None:
            raise ValueError("init(process_sets=...) while dadt runs: ranks %s are not a "
                             "registered process set; add it with add_process_set" % ps.ranks)
        if ps.process_set_id != found:
            ps.process_set_id = found
            _registered.setdefault(found, []).append(ps)


def forget_all() -> None:
    """At shutdown() and at each new incarnation: every set but the global one loses its id (the
    runtime has dropped them)."""
    for sets in _registered.values():
        for ps in sets:
            ps.process_set_id = None
    _registered.clear()


def enqueue_kwargs(process_set: Optional[ProcessSet]) -> Dict[str, int]:
    """``dadt._core.enqueue``'s keyword for ``process_set=``: none for the global set (a shared
    empty dict, which callers must not change)."""
    if process_set is None:
        return _NO_KWARGS
    set_id_ = set_id(process_set)
    return {"process_set_id": set_id_} if set_id_ else _NO_KWARGS


_NO_KWARGS: Dict[str, int] = {}
