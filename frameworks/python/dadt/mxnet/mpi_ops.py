"""Horovod's module name for the collectives and the basics (``from horovod.mxnet.mpi_ops import
allreduce, rank, ...``): the same objects as dadt.mxnet's."""

from dadt.common.frontend import export_common as _export_common
from dadt.mxnet.ops import (allgather, allreduce, allreduce_, alltoall, barrier,  # noqa: F401
                            broadcast, broadcast_, grouped_allreduce, grouped_allreduce_, join,
                            reducescatter)

__all__ = _export_common(globals()) + [
    "allreduce", "allreduce_", "grouped_allreduce", "grouped_allreduce_", "allgather",
    "broadcast", "broadcast_", "alltoall", "reducescatter", "barrier", "join",
]
