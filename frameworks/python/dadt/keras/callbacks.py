"""Keras 3 callbacks for distributed model.fit: broadcast the initial state, average the epoch's
metrics, warm the learning rate up, flush the modes that send less at the end. They work with
every Keras backend (values cross as NumPy)."""

import warnings
from typing import Optional

import keras
import numpy as np

from dadt.common import array_ops
from dadt.common.basics import size
from dadt.common.util import Average

__all__ = ["BroadcastGlobalVariablesCallback", "MetricAverageCallback",
           "LearningRateScheduleCallback", "LearningRateWarmupCallback", "FlushCallback",
           "broadcast_variables"]


def _host_value(variable) -> np.ndarray:
    """A Keras variable's (or a tf.Variable's) value as a NumPy array, on any backend (detached
    from autograd)."""
    if callable(variable.value):  # a tf.Variable (its value() is a method, Keras's a property)
        return variable.numpy()
    return keras.ops.convert_to_numpy(keras.ops.stop_gradient(variable.value))


def broadcast_variables(variables, root_rank: int = 0, name: Optional[str] = None,
                        process_set=None) -> None:
    """Assigns root rank's value to each Keras variable on every process (of ``process_set``;
    all broadcasts in flight at once)."""
    variables = list(variables)
    base = array_ops.make_name("broadcast_variables", name, process_set)
    handles = [array_ops.broadcast_async(_host_value(v), root_rank, "%s.%d" % (base, i),
                                         process_set) for i, v in enumerate(variables)]
    for v, h in zip(variables, handles):
        v.assign(array_ops.synchronize(h))


def _optional_float(value) -> Optional[float]:
    return None if value is None else float(value)


def _current_lr(model) -> float:
    """The optimizer's learning rate when training begins: Horovod's default initial_lr."""
    warnings.warn("initial_lr not given: using the optimizer's learning rate when training "
                  "begins, as Horovod's deprecated form did; pass initial_lr")
    return float(keras.ops.convert_to_numpy(model.optimizer.learning_rate))


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Makes every process start from root rank's state: the model's variables when training
    begins, and the optimizer's variables (created by the first step) after the first batch.
    This is the Keras form of DADT's TF1 BroadcastTrainableVariablesHook.

    Arguments:
        root_rank: the rank whose state wins.
        device: accepted for Horovod compatibility (CPU only).
        local_variables: variables (or Keras layers, for their weights) that stay as they are on
            each process: they are not broadcast.
    """

    def __init__(self, root_rank: int = 0, device: str = "", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self._optimizer_done = False
        local = []
        for item in (local_variables or []):
            local.extend(item.weights if isinstance(item, keras.layers.Layer) else [item])
        self._local = {id(v): v for v in local}

    def _shared(self, variables):
        return [v for v in variables if id(v) not in self._local]

    def on_train_begin(self, logs=None):
        broadcast_variables(self._shared(self.model.variables), self.root_rank,
                            name="bcast_model")

    def on_train_batch_end(self, batch, logs=None):
        if self._optimizer_done:
            return
        self._optimizer_done = True
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None and optimizer.variables:
            broadcast_variables(self._shared(optimizer.variables), self.root_rank,
                                name="bcast_optimizer")


class MetricAverageCallback(keras.callbacks.Callback):
    """Replaces each metric in the epoch's logs by its average over all processes, so that
    rank 0's printout, checkpoints and early stopping see the job's metrics. Put it before
    the callbacks that read the logs."""

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        keys = sorted(k for k, v in logs.items() if np.ndim(v) == 0)
        values = np.array([float(logs[k]) for k in keys], dtype=np.float64)
        averaged = array_ops.allreduce(values, "metric_average.%d" % epoch, Average)
        for k, v in zip(keys, averaged):
            logs[k] = float(v)


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets the learning rate to ``initial_lr * multiplier`` from ``start_epoch`` up to
    ``end_epoch`` (Horovod's callback): ``multiplier`` is a number or a function of the epoch
    (an integer with ``staircase=True``, else a fraction updated every batch).

    Arguments:
        initial_lr: the base learning rate (usually already scaled by size()).
        multiplier: a constant or ``f(epoch) -> float``.
        start_epoch: first epoch the schedule applies to.
        end_epoch: the epoch it stops at (exclusive); None: until training ends.
        staircase: change the rate once per epoch (True) or every batch (False).
        momentum_correction: Horovod's option; has no effect in Keras 3 (see
            LearningRateWarmupCallback).
        steps_per_epoch: batches per epoch (default: model.fit's ``steps``).
    """

    def __init__(self, initial_lr: Optional[float] = None, multiplier=None, start_epoch: int = 0,
                 end_epoch: Optional[int] = None, staircase: bool = True,
                 momentum_correction: bool = False, steps_per_epoch: Optional[int] = None):
        super().__init__()
        if multiplier is None:
            raise ValueError("LearningRateScheduleCallback needs a multiplier (a number or a "
                             "function of the epoch)")
        if momentum_correction:
            warnings.warn("LearningRateScheduleCallback: momentum_correction has no effect in "
                          "Keras 3 (momentum is fixed when the train step is compiled)")
        self.initial_lr = _optional_float(initial_lr)
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.steps_per_epoch = steps_per_epoch
        self._epoch = 0

    def on_train_begin(self, logs=None):
        if self.initial_lr is None:
            self.initial_lr = _current_lr(self.model)

    def _in_range(self, epoch: float) -> bool:
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _set(self, epoch: float) -> None:
        self.model.optimizer.learning_rate = self.initial_lr * float(self.multiplier(epoch))

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        if self.staircase and self._in_range(epoch):
            self._set(epoch)

    def on_train_batch_begin(self, batch, logs=None):
        if self.staircase or not self._in_range(self._epoch):
            return
        steps = self.steps_per_epoch or self.params.get("steps") or 1
        self._set(self._epoch + batch / steps)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = float(keras.ops.convert_to_numpy(
                self.model.optimizer.learning_rate))


