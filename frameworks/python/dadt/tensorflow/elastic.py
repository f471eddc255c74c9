"""Elastic training for TensorFlow 2 with Horovod's names (docs/elastic.md).

``TensorFlowKerasState`` is dadt.keras.elastic.KerasState (a Keras model and optimizer);
``TensorFlowState`` holds plain ``tf.Variable``s. ``run`` is the elastic loop, which also turns a
collective's failure inside a ``tf.function`` (``tf.errors.AbortedError``) into the reset it
stands for."""

from typing import Any, List, Sequence

import tensorflow as tf

from dadt.common import array_ops, basics
from dadt.common.elastic import HostsUpdatedInterrupt, ObjectState, State
from dadt.keras.elastic import (CommitStateCallback, KerasState, UpdateBatchStateCallback,
                                UpdateEpochStateCallback, run)

TensorFlowKerasState = KerasState

__all__ = ["CommitStateCallback", "HostsUpdatedInterrupt", "KerasState", "ObjectState", "State",
           "TensorFlowKerasState", "TensorFlowState", "UpdateBatchStateCallback",
           "UpdateEpochStateCallback", "run"]


class TensorFlowState(ObjectState):
    """State of ``tf.Variable``s (``variables``) plus plain objects as keyword arguments.
    ``session`` is accepted for Horovod's signature: TensorFlow 1 sessions are not supported."""

    def __init__(self, variables: Sequence[tf.Variable] = None, session=None, **kwargs: Any):
        if session is not None:
            raise ValueError("TensorFlowState: TensorFlow 1 sessions are not supported; pass "
                             "variables only (TensorFlow 2, eager)")
        self.__dict__["variables"] = list(variables or [])
        self._saved_values: List[Any] = []
        super().__init__(bcast_object=array_ops.broadcast_object, get_rank=basics.rank,
                         allgather_object=array_ops.allgather_object, **kwargs)
        self._save_values()

    def _save_values(self) -> None:
        self._saved_values = [v.numpy().copy() for v in self.variables]

    def save(self) -> None:
        self._save_values()
        super().save()

    def restore(self) -> None:
        for v, saved in zip(self.variables, self._saved_values):
            v.assign(saved)
        super().restore()

    def sync(self) -> None:
        for i, v in enumerate(self.variables):
            v.assign(array_ops.broadcast(v.numpy(), 0, "dadt.elastic.tf.%d" % i))
        self._save_values()
        super().sync()
