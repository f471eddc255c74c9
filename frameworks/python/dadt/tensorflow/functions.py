"""Training helpers for TensorFlow: broadcast_variables (and broadcast_global_variables for
tf.compat.v1 graphs), allreduce_gradients (what DistributedGradientTape, in gradient_tape.py, and
the Keras DistributedOptimizer use), the rank/size ops and pickled objects.

``broadcast_variables`` is the TF2 replacement of DADT's TF1 ``BroadcastTrainableVariablesHook``
(and of Horovod's ``BroadcastGlobalVariablesHook``): call it once after the variables exist
(after the first step for optimizer slots), or use dadt.keras.callbacks with model.fit.
"""

from typing import Any, List, Optional

import numpy as np
import tensorflow as tf

from dadt.common import array_ops
from dadt.common.basics import local_rank, local_size, rank, size
from dadt.common.util import Adasum, Average, Sum
from dadt.tensorflow.compression import Compression
from dadt.tensorflow.errors import to_tf_error
from dadt.common.process_sets import (global_process_set, included_in_id, keeps_own_gradients,
                                     set_size, size_of_id)
from dadt.tensorflow.mpi_ops import broadcast, grouped_allreduce

__all__ = ["broadcast_variables", "broadcast_global_variables", "broadcast_object",
           "broadcast_object_fn",
           "allgather_object", "allreduce_gradients", "rank_op", "size_op", "local_rank_op",
           "local_size_op", "process_set_included_op"]


def broadcast_variables(variables, root_rank: int, name: Optional[str] = None,
                        process_set=global_process_set):
    """Assigns root rank's value to each variable on every process, eagerly or in a graph.
    Returns None eagerly and in a tf.function (which runs the assignments by itself); in a
    tf.compat.v1 graph, the op that assigns them all (run it in the Session).

    Arguments:
        variables: an iterable of tf.Variable (e.g. ``model.variables``,
            ``optimizer.variables``); the same variables, in the same order, on every rank.
        root_rank: the rank whose values win.
        name: base name of the broadcasts (generated when None).
        process_set: the process set whose ranks take part (default: every rank).
    """
    variables = list(variables)
    base = array_ops.make_name("broadcast_variables", name, process_set)
    if tf.executing_eagerly():
        # Every broadcast in flight at once, then the assignments.
        try:
            handles = [array_ops.broadcast_async(v.numpy(), root_rank, "%s.%d" % (base, i),
                                                 process_set)
                       for i, v in enumerate(variables)]
            for v, h in zip(variables, handles):
                v.assign(array_ops.synchronize(h))
        except Exception as e:  # noqa: BLE001 - re-raised as its tf.errors class
            raise to_tf_error(e) from None
        return None
    group = tf.group(*[v.assign(broadcast(v, root_rank, name="%s.%d" % (base, i),
                                          process_set=process_set))
                       for i, v in enumerate(variables)])
    # A tf.function runs its assignments by itself (and may not return an Operation).
    return None if tf.inside_function() else group


def broadcast_global_variables(root_rank: int):
    """Horovod's TF1 helper: broadcasts every global variable of the default graph from root rank
    and returns the op (run it in a tf.compat.v1 Session). Eagerly there is no such collection;
    use broadcast_variables(model.variables + optimizer.variables, root_rank)."""
    if tf.executing_eagerly():
        raise RuntimeError("broadcast_global_variables() needs graph mode (tf.compat.v1); in "
                           "eager mode use broadcast_variables(<model and optimizer variables>, "
                           "root_rank)")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank,
                               name="broadcast_global_variables")


def _geometry_op(fn, name: str) -> tf.Tensor:
    """An int32 scalar holding fn() (rank, size, ...), read when the op runs."""
    if tf.executing_eagerly():
        return tf.constant(fn(), tf.int32)
    out = tf.numpy_function(lambda: np.int32(fn()), [], tf.int32, stateful=True, name=name)
    out.set_shape([])
    return out


def rank_op(name: Optional[str] = None) -> tf.Tensor:
    """This process's rank as an int32 tensor (Horovod's ``rank_op``)."""
    return _geometry_op(rank, name or "dadt_rank")


def size_op(process_set_id: int = 0, name: Optional[str] = None) -> tf.Tensor:
    """The number of processes as an int32 tensor; with ``process_set_id`` (a ProcessSet's
    ``process_set_id``), the number of ranks of that set, or -3 when no set has that id
    (Horovod's HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET)."""
    process_set_id = int(process_set_id)
    if process_set_id == 0:
        return _geometry_op(size, name or "dadt_size")
    return _geometry_op(lambda: size_of_id(process_set_id), name or "dadt_size")


def process_set_included_op(process_set_id: int = 0, name: Optional[str] = None) -> tf.Tensor:
    """An int32 tensor: 1 when this process belongs to the process set ``process_set_id``, 0
    when it does not, -3 when no set has that id (Horovod's ``process_set_included_op``)."""
    process_set_id = int(process_set_id)
    return _geometry_op(lambda: included_in_id(process_set_id),
                        name or "dadt_process_set_included")


