"""Elastic training for TensorFlow 2 with Horovod's names (docs/elastic.md).

``TensorFlowKerasState`` is dadt.keras.elastic.KerasState (a Keras model and optimizer);
``TensorFlowState`` holds plain ``tf.Variable``s. ``run`` is the elastic loop, which also turns a
collective's failure inside a ``tf.function`` (``tf.errors.AbortedError``) into the reset it
stands for."""

from typing import Any, Sequence

import tensorflow as tf

from dadt.common import array_ops, basics
from dadt.common.elastic import (ElasticCheckpointError, HostsUpdatedInterrupt,
                                 LauncherUnreachableError, ObjectState, State)
from dadt.keras.elastic import (CommitStateCallback, KerasState, UpdateBatchStateCallback,
                                UpdateEpochStateCallback, VariablesHandler, run)

TensorFlowKerasState = KerasState

__all__ = ["CommitStateCallback", "ElasticCheckpointError", "HostsUpdatedInterrupt", "KerasState",
           "LauncherUnreachableError", "ObjectState", "State", "TensorFlowKerasState",
           "TensorFlowState", "UpdateBatchStateCallback", "UpdateEpochStateCallback", "run"]


class TensorFlowState(ObjectState):
    """State of ``tf.Variable``s (``variables``) plus plain objects as keyword arguments.
    ``session`` is accepted for Horovod's signature: TensorFlow 1 sessions are not supported."""

    def __init__(self, variables: Sequence[tf.Variable] = None, session=None, **kwargs: Any):
        if session is not None:
            raise ValueError("TensorFlowState: TensorFlow 1 sessions are not supported; pass "
                             "variables only (TensorFlow 2, eager)")
        self.__dict__["variables"] = list(variables or [])
        self.add_handler("variables", VariablesHandler(lambda: self.variables))
        super().__init__(bcast_object=array_ops.broadcast_object, get_rank=basics.rank,
                         allgather_object=array_ops.allgather_object, **kwargs)
