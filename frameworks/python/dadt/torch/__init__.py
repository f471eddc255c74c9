"""dadt's PyTorch front end, with Horovod's public API.

.. code-block:: python

    import dadt.torch as hvd   # a Horovod script keeps working
    hvd.init()
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)

Tensors must be contiguous, on the CPU or a GPU (a GPU tensor goes through NCCL in a CUDA build,
else through host memory).
"""

from dadt.common.frameworks import require as _require

_require("torch")

from dadt.common.basics import set_fusion_params
from dadt.common.basics import (start_timeline, stop_timeline, ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
                                gloo_built, gloo_enabled, init, is_initialized, local_rank,
                                local_size, mpi_built, mpi_enabled, mpi_threads_supported,
                                nccl_built, rank, rocm_built, shutdown, size)
from dadt.common.process_sets import (ProcessSet, add_process_set, global_process_set,
                                      remove_process_set)
from dadt.common.exceptions import (DadtInternalError, DeviceMismatchError, HorovodInternalError,
                                    TensorMismatchError)
from dadt.torch.collectives import (allgather, allreduce, alltoall, broadcast, grouped_allgather,
                                    grouped_allreduce, grouped_reducescatter, reducescatter)
from dadt.torch.compression import Compression
from dadt.torch.functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                                  broadcast_parameters, sparse_allreduce_async)
from dadt.torch.async_collectives import (Adasum, Average, Max, Min, Product, Sum, allgather_async,
                                allreduce_, allreduce_async, allreduce_async_, alltoall_async,
                                barrier, broadcast_, broadcast_async, broadcast_async_,
                                grouped_allreduce_, grouped_allreduce_async,
                                grouped_allgather_async, grouped_allreduce_async_,
                                grouped_reducescatter_async, join, poll, reducescatter_async,
                                synchronize)
from dadt.torch.p2p import (exchange_async, irecv, isend, neighbor_allgather,
                            neighbor_allgather_async, recv, send, withdraw_exchange)
from dadt.torch.optimizer import DistributedOptimizer
from dadt.torch.sync_batch_norm import SyncBatchNorm
from dadt.torch import elastic  # hvd.elastic.run, TorchState, ElasticSampler (docs/elastic.md)

__all__ = [
    "start_timeline", "stop_timeline", "set_fusion_params",
    # runtime control and build facts
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "mpi_threads_supported", "mpi_enabled", "mpi_built",
    "gloo_enabled", "gloo_built", "nccl_built", "cuda_built", "rocm_built", "ddl_built",
    "ccl_built",
    # process sets
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    # exceptions
    "DadtInternalError", "DeviceMismatchError", "HorovodInternalError", "TensorMismatchError",
    # reduce ops
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
    # collectives
    "allreduce", "allreduce_async", "allreduce_", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_async", "grouped_allreduce_",
    "grouped_allreduce_async_", "allgather", "allgather_async", "broadcast", "broadcast_async",
    "broadcast_", "broadcast_async_", "alltoall", "alltoall_async", "reducescatter",
    "reducescatter_async", "grouped_allgather", "grouped_allgather_async",
    "grouped_reducescatter", "grouped_reducescatter_async", "barrier", "join", "poll",
    "synchronize",
    # point to point (dadt.torch.p2p; graphs in dadt.common.topology)
    "send", "recv", "isend", "irecv", "exchange_async", "withdraw_exchange",
    "neighbor_allgather", "neighbor_allgather_async",
    # training helpers
    "Compression", "DistributedOptimizer", "SyncBatchNorm", "broadcast_parameters",
    "broadcast_optimizer_state",
    "broadcast_object", "allgather_object", "sparse_allreduce_async",
    # elastic training
    "elastic",
]
