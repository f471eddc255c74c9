"""DistributedOptimizer for Keras 3: any Keras optimizer, with gradients averaged across
processes before they are applied (mode="sync"), or one of the modes that send less (local_sgd,
diloco, easgd; dadt.keras.periodic)."""

from typing import Optional

import keras

from dadt.common import periodic_numpy
from dadt.common.process_sets import (global_process_set, keeps_own_gradients, set_id,
                                     set_size)
from dadt.common.util import Adasum, Average, Sum
from dadt.keras.periodic import STATE_KEY, KerasPeriodic, WithoutKey

__all__ = ["DistributedOptimizer", "PartialDistributedOptimizer"]


def _reduce_gradients(grads, op, compression, predivide, name, sparse_as_dense=False,
                      process_set=global_process_set):
    if keeps_own_gradients(process_set):  # a rank outside the set (Horovod's rule)
        return grads
    backend = keras.backend.backend()
    if backend == "tensorflow":
        from dadt.tensorflow.functions import allreduce_gradients
        return allreduce_gradients(grads, compression=compression or _tf_none(), op=op,
                                   gradient_predivide_factor=predivide, name=name,
                                   sparse_as_dense=sparse_as_dense, process_set=process_set)
    if compression is not None or predivide != 1.0:
        raise ValueError("compression and gradient_predivide_factor need the tensorflow backend "
                         "of Keras; this one is %r" % backend)
    present = [i for i, g in enumerate(grads) if g is not None]
    if not present:
        return grads
    if backend == "jax":
        from dadt.jax.ops import grouped_allreduce
        reduced = grouped_allreduce([grads[i] for i in present], name=name, op=op,
                                    process_set=process_set)
    elif backend == "torch":
        from dadt.torch import grouped_allreduce
        reduced = grouped_allreduce([grads[i].contiguous() for i in present], name=name, op=op,
                                    process_set=process_set)
    else:
        raise ValueError("dadt.keras.DistributedOptimizer supports the tensorflow, jax and torch "
                         "backends of Keras, not %r" % backend)
    out = list(grads)
    for i, r in zip(present, reduced):
        out[i] = r
    return out


def _tf_none():
    from dadt.tensorflow.compression import Compression
    return Compression.none


