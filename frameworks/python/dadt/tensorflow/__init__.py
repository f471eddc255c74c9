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

Collectives work eagerly and inside tf.function (as stateful ``tf.numpy_function`` ops), on CPU
tensors and variables of dtype uint8, int8, int16, uint16, int32, int64, float16, bfloat16, float32,
float64 and bool. docs/frameworks.md has the details and the migration guide.
"""

from dadt.common.frameworks import require as _require

_require("tensorflow")

from dadt.common.frontend import export_common as _export_common  # noqa: E402
from dadt.tensorflow.compression import Compression  # noqa: E402
from dadt.tensorflow.functions import (DistributedGradientTape, allgather_object,  # noqa: E402
                                       allreduce_gradients, broadcast_object,
                                       broadcast_variables)
from dadt.tensorflow.mpi_ops import (allgather, allreduce, alltoall, barrier,  # noqa: E402
                                     broadcast, grouped_allreduce, join, reducescatter)

__all__ = _export_common(globals()) + [
    "allreduce", "grouped_allreduce", "allgather", "broadcast", "alltoall", "reducescatter",
    "barrier", "join",
    "Compression", "DistributedGradientTape", "allreduce_gradients", "broadcast_variables",
    "broadcast_object", "allgather_object",
]
