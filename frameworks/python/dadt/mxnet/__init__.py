"""dadt's MXNet front end, with Horovod's horovod.mxnet API.

.. code-block:: python

    import mxnet as mx
    import dadt.mxnet as hvd                     # as `import horovod.mxnet as hvd`
    hvd.init()
    net = ...; net.initialize(); net(x0)         # or let broadcast_parameters defer
    params = net.collect_params()
    hvd.broadcast_parameters(params, root_rank=0)
    trainer = hvd.DistributedTrainer(params, "sgd", {"learning_rate": 0.1})
    ...
    trainer.step(batch_size)                     # gradients averaged over the processes

Collectives take CPU NDArrays of dtype uint8, int8, int32, int64, float16, float32, float64 and
bool, reach the runtime through DLPack (dadt.mxnet.ops), and are synchronous. MXNet 1.9.1 needs
NumPy < 1.24: tools/mxnet_venv.sh makes a virtualenv with both and dadt. docs/frameworks.md
("MXNet") has the API table and the differences from Horovod.
"""

try:
    import mxnet as _mx  # noqa: F401
except Exception as _e:  # ImportError, or MXNet's AttributeError under NumPy >= 1.24
    raise ImportError(
        "dadt.mxnet needs mxnet, which cannot be imported (%s: %s); MXNet 1.9.1 needs numpy<1.24: "
        "make its virtualenv with tools/mxnet_venv.sh (or: pip install mxnet==1.9.1 "
        "numpy==1.23.5)" % (type(_e).__name__, _e)) from _e

from dadt.common.frontend import export_common as _export_common  # noqa: E402
from dadt.mxnet.ops import (allgather, allreduce, allreduce_, alltoall, barrier,  # noqa: E402
                            broadcast, broadcast_, grouped_allreduce, grouped_allreduce_, join,
                            reducescatter)
from dadt.mxnet.compression import Compression  # noqa: E402
from dadt.mxnet.functions import allgather_object, broadcast_object  # noqa: E402
from dadt.mxnet.training import (DistributedOptimizer, DistributedTrainer,  # noqa: E402
                                 broadcast_parameters)

__all__ = _export_common(globals()) + [
    "allreduce", "allreduce_", "grouped_allreduce", "grouped_allreduce_", "allgather",
    "broadcast", "broadcast_", "alltoall", "reducescatter", "barrier", "join",
    "DistributedOptimizer", "DistributedTrainer", "broadcast_parameters", "broadcast_object",
    "allgather_object", "Compression",
]