class _Distributed:
    """Mixed in before the wrapped optimizer's class: reduces gradients, then applies them.

    With backward_passes_per_step N > 1, Keras's own gradient accumulation
    (``gradient_accumulation_steps``) adds N steps' gradients up locally, and the reduction
    runs in the update step only (every N-th), on the accumulated gradients."""

    _dadt_periodic = None  # KerasPeriodic in mode local_sgd, diloco or easgd

    def apply(self, grads, trainable_variables=None):
        if self._dadt_periodic is not None:
            return self._dadt_periodic.apply(self, super().apply, grads, trainable_variables)
        if self._dadt_passes == 1:
            grads = self._dadt_reduce(list(grads), trainable_variables)
        return super().apply(grads, trainable_variables)

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        if self._dadt_passes > 1:
            grads = self._dadt_reduce(list(grads), trainable_variables)
            if not self._dadt_average_aggregated:  # Keras averages the N steps; Horovod sums
                grads = [g if g is None else g * self._dadt_passes for g in grads]
        return super()._backend_update_step(grads, trainable_variables, learning_rate)

    def flush(self):
        """The modes that send less (local_sgd, diloco, easgd): finishes the exchanges in flight,
        then exchanges the whole model once more, so that every rank holds the same weights and
        no step is lost. Call it (or use callbacks.FlushCallback) at the end of training and
        before saving or evaluating the model; every rank must call it. Eager only (outside
        model.fit's compiled step). A no-op in mode="sync"."""
        if self._dadt_periodic is not None:
            self._dadt_periodic.flush()

    @property
    def bytes_sent(self):
        """Bytes this rank has handed to the model exchanges of mode local_sgd, diloco or easgd
        (after compression; 0 in mode="sync")."""
        engine = self._dadt_periodic.engine if self._dadt_periodic is not None else None
        return engine.bytes_sent if engine is not None else 0

    def mode_state(self):
        """The state of a mode that sends less beyond the model and the optimizer's variables
        (the step count, the last synced weights / theta and the outer momentum / the centre, the
        error feedback, the averages in flight): a picklable dict, or None (mode="sync", or no
        step yet). model.save() and save_weights() keep it as well (save_own_variables)."""
        return self._dadt_periodic.state() if self._dadt_periodic is not None else None

    def load_mode_state(self, state):
        """Restores what mode_state() returned (before or after the first step)."""
        if self._dadt_periodic is None:
            if state:
                raise ValueError("the state is that of mode=%r; this optimizer is mode='sync'"
                                 % state.get("mode"))
            return
        self._dadt_periodic.load_state(state)

    def save_own_variables(self, store):
        super().save_own_variables(store)
        data = self._dadt_periodic.state_bytes() if self._dadt_periodic is not None else None
        if data is not None:
            store[STATE_KEY] = data

    def load_own_variables(self, store):
        if STATE_KEY in list(store.keys()):
            if self._dadt_periodic is not None:
                self._dadt_periodic.load_state_bytes(store[STATE_KEY])
            store = WithoutKey(store, STATE_KEY)
        super().load_own_variables(store)

    def _dadt_reduce(self, grads, trainable_variables):
        if trainable_variables is None:
            trainable_variables = getattr(self, "_trainable_variables", None) or [None] * len(grads)
        trainable_variables = list(trainable_variables)
        local = [v is not None and id(v) in self._dadt_local for v in trainable_variables]
        if len(local) != len(grads):
            local = [False] * len(grads)
        reduced = _reduce_gradients([None if is_local else g for g, is_local in zip(grads, local)],
                                    self._dadt_op, self._dadt_compression, self._dadt_predivide,
                                    self._dadt_name, self._dadt_sparse_as_dense,
                                    self._dadt_process_set)
        if self._dadt_scale_local:
            size = set_size(self._dadt_process_set)
            return [g / size if is_local and g is not None else r
                    for g, r, is_local in zip(grads, reduced, local)]
        return [g if is_local else r for g, r, is_local in zip(grads, reduced, local)]


