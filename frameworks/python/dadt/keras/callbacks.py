"""Keras 3 callbacks for distributed model.fit: broadcast the initial state, average the epoch's
metrics, warm the learning rate up. They work with every Keras backend (values cross as NumPy)."""

import warnings
from typing import Optional

import keras
import numpy as np

from dadt.common import array_ops
from dadt.common.basics import size
from dadt.common.util import Average

__all__ = ["BroadcastGlobalVariablesCallback", "MetricAverageCallback",
           "LearningRateWarmupCallback", "broadcast_variables"]


def _host_value(variable) -> np.ndarray:
    """A Keras variable's value as a NumPy array, on any backend (detached from autograd)."""
    return keras.ops.convert_to_numpy(keras.ops.stop_gradient(variable.value))


def broadcast_variables(variables, root_rank: int = 0, name: Optional[str] = None) -> None:
    """Assigns root rank's value to each Keras variable on every process (all broadcasts in
    flight at once)."""
    variables = list(variables)
    base = array_ops.make_name("broadcast_variables", name)
    handles = [array_ops.broadcast_async(_host_value(v), root_rank,
                                         "%s.%d" % (base, i)) for i, v in enumerate(variables)]
    for v, h in zip(variables, handles):
        v.assign(array_ops.synchronize(h))


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Makes every process start from root rank's state: the model's variables when training
    begins, and the optimizer's variables (created by the first step) after the first batch.
    This is the Keras form of DADT's TF1 BroadcastTrainableVariablesHook."""

    def __init__(self, root_rank: int = 0):
        super().__init__()
        self.root_rank = root_rank
        self._optimizer_done = False

    def on_train_begin(self, logs=None):
        broadcast_variables(self.model.variables, self.root_rank, name="bcast_model")

    def on_train_batch_end(self, batch, logs=None):
        if self._optimizer_done:
            return
        self._optimizer_done = True
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None and optimizer.variables:
            broadcast_variables(optimizer.variables, self.root_rank, name="bcast_optimizer")


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

    def __init__(self, initial_lr: float, warmup_epochs: int = 5,
                 momentum_correction: bool = False, steps_per_epoch: Optional[int] = None,
                 verbose: int = 0):
        super().__init__()
        if warmup_epochs <= 0:
            raise ValueError("warmup_epochs must be > 0, got %r" % (warmup_epochs,))
        if momentum_correction:
            warnings.warn("LearningRateWarmupCallback: momentum_correction has no effect in "
                          "Keras 3 (momentum is fixed when the train step is compiled)")
        self.initial_lr = float(initial_lr)
        self.warmup_epochs = warmup_epochs
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self._epoch = 0

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
