"""dadt's TensorFlow 2 front end, with Horovod's ``horovod.tensorflow`` API.

.. code-block:: python

    import dadt.tensorflow as hvd        # a Horovod TF2 script keeps working
    hvd.init()
    with tf.GradientTape() as tape:
        loss = ...
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables, root_rank=0)

Collectives work eagerly and in graphs (tf.function, tf.compat.v1 Session.run; see
docs/frameworks.md "Graph-mode execution"), on CPU
tensors and variables of dtype uint8, int8, int16, uint16, int32, int64, float16, bfloat16, float32,
float64 and bool. docs/frameworks.md has the details and the migration guide.
"""

from dadt.common.frameworks import require as _require

_require("tensorflow")

from dadt.common.frontend import export_common as _export_common  # noqa: E402
from dadt.tensorflow.compression import Compression  # noqa: E402
from dadt.tensorflow.functions import (allgather_object, allreduce_gradients,  # noqa: E402
                                       broadcast_global_variables, broadcast_object,
                                       broadcast_object_fn,
                                       broadcast_variables, local_rank_op, local_size_op,
                                       process_set_included_op, rank_op, size_op)
from dadt.tensorflow.gradient_tape import (DistributedGradientTape,  # noqa: E402
                                           PartialDistributedGradientTape)
from dadt.tensorflow.optimizer import DistributedOptimizer  # noqa: E402
from dadt.tensorflow.mpi_ops import (allgather, allreduce, alltoall, barrier,  # noqa: E402
                                     broadcast, broadcast_, grouped_allgather,
                                     grouped_allreduce, grouped_reducescatter, join,
                                     reducescatter)
from dadt.tensorflow import util  # noqa: E402  (hvd.util._executing_eagerly, as Horovod's)
from dadt.tensorflow.util import _executing_eagerly  # noqa: E402,F401

__all__ = _export_common(globals()) + [
    "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast",
    "broadcast_", "alltoall", "reducescatter", "grouped_reducescatter", "barrier", "join",
    "rank_op", "size_op", "local_rank_op", "local_size_op", "process_set_included_op",
    "Compression", "DistributedGradientTape", "PartialDistributedGradientTape",
    "DistributedOptimizer",
    "allreduce_gradients", "broadcast_variables", "broadcast_global_variables",
    "broadcast_object", "broadcast_object_fn", "allgather_object", "SyncBatchNormalization",
]


def __getattr__(name):
    # SyncBatchNormalization imports Keras, which a plain TensorFlow script need not load.
    if name == "SyncBatchNormalization":
        from dadt.tensorflow.sync_batch_norm import SyncBatchNormalization
        return SyncBatchNormalization
    if name == "elastic":  # hvd.elastic: imports Keras too (its states and callbacks)
        import importlib
        return importlib.import_module("dadt.tensorflow.elastic")
    raise AttributeError("module 'dadt.tensorflow' has no attribute %r" % name)
