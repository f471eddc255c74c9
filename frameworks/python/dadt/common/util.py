"""Small helpers shared by dadt's front ends."""

import collections
import itertools
import warnings
from typing import Any, Dict, List, Optional, Sequence

NOT_INITIALIZED = "dadt has not been initialized; use dadt.init()."

# Reduce ops: the values of DADT_REDUCE_* in runtime/c_api.h (Horovod's numbering).
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

# Op types: the values of DADT_OP_* in runtime/c_api.h.
OP_ALLREDUCE = 0
OP_ALLGATHER = 1
OP_BROADCAST = 2
OP_ALLTOALL = 3
OP_REDUCESCATTER = 4
OP_BARRIER = 5
OP_JOIN = 6
OP_PEER_EXCHANGE = 9
OP_NEIGHBOR_ALLGATHER = 10

# Per-op counters for unnamed collectives, shared by every front end in this process, so that two
# front ends never generate the same name.
_name_counters: Dict[str, Any] = collections.defaultdict(itertools.count)


def reset_collective_names() -> None:
    """Starts the generated names over (at each new incarnation, dadt.common.basics), so that ranks
    that disagreed on how many unnamed collectives an earlier incarnation ran agree again."""
    _name_counters.clear()


def reset_set_names(set_id: int) -> None:
    """Starts the generated names of process set ``set_id`` over (at its removal, on every rank:
    a later set that reuses the id starts at 0 on all its members)."""
    for key in [k for k in _name_counters if isinstance(k, tuple) and k[1] == set_id]:
        del _name_counters[key]


def collective_name(op: str, name: Optional[str], process_set: Any = None) -> str:
    """``name``, or the next generated ``'<op>.noname.<n>'`` (the same on ranks that call alike).
    A process set other than the global one has its own counters and names
    (``'<op>.set<id>.noname.<n>'``): only its members call its collectives, so sharing the global
    counter would make the ranks' generated names differ afterwards."""
    if name is None:
        set_id = 0
        if process_set is not None:
            from dadt.common.process_sets import set_id as id_of
            set_id = id_of(process_set)
        if set_id:
            return "%s.set%d.noname.%d" % (op, set_id, next(_name_counters[(op, set_id)]))
        return "%s.noname.%d" % (op, next(_name_counters[op]))
    if not isinstance(name, str):
        raise TypeError("name must be a str or None, got %s" % type(name).__name__)
    return name


def message_name(src: int, dst: int) -> str:
    """The name of the next unnamed point-to-point message from ``src`` to ``dst``: the n-th unnamed
    send from src to dst is the n-th unnamed receive at dst from src, as in torch.distributed and
    MPI (messages between two ranks do not overtake). The counters start over with the other
    generated names at each incarnation."""
    return "p2p.%d->%d.%d" % (src, dst, next(_name_counters[("p2p", src, dst)]))


def handle_average_backwards_compatibility(op: Optional[int], average: Optional[bool]) -> int:
    """Resolves Horovod's deprecated ``average=`` bool against ``op=`` (default: Average)."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of them.")
        return op
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    return Average


def split_list(items: Sequence, n: int) -> List[list]:
    """Splits ``items`` into ``n`` contiguous parts whose lengths differ by at most one."""
    d, r = divmod(len(items), n)
    return [list(items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)]) for i in range(n)]
