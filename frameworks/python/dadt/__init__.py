"""dadt: distributed data-parallel training (a faster Horovod).

Pick a front end::

    import dadt.torch as dadt      # or: import dadt.torch as hvd
    dadt.init()

Importing ``dadt`` itself is cheap: it loads no framework and not the runtime. Under MPICH's or
Intel MPI's launcher it loads their MPI library, so that ``dadt._core`` is the MPICH-ABI build
(dadt/_mpi_abi.py says how it chooses).
"""

from dadt import _mpi_abi

_mpi_abi.select(__path__)

__version__ = "0.1.0"
