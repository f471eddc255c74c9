"""TorchState: the elastic state of a PyTorch job (a model, an optimizer, ElasticSamplers and
plain objects), with Horovod's name and constructor, ``TorchState(model, optimizer, **kwargs)``.

Each special value has a StateHandler (dadt.common.elastic) that knows how to save, restore and
sync it: the model's and the optimizer's ``state_dict`` (deep copies in memory; what the elastic
checkpoint holds), a sampler's progress. Every other keyword is an ObjectState attribute.
Assigning a new model, optimizer or sampler to the attribute (``state.model = ...``) replaces
what the handler manages.
"""

import copy
from typing import Any, Callable

import torch

from dadt.common import basics
from dadt.common.elastic import ObjectState, StateHandler
from dadt.torch.elastic.sampler import ElasticSampler
from dadt.torch.functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                                  broadcast_parameters)


class _StateDictHandler(StateHandler):
    """A value with ``state_dict``/``load_state_dict``: a model, an optimizer, a sampler."""

    def capture(self) -> Any:
        return copy.deepcopy(self.value.state_dict())

    def apply(self, saved: Any) -> None:
        self.value.load_state_dict(saved)


class _ModelHandler(_StateDictHandler):
    def sync(self, root_rank: int, bcast_object: Callable) -> None:
        broadcast_parameters(self.value.state_dict(), root_rank=root_rank)


class _OptimizerHandler(_StateDictHandler):
    def sync(self, root_rank: int, bcast_object: Callable) -> None:
        broadcast_optimizer_state(self.value, root_rank=root_rank)

    def reset(self) -> None:
        # The modes that send less drop their exchanges in flight and roll the model back to the
        # last synced weights (the sync that follows makes them root's).
        reset = getattr(self.value, "_dadt_reset", None)
        if reset is not None:
            reset()


class _SamplerHandler(_StateDictHandler):
    # sync: the root's progress as an object (processed_num is global, and every survivor
    # restored the same commit); load_state_dict re-partitions.

    def reset(self) -> None:
        self.value.reset()  # re-partition over the new world


def _handler_for(value: Any):
    if isinstance(value, torch.nn.Module):
        return _ModelHandler(value)
    if isinstance(value, torch.optim.Optimizer):
        return _OptimizerHandler(value)
    if isinstance(value, ElasticSampler):
        return _SamplerHandler(value)
    return None


class TorchState(ObjectState):
    """State of a PyTorch job: ``TorchState(model, optimizer, train_sampler=..., epoch=0)``.

    Args:
      model: a ``torch.nn.Module`` (optional).
      optimizer: a ``torch.optim.Optimizer`` (optional).
      kwargs: ElasticSamplers (handled as such) and plain objects (ObjectState attributes).
    """

    def __init__(self, model: torch.nn.Module = None, optimizer: torch.optim.Optimizer = None,
                 **kwargs: Any):
        plain = {}
        for name, value in dict(kwargs, model=model, optimizer=optimizer).items():
            if value is None:
                continue
            handler = _handler_for(value)
            if handler is not None:
                self.add_handler(name, handler)
            else:
                plain[name] = value
        super().__init__(bcast_object=broadcast_object, get_rank=basics.rank,
                         allgather_object=allgather_object, **plain)

    def __getattr__(self, name: str) -> Any:
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers and isinstance(handlers[name], _StateDictHandler):
            return handlers[name].value
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        handler = self.__dict__.get("_handlers", {}).get(name)
        if isinstance(handler, _StateDictHandler):
            self.add_handler(name, _handler_for(value) or handler.__class__(value))
            return
        super().__setattr__(name, value)
