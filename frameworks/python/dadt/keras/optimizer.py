"""DistributedOptimizer for Keras 3: any Keras optimizer, with gradients averaged across
processes before they are applied."""

from typing import Optional

import keras

from dadt.common.util import Average, Sum

__all__ = ["DistributedOptimizer"]


def _reduce_gradients(grads, op, compression, predivide, name):
    backend = keras.backend.backend()
    if backend == "tensorflow":
        from dadt.tensorflow.functions import allreduce_gradients
        return allreduce_gradients(grads, compression=compression or _tf_none(), op=op,
                                   gradient_predivide_factor=predivide, name=name)
    if compression is not None or predivide != 1.0:
        raise ValueError("compression and gradient_predivide_factor need the tensorflow backend "
                         "of Keras; this one is %r" % backend)
    present = [i for i, g in enumerate(grads) if g is not None]
    if not present:
        return grads
    if backend == "jax":
        from dadt.jax.ops import grouped_allreduce
        reduced = grouped_allreduce([grads[i] for i in present], name=name, op=op)
    elif backend == "torch":
        from dadt.torch import grouped_allreduce
        reduced = grouped_allreduce([grads[i].contiguous() for i in present], name=name, op=op)
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
    """Mixed in before the wrapped optimizer's class: reduces gradients, then applies them."""

    def apply(self, grads, trainable_variables=None):
        grads = _reduce_gradients(list(grads), self._dadt_op, self._dadt_compression,
                                  self._dadt_predivide, self._dadt_name)
        return super().apply(grads, trainable_variables)


def DistributedOptimizer(optimizer, name: Optional[str] = None, compression=None, op=Average,  # noqa: N802
                         gradient_predivide_factor: float = 1.0):
    """Returns a copy of a Keras 3 optimizer (same class and configuration, not yet built) that
    averages gradients across processes with one grouped allreduce per step, then applies them.

    .. code-block:: python

        opt = keras.optimizers.Adam(1e-3 * dadt.size())
        model.compile(optimizer=dadt.DistributedOptimizer(opt), loss=..., metrics=[...])

    Works with model.fit under the tensorflow (graph or eager; not ``jit_compile=True``: the
    collectives are host callbacks), jax and torch backends of Keras.

    Arguments:
        optimizer: a keras.optimizers.Optimizer.
        name: base name of the gradient allreduces (generated per trace when None).
        compression: dadt.tensorflow.Compression.none or .fp16 (tensorflow backend only).
        op: Average (default) or Sum.
        gradient_predivide_factor: divide by this before the sum and by size/factor after
            (tensorflow backend, op=Average).
    """
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError("DistributedOptimizer wraps a keras.optimizers.Optimizer, got %s"
                        % type(optimizer).__name__)
    if op not in (Average, Sum):
        raise ValueError("gradients are reduced with op=Average or op=Sum, got op=%r" % (op,))
    base = type(optimizer)
    cls = type(base.__name__, (_Distributed, base), {"__module__": base.__module__})
    wrapped = cls.from_config(optimizer.get_config())
    wrapped._dadt_op = op
    wrapped._dadt_compression = compression
    wrapped._dadt_predivide = float(gradient_predivide_factor)
    wrapped._dadt_name = name
    return wrapped
