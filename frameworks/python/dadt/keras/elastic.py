"""Elastic training for Keras 3 ``model.fit`` with Horovod's names (docs/elastic.md): KerasState
and the three callbacks that keep it current and committed.

    state = dadt.elastic.KerasState(model, batch=0, epoch=0)
    callbacks = [dadt.elastic.CommitStateCallback(state, batches_per_commit=10),
                 dadt.elastic.UpdateBatchStateCallback(state),
                 dadt.elastic.UpdateEpochStateCallback(state)]

    @dadt.elastic.run
    def train(state):
        state.model.fit(x, y, steps_per_epoch=..., epochs=epochs - state.epoch, callbacks=callbacks)

Works on every Keras backend: values cross as NumPy (dadt.keras.broadcast_variables).
"""

from typing import Any, Callable, Optional

import keras
import numpy as np

from dadt.common import array_ops, basics
from dadt.common.elastic import (ElasticCheckpointError, HostsUpdatedInterrupt,
                                 LauncherUnreachableError, ObjectState, State, StateHandler, run_fn)
from dadt.common.exceptions import DadtInternalError
from dadt.keras.callbacks import _host_value, broadcast_variables
from dadt.keras.periodic import take_callback_failure

__all__ = ["CommitStateCallback", "ElasticCheckpointError", "HostsUpdatedInterrupt", "KerasState",
           "LauncherUnreachableError", "ObjectState", "State", "UpdateBatchStateCallback",
           "UpdateEpochStateCallback", "run"]


class VariablesHandler(StateHandler):
    """A list of Keras (or TensorFlow) variables, given as a function that returns it (an
    optimizer's are built late): saved as NumPy copies, assigned back, synced with
    ``broadcast_variables``."""

    def __init__(self, get_variables: Callable[[], list]):
        super().__init__(get_variables)

    def capture(self) -> Any:
        return [np.array(_host_value(v), copy=True) for v in self.value()]

    def apply(self, saved: Any) -> None:
        for v, value in zip(self.value(), saved):
            v.assign(value)

    def sync(self, root_rank: int, bcast_object: Callable) -> None:
        broadcast_variables(self.value(), root_rank=root_rank, name="dadt.elastic." + self.name)


class PeriodicHandler(StateHandler):
    """The exchange state of a DistributedOptimizer in a mode that sends less (local_sgd, diloco,
    easgd; dadt.keras.periodic.KerasPeriodic, given as a function that returns it or None): the
    step count, the last synced weights or centre, the outer state, the error feedback. A commit
    waits for the exchanges in flight and keeps their averages; ``restore`` drops those of the
    old world and puts the commit's back, so the schedule, the model and the synced weights come
    back together; ``sync`` gives every rank the root's. Nothing in mode="sync"."""

    def __init__(self, get_periodic: Callable[[], Any]):
        super().__init__(get_periodic)

    def capture(self) -> Any:
        periodic = self.value()
        return None if periodic is None else periodic.state()

    def apply(self, saved: Any) -> None:
        periodic = self.value()
        if periodic is not None:
            periodic.restart(saved)


