"""DistributedOptimizer for TensorFlow (Horovod's ``horovod.tensorflow.DistributedOptimizer``): a
``tf.compat.v1.train`` optimizer whose ``compute_gradients()`` reduces the gradients across
processes (graph mode and Session.run, or eager), or a Keras optimizer, which is handed to
dadt.keras.DistributedOptimizer.

.. code-block:: python

    tf.compat.v1.disable_eager_execution()
    opt = tf.compat.v1.train.GradientDescentOptimizer(0.01 * hvd.size())
    opt = hvd.DistributedOptimizer(opt)
    train_op = opt.minimize(loss)          # compute_gradients (reduced) + apply_gradients
"""

from typing import Any, Dict

import tensorflow as tf

from dadt.common.process_sets import global_process_set, set_id
from dadt.common.util import Adasum, Average, Sum
from dadt.tensorflow.compression import Compression
from dadt.tensorflow.functions import reduce_keeping_local

__all__ = ["DistributedOptimizer"]

_LegacyOptimizer = tf.compat.v1.train.Optimizer


class _DistributedOptimizer(_LegacyOptimizer):
    """Wraps a tf.compat.v1.train.Optimizer: ``compute_gradients()`` returns the gradients
    reduced with one grouped allreduce (allreduce_gradients); ``apply_gradients()`` and the slot
    methods are the wrapped optimizer's. ``minimize()`` is the base class's: the two in turn."""

    def __init__(self, optimizer, name=None, use_locking=False, compression=Compression.none,
                 sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0,
                 process_set=global_process_set, scale_local_gradients=True):
        if name is None:
            name = "Distributed%s" % type(optimizer).__name__
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._dadt_compression = compression
        self._dadt_sparse_as_dense = sparse_as_dense
        self._dadt_op = op
        self._dadt_predivide = gradient_predivide_factor
        self._dadt_local: Dict[int, Any] = {}
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients

    def register_local_var(self, var) -> None:
        """Marks a variable as local to this process: its gradient is not reduced (only divided
        by the number of processes of the set when ``scale_local_gradients``)."""
        self._dadt_local[id(var)] = var

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's compute_gradients(), with the gradients reduced across
        processes (those of local variables kept, see `register_local_var`)."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = zip(*pairs)
        local = [id(v) in self._dadt_local for v in variables]
        reduced = reduce_keeping_local(list(grads), local, self.scale_local_gradients,
                                       self._dadt_compression, self._dadt_op,
                                       self._dadt_predivide, self._dadt_sparse_as_dense,
                                       self.process_set)
        return list(zip(reduced, variables))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """The wrapped optimizer's apply_gradients()."""
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",  # noqa: N802
                         device_sparse="", compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Horovod's ``horovod.tensorflow.DistributedOptimizer`` (its arguments, in its order).

    A ``tf.compat.v1.train.Optimizer`` is wrapped so that ``compute_gradients()`` (and so
    ``minimize()``) averages the gradients across processes (``op=Sum`` sums them) with one
    grouped allreduce, in a tf.compat.v1 graph or eagerly; ``apply_gradients()`` and the slots
    are the wrapped optimizer's. A Keras optimizer goes to dadt.keras.DistributedOptimizer with
    the same arguments. Anything else is a ValueError.

    Arguments:
        optimizer: a tf.compat.v1.train.Optimizer or a keras.optimizers.Optimizer.
        name: the wrapper's name (default "Distributed" + the optimizer's class name).
        use_locking: the tf.compat.v1.train.Optimizer argument.
        device_dense, device_sparse: accepted for Horovod compatibility (CPU only).
        compression, sparse_as_dense, op, gradient_predivide_factor, process_set,
            scale_local_gradients: as for DistributedGradientTape; a rank outside
            ``process_set`` keeps its own gradients.
        backward_passes_per_step, average_aggregated_gradients: Keras optimizers only; a
            tf.compat.v1 optimizer takes backward_passes_per_step=1 (Horovod's local
            accumulation of TF1 graphs is not offered: ValueError).
        num_groups, groups: accepted for Horovod compatibility (one group per step).
    """
    if isinstance(optimizer, _LegacyOptimizer):
        if backward_passes_per_step != 1:
            raise ValueError("backward_passes_per_step > 1 is not supported with a "
                             "tf.compat.v1.train optimizer; accumulate the gradients in the "
                             "graph, or use a Keras optimizer")
        if op not in (Average, Sum, Adasum):
            raise ValueError("gradients are reduced with op=Average, op=Sum or op=Adasum, got "
                             "op=%r" % (op,))
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("gradient_predivide_factor needs op=Average")
        set_id(process_set)  # an unregistered set is refused here, not at compute_gradients()
        return _DistributedOptimizer(optimizer, name, use_locking, compression, sparse_as_dense,
                                     op, gradient_predivide_factor, process_set,
                                     scale_local_gradients)
    import keras
    if isinstance(optimizer, keras.optimizers.Optimizer):
        from dadt.keras import DistributedOptimizer as keras_distributed_optimizer
        return keras_distributed_optimizer(
            optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
            compression=compression, sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor, op=op,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
            groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)
    raise ValueError("DistributedOptimizer takes a tf.compat.v1.train.Optimizer or a Keras "
                     "optimizer, got %s" % type(optimizer).__name__)