def DistributedOptimizer(optimizer, name: Optional[str] = None,  # noqa: N802
                         device_dense: str = "", device_sparse: str = "", compression=None, sparse_as_dense: bool = False,
                         gradient_predivide_factor: float = 1.0, op=Average,
                         backward_passes_per_step: int = 1,
                         average_aggregated_gradients: bool = False, num_groups: int = 0,
                         groups=None, process_set=global_process_set,
                         scale_local_gradients: bool = True, *, mode: str = "sync",
                         sync_every: Optional[int] = None, warmup_steps: Optional[int] = None,
                         fragments: Optional[int] = None,
                         fragment_sync_delay: Optional[int] = None,
                         fragment_update_alpha: Optional[float] = None, outer_optimizer=None,
                         moving_rate: Optional[float] = None,
                         asynchronous: Optional[bool] = None):
    """Returns a copy of a Keras 3 optimizer (same class and configuration, not yet built) that
    averages gradients across processes with one grouped allreduce per step, then applies them.

    .. code-block:: python

        opt = keras.optimizers.Adam(1e-3 * dadt.size())
        model.compile(optimizer=dadt.DistributedOptimizer(opt), loss=..., metrics=[...])

    Works with model.fit under the tensorflow (graph or eager; not ``jit_compile=True``: the
    collectives are host callbacks), jax and torch backends of Keras. The arguments are
    Horovod's, in Horovod's order.

    Arguments:
        optimizer: a keras.optimizers.Optimizer.
        name: base name of the gradient allreduces (generated per trace when None).
        device_dense, device_sparse: accepted for Horovod compatibility (CPU only).
        compression: dadt.tensorflow.Compression.none or .fp16 (tensorflow backend only).
        sparse_as_dense: reduce sparse gradients (tf.IndexedSlices) as dense tensors instead of
            allgathering their rows (tensorflow backend).
        gradient_predivide_factor: divide by this before the sum and by size/factor after
            (tensorflow backend, op=Average).
        op: Average (default) or Sum.
        backward_passes_per_step: accumulate this many steps' gradients locally and reduce and
            apply them every that many steps (through Keras's ``gradient_accumulation_steps``;
            tensorflow and torch backends).
        average_aggregated_gradients: with backward_passes_per_step > 1, apply the average of
            the accumulated gradients instead of their sum (Horovod's default: the sum).
        num_groups, groups: accepted for Horovod compatibility (one group per step).
        process_set: the process set whose ranks average the gradients (default: every rank);
            a rank outside it applies its own gradients (Horovod's rule).
        scale_local_gradients: see PartialDistributedOptimizer.
        mode: "sync" (default: the above), or one of the modes that send less: each rank
            applies its own gradients with the wrapped optimizer and the model is exchanged
            every ``sync_every`` steps (docs/frameworks.md, "Modes that send less"; call
            ``flush()`` or use callbacks.FlushCallback at the end):
            "local_sgd": the weights are averaged (post-local SGD).
            "diloco": the averaged pseudo-gradient goes through ``outer_optimizer`` (DiLoCo;
            Streaming DiLoCo with ``fragments`` and ``fragment_sync_delay``); ``compression``
            may be Compression.fp16, bf16 or int8 (with error feedback).
            "easgd": elastic averaging towards a centre variable (EASGD, EAMSGD).
        sync_every: steps between two exchanges of (each fragment of) the model; required.
        warmup_steps: steps of mode="sync" first (default 0).
        fragments: local_sgd, diloco: the trainable variables are cut into this many
            contiguous runs of about equal bytes, exchanged on a staggered schedule (default 1).
        fragment_sync_delay: diloco: steps a fragment's allreduce overlaps before its outer
            update is applied (default 0; less than sync_every // fragments).
        fragment_update_alpha: diloco: the weights after an outer update are
            (1 - a) * synced + a * local (default 0).
        outer_optimizer: diloco: a dict of lr, momentum, nesterov, or a
            dadt.common.diloco.NesterovOuter (default lr 0.7, momentum 0.9, Nesterov).
        moving_rate: easgd: alpha (default 0.9 / ranks).
        asynchronous: easgd: the centre's allreduce overlaps the next sync_every steps.
    """
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError("DistributedOptimizer wraps a keras.optimizers.Optimizer, got %s"
                        % type(optimizer).__name__)
    knobs = {k: v for k, v in dict(
        sync_every=sync_every, warmup_steps=warmup_steps, fragments=fragments,
        fragment_sync_delay=fragment_sync_delay, fragment_update_alpha=fragment_update_alpha,
        outer_optimizer=outer_optimizer, moving_rate=moving_rate,
        asynchronous=asynchronous).items() if v is not None}
    periodic = None
    if mode != "sync":
        periodic = _periodic_mode(mode, knobs, compression, op, gradient_predivide_factor,
                                  backward_passes_per_step, process_set, name)
    elif knobs:
        raise ValueError("%s: option(s) of the modes that send less (%s), not of mode='sync'"
                         % (", ".join(sorted(knobs)), ", ".join(periodic_numpy.MODES)))
    elif getattr(compression, "wire", None) == "int8":
        raise ValueError("Compression.int8 is for mode='diloco' and mode='local_sgd' (their "
                         "exchanges go through an allgather); mode='sync' allreduces, which "
                         "cannot sum int8")
    if op not in (Average, Sum, Adasum):
        raise ValueError("gradients are reduced with op=Average, op=Sum or op=Adasum, got "
                         "op=%r" % (op,))
    if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be an int >= 1, got %r"
                         % (backward_passes_per_step,))
    set_id(process_set)  # an unregistered set is refused here, not at the first step
    base = type(optimizer)
    cls = type(base.__name__, (_Distributed, base), {"__module__": base.__module__})
    config = optimizer.get_config()
    if backward_passes_per_step > 1:
        if config.get("gradient_accumulation_steps"):
            raise ValueError("backward_passes_per_step and the optimizer's own "
                             "gradient_accumulation_steps are the same thing; set one")
        config["gradient_accumulation_steps"] = backward_passes_per_step
    wrapped = cls.from_config(config)
    wrapped._dadt_op = op
    wrapped._dadt_compression = compression
    wrapped._dadt_predivide = float(gradient_predivide_factor)
    wrapped._dadt_name = name
    wrapped._dadt_sparse_as_dense = bool(sparse_as_dense)
    wrapped._dadt_passes = backward_passes_per_step
    wrapped._dadt_average_aggregated = bool(average_aggregated_gradients)
    wrapped._dadt_local = {}
    wrapped._dadt_scale_local = bool(scale_local_gradients)
    wrapped._dadt_process_set = process_set
    wrapped._dadt_periodic = periodic
    return wrapped