class KerasState(ObjectState):
    """State of a Keras model and its optimizer (``model.optimizer`` unless given), plus plain
    objects as keyword arguments. ``save`` copies every model and optimizer variable, ``restore``
    assigns the copies back, ``sync`` broadcasts the root rank's. The optimizer's variables are
    built first when they are not yet (a worker that joined late has taken no step), so every
    rank broadcasts the same list.

    ``backend`` is accepted for Horovod's signature and unused (Keras 3 has one backend API)."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs: Any):
        del backend
        self.__dict__["model"] = model
        self.__dict__["optimizer"] = optimizer if optimizer is not None else model.optimizer
        self.add_handler("model", VariablesHandler(lambda: list(self.model.variables)))
        self.add_handler("optimizer", VariablesHandler(self._optimizer_variables))
        self.add_handler("dadt_periodic", PeriodicHandler(
            lambda: getattr(self.optimizer, "_dadt_periodic", None)))
        super().__init__(bcast_object=array_ops.broadcast_object, get_rank=basics.rank,
                         allgather_object=array_ops.allgather_object, **kwargs)

    def _optimizer_variables(self) -> list:
        opt = self.optimizer
        if opt is None:
            return []
        if not getattr(opt, "built", True):
            opt.build(self.model.trainable_variables)
        return list(opt.variables)


class CommitStateCallback(keras.callbacks.Callback):
    """Commits ``state`` once every ``batches_per_commit`` batches and once per epoch.

    The commit is made at the start of the next batch or epoch (or at the end of training), when
    every callback has seen the batch that ended: so ``state.batch`` and ``state.epoch`` (kept by
    the two callbacks below) are current whatever the order of the callbacks in the list."""

    def __init__(self, state: State, batches_per_commit: int = 1):
        super().__init__()
        if batches_per_commit < 1:
            raise ValueError("batches_per_commit must be >= 1, got %r" % batches_per_commit)
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit
        self._due = False

    def on_train_begin(self, logs=None):
        self.batches_remaining = self.batches_per_commit  # the same count on every rank
        self._due = False

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self._due = True
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self._due = True

    def _commit_if_due(self):
        if self._due:
            self._due = False
            self.state.commit()

    def on_batch_begin(self, batch, logs=None):
        self._commit_if_due()

    def on_epoch_begin(self, epoch, logs=None):
        self._commit_if_due()

    def on_train_end(self, logs=None):
        self._commit_if_due()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps ``state.batch`` at the number of batches finished in the current epoch (0 at its
    end), counting those done before a reset; an epoch re-entered after a reset runs only the steps
    that are left (``steps_per_epoch`` minus ``state.batch``)."""

    def __init__(self, state: State):
        super().__init__()
        self.state = state
        self.steps_per_epoch: Optional[int] = None
        self._done_before = 0

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self._done_before = self.state.batch  # > 0 only for an epoch re-entered after a reset
        steps = self.params.get("steps") if self.params else None
        if steps:
            if self.steps_per_epoch is None:
                self.steps_per_epoch = steps
            self.params["steps"] = self.steps_per_epoch - self._done_before

    def on_batch_end(self, batch, logs=None):
        self.state.batch = self._done_before + batch + 1

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0
        self._done_before = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps ``state.epoch`` at the number of finished epochs across resets (Keras counts each
    ``fit`` from 0)."""

    def __init__(self, state: State):
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self.initial_epoch + epoch + 1


def _is_peer_failure(error: BaseException) -> bool:
    """A collective's failure as a compiled (graph) function reports it: TensorFlow's error class
    of DADT_ERR_ABORTED / DADT_ERR_TIMEOUT (dadt.tensorflow.errors), which carries no dadt type."""
    try:
        import tensorflow as tf
    except ImportError:
        return False
    return isinstance(error, (tf.errors.AbortedError, tf.errors.DeadlineExceededError))


def _reset() -> None:
    basics.shutdown()
    basics.init()


def run(func: Callable) -> Callable:
    """Decorator for an elastic training function ``func(state, ...)`` (dadt.common.elastic):
    a peer's death restores the last commit and re-forms the world, a host update re-forms it;
    ``func`` is then called again."""

    def translated(state, *args, **kwargs):
        take_callback_failure()  # one left from an earlier call is not this one's
        try:
            return func(state, *args, **kwargs)
        except Exception as e:  # noqa: BLE001 - re-raised unless it is a peer failure
            if isinstance(e, DadtInternalError):
                raise
            inner = take_callback_failure()  # a mode's exchange inside the compiled step
            if isinstance(inner, DadtInternalError):
                raise inner from e
            if not _is_peer_failure(e):
                raise
            raise DadtInternalError(str(e)) from e

    translated.__name__ = getattr(func, "__name__", "train")
    translated.__doc__ = func.__doc__
    return run_fn(translated, _reset)
