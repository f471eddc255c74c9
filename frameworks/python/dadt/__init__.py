"""dadt: distributed data-parallel training (a faster Horovod).

Pick a front end::

    import dadt.torch as dadt      # or: import dadt.torch as hvd
    dadt.init()

Importing ``dadt`` itself is cheap: it loads no framework and not the runtime.
"""

__version__ = "0.1.0"
