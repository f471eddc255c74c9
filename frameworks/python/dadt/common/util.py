"""Small helpers shared by dadt's front ends."""

import warnings
from typing import List, Optional, Sequence

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
