"""dadt's Keras 3 front end, with Horovod's ``horovod.keras`` API. model.fit trains distributed
with three added lines:

.. code-block:: python

    import dadt.keras as dadt
    dadt.init()                                                     # 1
    model.compile(optimizer=dadt.DistributedOptimizer(opt), ...)     # 2
    model.fit(x, y, callbacks=[dadt.callbacks.BroadcastGlobalVariablesCallback(0)],  # 3
              verbose=1 if dadt.rank() == 0 else 0)

Works with the tensorflow backend (the default) and the jax and torch backends of Keras.
"""

from dadt.common.frameworks import require as _require

_require("keras")

from typing import Optional as _Optional  # noqa: E402

from dadt.common import array_ops as _array_ops  # noqa: E402
from dadt.common.frontend import export_common as _export_common  # noqa: E402
from dadt.common.util import Average as _Average  # noqa: E402
from dadt.keras import callbacks  # noqa: E402
from dadt.keras import elastic  # noqa: E402  (hvd.elastic.run, KerasState, the callbacks)
from dadt.keras.callbacks import broadcast_variables  # noqa: E402
from dadt.keras.optimizer import DistributedOptimizer, PartialDistributedOptimizer  # noqa: E402


def allreduce(value, name: _Optional[str] = None, op: int = _Average, process_set=None):
    """Reduces a NumPy-convertible value (a number, an array, a backend tensor) over all
    processes (or those of ``process_set``); returns a NumPy array."""
    import keras
    return _array_ops.allreduce(keras.ops.convert_to_numpy(value), name, op,
                                process_set=process_set)


def allgather(value, name: _Optional[str] = None, process_set=None):
    """Concatenates every process's value (of ``process_set``) on the first dimension; returns a
    NumPy array."""
    import keras
    return _array_ops.allgather(keras.ops.convert_to_numpy(value), name, process_set)


def broadcast(value, root_rank: int, name: _Optional[str] = None, process_set=None):
    """Returns root rank's value on every process (of ``process_set``), as a NumPy array."""
    import keras
    return _array_ops.broadcast(keras.ops.convert_to_numpy(value), root_rank, name, process_set)


broadcast_object = _array_ops.broadcast_object
allgather_object = _array_ops.allgather_object

__all__ = _export_common(globals()) + [
    "DistributedOptimizer", "PartialDistributedOptimizer", "callbacks", "elastic",
    "broadcast_variables",
    "allreduce", "allgather",
    "broadcast", "broadcast_object", "allgather_object",
]
