"""dadt's JAX front end: collectives on arrays and pytrees, an optax transformation that
averages gradients, and parameter broadcast.

.. code-block:: python

    import dadt.jax as dadt
    dadt.init()
    params = dadt.broadcast_parameters(params, root_rank=0)
    tx = optax.chain(dadt.average_gradients(), optax.adam(1e-3))   # or dadt.DistributedOptimizer
    # modes that send less: tx = dadt.DistributedOptimizer(optax.adam(1e-3), mode="diloco",
    #                                                      sync_every=32); params = tx.flush(params)

Collectives work eagerly and under jax.jit (as ordered host callbacks), on CPU arrays of dtype
uint8, int8, int16, uint16, int32, int64, float16, bfloat16, float32, float64 and bool. docs/frameworks.md has
the details and the migration guide.
"""

from dadt.common.frameworks import require as _require

_require("jax")

from dadt.common.frontend import export_common as _export_common  # noqa: E402
from dadt.jax.ops import (allgather, allreduce, alltoall, barrier, broadcast,  # noqa: E402
                          grouped_allreduce, join, reducescatter)
from dadt.jax.periodic import Compression  # noqa: E402
from dadt.jax.training import (DistributedOptimizer, allgather_object,  # noqa: E402
                               average_gradients, broadcast_object, broadcast_parameters)

__all__ = _export_common(globals()) + [
    "allreduce", "grouped_allreduce", "allgather", "broadcast", "alltoall", "reducescatter",
    "barrier", "join",
    "average_gradients", "DistributedOptimizer", "broadcast_parameters", "broadcast_object",
    "allgather_object", "Compression",
]
