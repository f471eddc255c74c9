"""``dadt.tensorflow.keras``: the module Horovod scripts import as ``horovod.tensorflow.keras``.
It is dadt.keras (Keras 3) with the TensorFlow front end's names that Horovod's module also
offers (tensors in, tensors out for allreduce, allgather and broadcast)."""

from dadt.common.frameworks import require as _require

_require("tensorflow")
_require("keras")

from dadt.keras import *  # noqa: E402,F401,F403
from dadt.keras import __all__ as _keras_all  # noqa: E402
from dadt.tensorflow.keras import callbacks  # noqa: E402,F401
from dadt.tensorflow import (Compression, SyncBatchNormalization, allgather,  # noqa: E402,F401
                             allreduce, broadcast, broadcast_global_variables)

__all__ = sorted(set(_keras_all) | {"Compression", "SyncBatchNormalization", "allgather",
                                    "allreduce", "broadcast", "broadcast_global_variables",
                                    "callbacks"})
