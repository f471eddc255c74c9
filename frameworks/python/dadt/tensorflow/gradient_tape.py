"""DistributedGradientTape and PartialDistributedGradientTape: tf.GradientTape whose gradients
are reduced across processes (Horovod's API)."""

from typing import Any, Dict

import tensorflow as tf

from dadt.common.process_sets import global_process_set, set_id
from dadt.common.util import Average
from dadt.tensorflow.compression import Compression
from dadt.tensorflow.functions import reduce_keeping_local

__all__ = ["DistributedGradientTape", "PartialDistributedGradientTape"]


class DistributedGradientTape(tf.GradientTape):
    """A tf.GradientTape whose ``gradient()`` averages the gradients across processes.

    .. code-block:: python

        with tf.GradientTape() as tape:
            loss = loss_fn(model(x), y)
        tape = dadt.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)

    The gradients of one call travel as one grouped (fused) allreduce; sparse gradients
    (tf.IndexedSlices, from tf.gather or embeddings) have their rows allgathered unless
    ``sparse_as_dense``.

    Arguments:
        gradtape: the tf.GradientTape that recorded the forward pass.
        device_dense, device_sparse: accepted for Horovod compatibility (CPU only).
        compression: Compression.none (default) or Compression.fp16.
        sparse_as_dense: reduce sparse gradients as dense tensors.
        op: Average (default) or Sum.
        gradient_predivide_factor: see `allreduce_gradients`.
        num_groups, groups: accepted for Horovod compatibility; one call's gradients are
            always one group.
        process_set: the process set whose ranks reduce the gradients (default: every rank);
            on a rank outside it ``gradient()`` returns the local gradients unchanged (Horovod's
            rule).
        scale_local_gradients: divide the gradients of local sources (see
            `register_local_source`) by the number of processes of the set, as Horovod does.
    """

    def __init__(self, gradtape, device_dense="", device_sparse="", compression=Compression.none,
                 sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0,
                 num_groups=0, groups=None, process_set=global_process_set,
                 scale_local_gradients=True):
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("gradient_predivide_factor needs op=Average")
        set_id(process_set)  # refuses an unregistered set here rather than at gradient()
        # No super().__init__(): this tape takes over the recorded state of `gradtape`.
        self.__dict__.update(gradtape.__dict__)
        self._dadt_compression = compression
        self._dadt_op = op
        self._dadt_predivide = gradient_predivide_factor
        self._dadt_sparse_as_dense = sparse_as_dense
        self._dadt_scale_local = scale_local_gradients
        self._dadt_local: Dict[int, Any] = {}
        self._dadt_process_set = process_set

    def register_local_source(self, source) -> None:
        """Marks a source (a variable) as local to this process: its gradient is not reduced
        (only divided by the number of processes when ``scale_local_gradients``)."""
        self._dadt_local[id(source)] = source

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = super().gradient(target, sources, output_gradients, unconnected_gradients)
        flat_sources = tf.nest.flatten(sources, expand_composites=False)
        flat = tf.nest.flatten(grads, expand_composites=False)
        local = [id(s) in self._dadt_local for s in flat_sources]
        if len(local) != len(flat):
            local = [False] * len(flat)
        out = reduce_keeping_local(flat, local, self._dadt_scale_local, self._dadt_compression,
                                   self._dadt_op, self._dadt_predivide,
                                   self._dadt_sparse_as_dense, self._dadt_process_set)
        return tf.nest.pack_sequence_as(grads, out)


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",  # noqa: N802
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set, local_layers=None,
                                   scale_local_gradients=True) -> DistributedGradientTape:
    """A DistributedGradientTape that keeps the gradients of ``local_layers`` (a Keras layer or
    a list of them) local: their trainable weights are registered as local sources."""
    if local_layers is None:
        local_layers = []
    elif not isinstance(local_layers, (list, tuple)):
        local_layers = [local_layers]
    for layer in local_layers:
        if not hasattr(layer, "trainable_weights"):
            raise ValueError("local_layers must be Keras layers, got %s" % type(layer).__name__)
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    for layer in local_layers:
        for variable in layer.trainable_weights:
            tape.register_local_source(variable)
    return tape
