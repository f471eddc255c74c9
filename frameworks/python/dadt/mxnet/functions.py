"""Python objects between processes (Horovod's horovod.mxnet.functions): pickled into uint8
arrays and moved by dadt.common.array_ops, as in every front end."""

from typing import Any, List, Optional

from dadt.common import array_ops
from dadt.common.process_sets import global_process_set

__all__ = ["broadcast_object", "allgather_object"]


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None,
                     process_set=global_process_set) -> Any:
    """Pickles ``obj`` on root rank and returns root rank's object on every process."""
    return array_ops.broadcast_object(obj, root_rank, name, process_set)


def allgather_object(obj: Any, name: Optional[str] = None,
                     process_set=global_process_set) -> List[Any]:
    """Pickles ``obj`` on every process and returns their objects, in rank order."""
    return array_ops.allgather_object(obj, name, process_set)