def local_rank_op(name: Optional[str] = None) -> tf.Tensor:
    """This process's rank on its host as an int32 tensor."""
    return _geometry_op(local_rank, name or "dadt_local_rank")


def local_size_op(name: Optional[str] = None) -> tf.Tensor:
    """The number of processes on this host as an int32 tensor."""
    return _geometry_op(local_size, name or "dadt_local_size")


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None,
                     process_set=global_process_set) -> Any:
    """Pickles ``obj`` on root rank and returns root rank's object on every process of
    ``process_set`` (eager)."""
    return array_ops.broadcast_object(obj, root_rank, name, process_set)


def broadcast_object_fn(root_rank: int = 0, session: Any = None, name: Optional[str] = None):
    """Horovod's TF1 helper: a function ``obj -> root rank's obj``. Horovod builds it from graph
    ops run in ``session``; dadt's object broadcast needs no graph, so ``session`` is unused and
    the function works in every mode. Each call is one broadcast_object (call it in the same
    order on every rank)."""
    del session

    def _bcast(obj: Any) -> Any:
        return array_ops.broadcast_object(obj, root_rank, name)
    return _bcast


def allgather_object(obj: Any, name: Optional[str] = None,
                     process_set=global_process_set) -> List[Any]:
    """Pickles ``obj`` on every process of ``process_set`` and returns their objects, in rank
    order (eager)."""
    return array_ops.allgather_object(obj, name, process_set)


def allreduce_gradients(grads, compression=Compression.none, op=Average,
                        gradient_predivide_factor: float = 1.0,
                        name: Optional[str] = None, sparse_as_dense: bool = False,
                        process_set=global_process_set) -> List[Any]:
    """Reduces a list of gradients (None entries pass through) as one grouped allreduce.
    Sparse gradients (tf.IndexedSlices) have their rows allgathered (see `allreduce`), or are
    made dense first with ``sparse_as_dense=True``. With ``op=Average`` and a
    ``gradient_predivide_factor`` f, dense gradients are divided by f before the sum and by
    size/f after (size: that of ``process_set``, whose ranks take part); sparse ones are
    averaged (their rows are not summed). A rank outside ``process_set`` keeps its gradients
    unchanged (Horovod's rule, dadt.common.process_sets.keeps_own_gradients)."""
    if op not in (Average, Sum, Adasum):
        raise ValueError("gradients are reduced with op=Average, op=Sum or op=Adasum, got "
                         "op=%r" % (op,))
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor needs op=Average")
    grads = [tf.convert_to_tensor(g) if sparse_as_dense and isinstance(g, tf.IndexedSlices) else g
             for g in grads]
    present = [i for i, g in enumerate(grads) if g is not None]
    if not present or keeps_own_gradients(process_set):
        return grads
    reducing = set_size(process_set)
    if reducing == 1 and op == Average and gradient_predivide_factor == 1.0:
        return grads
    # (members, op, prescale, postscale) of each grouped allreduce.
    groups = [(present, op, 1.0, 1.0)]
    if gradient_predivide_factor != 1.0:
        sparse = [i for i in present if isinstance(grads[i], tf.IndexedSlices)]
        dense = [i for i in present if not isinstance(grads[i], tf.IndexedSlices)]
        groups = [(dense, Sum, 1.0 / gradient_predivide_factor,
                   gradient_predivide_factor / reducing), (sparse, Average, 1.0, 1.0)]
    out = list(grads)
    for k, (members, reduce_op, prescale, postscale) in enumerate(groups):
        if not members:
            continue
        reduced = grouped_allreduce([grads[i] for i in members], compression=compression,
                                    op=reduce_op, prescale_factor=prescale,
                                    postscale_factor=postscale,
                                    name=name and (name if k == 0 else name + ".sparse"),
                                    process_set=process_set)
        for i, r in zip(members, reduced):
            out[i] = r
    return out


def reduce_keeping_local(grads: List[Any], local: List[bool], scale_local: bool, compression,
                         op, gradient_predivide_factor: float, sparse_as_dense: bool,
                         process_set) -> List[Any]:
    """`allreduce_gradients` of the gradients not marked ``local``; the local ones are kept,
    divided by the number of processes of the set when ``scale_local`` (Horovod's
    scale_local_gradients). What DistributedGradientTape and the tf.compat.v1
    DistributedOptimizer do with their gradients."""
    reduced = allreduce_gradients([None if is_local else g for g, is_local in zip(grads, local)],
                                  compression, op, gradient_predivide_factor,
                                  sparse_as_dense=sparse_as_dense, process_set=process_set)
    size = set_size(process_set)
    out = []
    for g, r, is_local in zip(grads, reduced, local):
        if not is_local:
            out.append(r)
        elif g is None or not scale_local:
            out.append(g)
        elif isinstance(g, tf.IndexedSlices):
            out.append(tf.IndexedSlices(g.values / size, g.indices, g.dense_shape))
        else:
            out.append(g / size)
    return out