def _periodic_mode(mode, knobs, compression, op, predivide, passes, process_set, name):
    """The KerasPeriodic of mode local_sgd, diloco or easgd; ValueError for an option the mode
    does not take (its knobs are checked as dadt.torch checks them)."""
    if mode not in periodic_numpy.MODES:
        raise ValueError("mode must be one of 'sync', %s, got %r"
                         % (", ".join(repr(m) for m in periodic_numpy.MODES), mode))
    if op != Average or predivide != 1.0:
        raise ValueError("mode=%r averages the model; op=Average and gradient_predivide_factor=1 "
                         "only" % mode)
    if passes != 1:
        raise ValueError("mode=%r: backward_passes_per_step must be 1 (accumulate with a larger "
                         "batch, or raise sync_every)" % mode)
    set_id(process_set)
    periodic_numpy.check_mode(mode, knobs, periodic_numpy.wire_name(compression),
                              max(set_size(process_set), 1))
    return KerasPeriodic(mode, knobs, compression, process_set, name)


def PartialDistributedOptimizer(optimizer, name: Optional[str] = None,  # noqa: N802
                                device_dense: str = "", device_sparse: str = "",
                                compression=None, sparse_as_dense: bool = False,
                                gradient_predivide_factor: float = 1.0, op=Average,
                                backward_passes_per_step: int = 1,
                                average_aggregated_gradients: bool = False,
                                groups=None, process_set=global_process_set, local_layers=None,
                                scale_local_gradients: bool = True):
    """A DistributedOptimizer that keeps the gradients of ``local_layers`` (a Keras layer or a
    list of them) local: they are not reduced, only divided by the number of processes when
    ``scale_local_gradients`` (Horovod's behaviour). The other arguments are
    DistributedOptimizer's."""
    if local_layers is None:
        local_layers = []
    elif not isinstance(local_layers, (list, tuple)):
        local_layers = [local_layers]
    for layer in local_layers:
        if not isinstance(layer, keras.layers.Layer):
            raise ValueError("local_layers must be keras.layers.Layer, got %s"
                             % type(layer).__name__)
    wrapped = DistributedOptimizer(optimizer, name, device_dense, device_sparse, compression,
                                   sparse_as_dense, gradient_predivide_factor, op,
                                   backward_passes_per_step, average_aggregated_gradients,
                                   groups=groups, process_set=process_set,
                                   scale_local_gradients=scale_local_gradients)
    wrapped._dadt_local = {id(v): v for layer in local_layers for v in layer.trainable_weights}
    return wrapped
