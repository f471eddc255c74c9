"""dadt jobs on a Ray cluster (docs/running.md, "Ray"), with horovod.ray's API.

    from dadt.ray import RayExecutor    # horovod.ray.RayExecutor's API: start, run, execute, shutdown
    from dadt.ray import DadtConfig     # a Ray Train backend: DataParallelTrainer(..., backend_config=DadtConfig())

Needs Ray (``pip install 'dadt[ray]'``, the version pinned there); importing ``dadt.ray`` itself does
not import Ray, the names above do.

**Where the rendezvous store runs.** The ranks meet in dadt's rendezvous store, served by
``dadtrun --serve-store`` (dadtrun/store_task.h), as under torchrun. The store runs inside rank 0's
actor (a child process of it), not beside the driver:

* The driver may be outside the cluster (Ray Client, ``ray.init("ray://head:10001")``) or on a
  machine whose address the nodes do not route to; rank 0's node is a Ray node, and Ray itself needs
  every node to reach every other at the node IP Ray reports (``ray.util.get_node_ip_address()``),
  which is the address the ranks are given (DADT_RENDEZVOUS_ADDR).
* The store lives exactly as long as the job: it ends when its actor does (its stdin closes;
  dadtrun also sets PR_SET_PDEATHSIG), so `RayExecutor.shutdown()`, a killed actor or the end of the
  driver's Ray job leave no store behind, and nothing but Ray API calls runs on the driver.
* Ray Train's backend (`DadtConfig`) has no driver process of its own to host one; the same code
  path serves it from its rank 0 worker.
* An elastic job (``RayExecutor(min_workers=..)``, dadt/ray/elastic.py) may lose any rank, rank 0
  included, so its store runs in an actor of its own on Ray's head node instead, the one node whose
  loss ends the cluster anyway; the driver writes the job's rounds there through that actor.

The driver draws the job secret (64 hex digits) and hands it to the actors in Ray calls; anyone who
can submit work to the Ray cluster can already run code in those actors, so the secret keeps the
store to the job's ranks against other hosts on the network, no more.
"""

__all__ = ["RayExecutor", "WorkerError", "Settings", "DadtConfig", "DadtBackend"]


def __getattr__(name):
    if name in ("RayExecutor", "WorkerError", "Settings"):
        try:
            from dadt.ray import runner
        except ImportError as e:
            if getattr(e, "name", None) == "ray" or str(e).startswith("No module named 'ray"):
                raise ImportError("dadt.ray.%s needs Ray: pip install 'dadt[ray]' (%s)" % (name, e)) from e
            raise
        return getattr(runner, name)
    if name in ("DadtConfig", "DadtBackend"):
        try:
            from dadt.ray import train
        except ImportError as e:
            raise ImportError("dadt.ray.%s needs Ray Train: pip install 'ray[train]' (%s)" % (name, e)) from e
        return getattr(train, name)
    raise AttributeError("module 'dadt.ray' has no attribute %r" % name)
