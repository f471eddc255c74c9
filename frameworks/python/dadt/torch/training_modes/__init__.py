"""The training modes of DistributedOptimizer: sync, async (DADT) and dear (DeAR)
(docs/training-modes.md).

Each mode is an engine (a ModeEngine, engine.py) to which the optimizer delegates every
mode-dependent decision; an engine sees the optimizer only through an EngineHost (host.py).

    engine.py         ModeEngine, the interface the optimizer calls; PENDING_KEY
    host.py           EngineHost, what an engine may ask of the optimizer
    sync.py           SyncEngine: Horovod's per-gradient allreduce, applied by this step
    bucket_engine.py  BucketEngine: the buckets and gradient hooks async and dear share
    async_mode.py     AsyncEngine: step t applies step t-1's average
    dear.py           DearEngine: reduce-scatter in backward, all-gather before the next forward
    buckets.py        plan_buckets, Bucket, layer_order, default_bucket_bytes, dear_bucket_bytes,
                      shard_rows
"""

from dadt.torch.training_modes.async_mode import AsyncEngine
from dadt.torch.training_modes.bucket_engine import BucketEngine
from dadt.torch.training_modes.buckets import (DEFAULT_BUCKET_BYTES, Bucket, default_bucket_bytes,
                                                layer_order, plan_buckets, shard_rows)
from dadt.torch.training_modes.dear import DearEngine
from dadt.torch.training_modes.engine import PENDING_KEY, ModeEngine
from dadt.torch.training_modes.host import EngineHost
from dadt.torch.training_modes.sync import SyncEngine

# mode name -> engine class; DistributedOptimizer(mode=...) takes these names.
ENGINES = {"sync": SyncEngine, "async": AsyncEngine, "dear": DearEngine}
MODES = tuple(ENGINES)

__all__ = ["AsyncEngine", "Bucket", "BucketEngine", "DEFAULT_BUCKET_BYTES", "DearEngine",
           "ENGINES", "EngineHost", "MODES", "ModeEngine", "PENDING_KEY", "SyncEngine",
           "default_bucket_bytes", "layer_order", "plan_buckets", "shard_rows"]
