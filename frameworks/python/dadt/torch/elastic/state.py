"""TorchState: the elastic state of a PyTorch job (a model, an optimizer, ElasticSamplers and
plain objects), with Horovod's name and constructor, ``TorchState(model, optimizer, **kwargs)``.

Each special value has a handler that knows how to save, restore and sync it: the model's and the
optimizer's ``state_dict`` (deep copies in memory), a sampler's progress. Every other keyword is an
ObjectState attribute. Assigning a new model, optimizer or sampler to the attribute
(``state.model = ...``) replaces what the handler manages.
"""

import copy
from typing import Any, Dict

import torch

from dadt.common import basics
from dadt.common.elastic import ObjectState
from dadt.torch.elastic.sampler import ElasticSampler
from dadt.torch.functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                                  broadcast_parameters)


class _Handler:
    def __init__(self, value: Any):
        self.value = value
        self.save()

    def save(self) -> None:
        raise NotImplementedError()

    def restore(self) -> None:
        raise NotImplementedError()

    def sync(self) -> None:
        raise NotImplementedError()

    def reset(self) -> None:
        pass


class _ModelHandler(_Handler):
    def save(self) -> None:
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self) -> None:
        self.value.load_state_dict(self._saved)

    def sync(self) -> None:
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_Handler):
    def save(self) -> None:
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self) -> None:
        self.value.load_state_dict(self._saved)

    def sync(self) -> None:
        broadcast_optimizer_state(self.value, root_rank=0)


class _SamplerHandler(_Handler):
    def save(self) -> None:
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self) -> None:
        self.value.load_state_dict(self._saved)

    def sync(self) -> None:
        # Rank 0's progress: it is the world's (processed_num is global), and every survivor
        # restored the same commit.
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), root_rank=0,
                                                    name="dadt.elastic.sampler"))

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
        handlers: Dict[str, _Handler] = {}
        plain: Dict[str, Any] = {}
        for name, value in dict(kwargs, model=model, optimizer=optimizer).items():
            if value is None:
                continue
            handler = _handler_for(value)
            if handler is not None:
                handlers[name] = handler
            else:
                plain[name] = value
        self.__dict__["_handlers"] = handlers
        super().__init__(bcast_object=broadcast_object, get_rank=basics.rank,
                         allgather_object=allgather_object, **plain)

    def __getattr__(self, name: str) -> Any:
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            return handlers[name].value
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name] = _handler_for(value) or handlers[name].__class__(value)
            return
        super().__setattr__(name, value)

    def save(self) -> None:
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self) -> None:
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self) -> None:
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def reset(self) -> None:
        for handler in self._handlers.values():
            handler.reset()
        super().reset()
