"""The training modes of DistributedOptimizer: sync, async (DADT), dear (DeAR), and the modes that
send less: local_sgd, diloco, easgd and gossip (docs/training-modes.md).

Each mode is an engine (a ModeEngine, engine.py) to which the optimizer delegates every
mode-dependent decision; an engine sees the optimizer only through an EngineHost (host.py).

    engine.py         ModeEngine, the interface the optimizer calls; PENDING_KEY
    host.py           EngineHost, what an engine may ask of the optimizer
    sync.py           SyncEngine: Horovod's per-gradient allreduce, applied by this step
    adasum.py         AdasumEngine: op=Adasum, each rank's step combined with Adasum
    powersgd.py       PowerSGDReducer: sync mode's low-rank gradients (Compression.powersgd)
    bucket_engine.py  BucketEngine: the buckets and gradient hooks async and dear share
    async_mode.py     AsyncEngine: step t applies step t-1's average
    dear.py           DearEngine: reduce-scatter in backward, all-gather before the next forward
    buckets.py        plan_buckets, Bucket, layer_order, default_bucket_bytes, dear_bucket_bytes,
                      shard_rows
    periodic.py       PeriodicEngine: warm-up, fragments and torch's side of dadt.common.periodic
    local_sgd.py      LocalSGDEngine: the weights averaged every sync_every steps
    diloco.py         DiLoCoEngine: an outer optimizer on the averaged pseudo-gradient
    easgd.py          EASGDEngine: the elastic pull towards a centre variable
    hogwild.py        HogwildEngine: one host's ranks step one shared copy of the weights, lock-free
    gossip.py         GossipEngine: AD-PSGD, pairwise averaging with a matched neighbour;
                      PushSumEngine: SGP, push-sum on the exponential graph (algorithm="sgp")
"""

from dadt.torch.training_modes.adasum import AdasumEngine
from dadt.torch.training_modes.async_mode import AsyncEngine
from dadt.torch.training_modes.bucket_engine import BucketEngine
from dadt.torch.training_modes.buckets import (DEFAULT_BUCKET_BYTES, Bucket, default_bucket_bytes,
                                                layer_order, plan_buckets, shard_rows)
from dadt.torch.training_modes.dear import DearEngine
from dadt.torch.training_modes.diloco import DiLoCoEngine
from dadt.torch.training_modes.easgd import EASGDEngine
from dadt.torch.training_modes.engine import PENDING_KEY, PERIODIC_KEY, ModeEngine
from dadt.torch.training_modes.gossip import (ALGORITHMS as GOSSIP_ALGORITHMS, GRAPHS as GOSSIP_GRAPHS,
                                              GossipEngine, PushSumEngine)
from dadt.torch.training_modes.hogwild import HogwildEngine
from dadt.torch.training_modes.host import EngineHost
from dadt.torch.training_modes.local_sgd import LocalSGDEngine
from dadt.torch.training_modes.periodic import PeriodicEngine
from dadt.torch.training_modes.sync import SyncEngine

# mode name -> engine class; DistributedOptimizer(mode=...) takes these names.
ENGINES = {"sync": SyncEngine, "async": AsyncEngine, "dear": DearEngine,
           "local_sgd": LocalSGDEngine, "diloco": DiLoCoEngine, "easgd": EASGDEngine,
           "hogwild": HogwildEngine,
           "gossip": GossipEngine}
MODES = tuple(ENGINES)
# The modes that send less: they take the knobs of dadt.common.periodic.KNOBS.
PERIODIC_MODES = tuple(m for m, e in ENGINES.items() if issubclass(e, PeriodicEngine))

__all__ = ["AdasumEngine", "AsyncEngine", "Bucket", "BucketEngine", "DEFAULT_BUCKET_BYTES", "DearEngine",
           "DiLoCoEngine", "EASGDEngine", "ENGINES", "EngineHost", "GOSSIP_ALGORITHMS", "GOSSIP_GRAPHS",
           "GossipEngine", "PushSumEngine", "HogwildEngine", "LocalSGDEngine", "MODES",
           "ModeEngine", "PENDING_KEY", "PERIODIC_KEY", "PERIODIC_MODES", "PeriodicEngine",
           "SyncEngine",
           "default_bucket_bytes", "layer_order", "plan_buckets", "shard_rows"]
