"""Horovod's module name for :mod:`dadt.torch.async_collectives`, kept so that scripts written
for ``horovod.torch.mpi_ops`` keep working (``from dadt.torch.mpi_ops import allreduce_async``).
It holds no MPI: this name is the very module ``dadt.torch.async_collectives``, not a copy."""

import sys

from dadt.torch import async_collectives as _async_collectives

sys.modules[__name__] = _async_collectives
