"""Elastic training for PyTorch with Horovod's names (docs/elastic.md):

    import dadt.torch as hvd
    hvd.init()
    state = hvd.elastic.TorchState(model, optimizer, train_sampler=sampler, epoch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            state.train_sampler.set_epoch(state.epoch)
            for batch_idx, (data, target) in enumerate(loader):
                ...
                state.train_sampler.record_batch(batch_idx, batch_size)
                if batch_idx % 10 == 0:
                    state.commit()
            state.commit()

    train(state)
"""

from typing import Callable

from dadt.common import basics
from dadt.common.elastic import (ElasticCheckpointError, HostsUpdatedInterrupt,
                                 LauncherUnreachableError, ObjectState, State, run_fn)
from dadt.torch.elastic.sampler import ElasticSampler
from dadt.torch.elastic.state import TorchState

__all__ = ["ElasticCheckpointError", "ElasticSampler", "HostsUpdatedInterrupt",
           "LauncherUnreachableError", "ObjectState", "State", "TorchState", "run"]


def _reset() -> None:
    basics.shutdown()
    basics.init()


def run(func: Callable) -> Callable:
    """Decorator for an elastic training function ``func(state, ...)``: on a peer's death the
    state is restored from its last commit and the world re-formed; on a host update the world is
    re-formed; either way ``func`` is called again with the synced state."""
    return run_fn(func, _reset)