class LearningRateWarmupCallback(keras.callbacks.Callback):
    """Ramps the learning rate linearly from ``initial_lr / size()`` to ``initial_lr`` over the
    first ``warmup_epochs`` epochs (per batch), as large-batch training on many processes needs
    (Goyal et al., 2017). ``initial_lr`` is the already scaled rate, usually ``lr * size()``.

    Arguments:
        initial_lr: the learning rate at the end of the warmup.
        warmup_epochs: length of the warmup in epochs.
        momentum_correction: Horovod's option; Keras 3 fixes momentum when the step is compiled,
            so it cannot be corrected per batch and passing True only warns.
        steps_per_epoch: batches per epoch (default: model.fit's ``steps``).
        verbose: 1 prints the rate at the end of the warmup.
    """

    def __init__(self, initial_lr: Optional[float] = None, warmup_epochs: int = 5,
                 momentum_correction: bool = False, steps_per_epoch: Optional[int] = None,
                 verbose: int = 0):
        super().__init__()
        if warmup_epochs <= 0:
            raise ValueError("warmup_epochs must be > 0, got %r" % (warmup_epochs,))
        if momentum_correction:
            warnings.warn("LearningRateWarmupCallback: momentum_correction has no effect in "
                          "Keras 3 (momentum is fixed when the train step is compiled)")
        self.initial_lr = _optional_float(initial_lr)
        self.warmup_epochs = warmup_epochs
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self._epoch = 0

    def on_train_begin(self, logs=None):
        if self.initial_lr is None:
            self.initial_lr = _current_lr(self.model)

    def learning_rate(self, epoch: float) -> float:
        """The rate at a fractional epoch."""
        if epoch >= self.warmup_epochs:
            return self.initial_lr
        return self.initial_lr / size() * (epoch * (size() - 1) / self.warmup_epochs + 1)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self._epoch >= self.warmup_epochs:
            return
        steps = self.steps_per_epoch or self.params.get("steps") or 1
        self.model.optimizer.learning_rate = self.learning_rate(self._epoch + batch / steps)

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == self.warmup_epochs:
            self.model.optimizer.learning_rate = self.initial_lr
            if self.verbose:
                print("Epoch %d: finished the learning rate warmup at %g"
                      % (epoch + 1, self.initial_lr))
        if logs is not None:
            logs["learning_rate"] = float(keras.ops.convert_to_numpy(
                self.model.optimizer.learning_rate))


class FlushCallback(keras.callbacks.Callback):
    """Calls the DistributedOptimizer's ``flush()`` when training ends (and, with
    ``every_epoch=True``, at the end of each epoch): in mode local_sgd, diloco or easgd the
    exchanges in flight finish and the whole model is exchanged once more, so that every rank
    holds the same weights and no step is lost; a no-op in mode="sync". Every rank must have it.
    With ``every_epoch``, put it before the callbacks that read the weights (checkpoints); the
    epoch's validation has already run on each rank's own weights."""

    def __init__(self, every_epoch: bool = False):
        super().__init__()
        self.every_epoch = every_epoch

    def _flush(self):
        flush = getattr(getattr(self.model, "optimizer", None), "flush", None)
        if flush is not None:
            flush()

    def on_epoch_end(self, epoch, logs=None):
        if self.every_epoch:
            self._flush()

    def on_train_end(self, logs=None):
        self._flush()
