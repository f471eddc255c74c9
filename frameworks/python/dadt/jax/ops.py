"""Collectives on JAX arrays and pytrees of them, eagerly and under jax.jit.

Eagerly, each leaf's CPU buffer is read as a NumPy array (no copy) and handed to the runtime
through dadt.common.array_ops. Under ``jax.jit`` (or any tracing transformation that allows
side effects) the same code runs as one ordered ``jax.experimental.io_callback`` per call, so
every rank submits its collectives in program order; names (generated when None) are fixed at
trace time, identically on every rank. Under jit an allgather needs the same first dimension on
every rank (output shapes are static); eagerly it may differ.

A pytree argument becomes one grouped collective: allreduce reduces every leaf in one fused
collective (members ``'<name>.<i>'``, leaves in ``jax.tree_util`` order), and so on.
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from dadt.common import array_ops
from dadt.common.basics import _core, call
from dadt.common.process_sets import global_process_set, set_id, set_rank, set_size
from dadt.common.util import Average

__all__ = ["allreduce", "grouped_allreduce", "allgather", "broadcast", "alltoall",
           "reducescatter", "barrier", "join"]


def _traced(leaves: List[Any]) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in leaves)


try:  # jaxlib's device_put, under jax.device_put and jnp.asarray (private, so guarded)
    from jax._src.core import ShapedArray as _ShapedArray
    from jax._src.lib import xla_client as _xla_client
    _device_put = _xla_client.batched_device_put
except (ImportError, AttributeError):  # pragma: no cover - depends on the jax version
    _device_put = None

# (shape, dtype, x64) -> (aval, sharding, [device]) for _to_jax, or None: use jnp.asarray.
_put_specs: Dict[Tuple[Any, ...], Optional[Tuple[Any, Any, List[Any]]]] = {}


def _put_spec(array: np.ndarray, x64: bool):
    key = (array.shape, array.dtype, x64)
    try:
        return _put_specs[key]
    except KeyError:
        pass
    spec = None
    if jax.dtypes.canonicalize_dtype(array.dtype) == array.dtype:
        device = jax.local_devices()[0]
        spec = (_ShapedArray(array.shape, array.dtype),
                jax.sharding.SingleDeviceSharding(device), [device])
    if len(_put_specs) >= 1024:  # one entry per shape a program reduces; bounded all the same
        _put_specs.clear()
    _put_specs[key] = spec
    return spec


def _to_jax(array: np.ndarray) -> jax.Array:
    """The jax.Array that ``jnp.asarray(array)`` makes (on the default device, uncommitted, of a
    canonical dtype), made by jaxlib's device_put directly: jnp.asarray's Python dispatch costs
    more than a small collective. No copy when the buffer is 64-byte aligned (dadt's outputs
    are); nothing else holds the buffer. Falls back to jnp.asarray where a default device is set
    or a dtype needs canonicalizing (float64 without x64), or where jaxlib's entry point differs."""
    global _device_put
    spec = None
    if _device_put is not None and jax.config.jax_default_device is None:
        spec = _put_spec(array, jax.config.jax_enable_x64)
    if spec is None:
        return jnp.asarray(array)
    aval, sharding, devices = spec
    try:
        return _device_put(aval, sharding, [array], devices, False)
    except TypeError:  # pragma: no cover - a jaxlib whose device_put takes other arguments
        _device_put = None
        return jnp.asarray(array)


def _run(fn, leaves: List[Any], out_specs: Callable[[], List[jax.ShapeDtypeStruct]]) -> List[Any]:
    """Runs ``fn`` (NumPy arrays in, list of NumPy arrays out) on ``leaves``: directly for
    concrete arrays, as an ordered io_callback under a trace (with the result shapes that
    ``out_specs()`` gives, built only then)."""
    if _traced(leaves):
        return list(io_callback(lambda *arrays: list(fn(*arrays)), out_specs(), *leaves,
                                ordered=True))
    return [_to_jax(out) for out in fn(*[np.asarray(x) for x in leaves])]


def _spec(x: Any, rows: Optional[int] = None) -> jax.ShapeDtypeStruct:
    shape = tuple(x.shape)
    if rows is not None:
        shape = (rows,) + shape[1:]
    return jax.ShapeDtypeStruct(shape, x.dtype)


def _leaves(tree: Any):
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return [x if hasattr(x, "dtype") else jnp.asarray(x) for x in leaves], treedef


def _is_leaf(tree: Any) -> bool:
    if isinstance(tree, (jax.Array, np.ndarray)):  # the common case, without a tree walk
        return True
    return jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(tree))


def grouped_allreduce(tensors, name: Optional[str] = None, op: int = Average,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set=global_process_set) -> List[Any]:
    """Reduces a list of arrays as one fused collective (members ``'<name>.<i>'``) over the
    ranks of ``process_set`` (default: every rank)."""
    set_id(process_set)
    leaves = [x if hasattr(x, "dtype") else jnp.asarray(x) for x in tensors]
    if not leaves:
        raise ValueError("grouped allreduce needs at least one tensor")
    base = array_ops.make_name("grouped_allreduce", name, process_set)
    return _run(lambda *a: array_ops.grouped_allreduce(a, base, op, prescale_factor,
                                                       postscale_factor, process_set),
                leaves, lambda: [_spec(x) for x in leaves])


def allreduce(tree, name: Optional[str] = None, op: int = Average, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, process_set=global_process_set):
    """Reduces an array, or every leaf of a pytree, over all processes (or those of
    ``process_set``; op: Average by default, Sum, Min, Max or Product). Returns the same
    structure, reduced. Every rank must pass arrays of the same dtypes and shapes under the same
    name."""
    set_id(process_set)
    if _is_leaf(tree):
        x = tree if hasattr(tree, "dtype") else jnp.asarray(tree)
        name = array_ops.make_name("allreduce", name, process_set)
        out, = _run(lambda a: [array_ops.allreduce(a, name, op, prescale_factor,
                                                   postscale_factor, process_set)],
                    [x], lambda: [_spec(x)])
        return out
    leaves, treedef = _leaves(tree)
    if not leaves:
        return tree
    reduced = grouped_allreduce(leaves, name, op, prescale_factor, postscale_factor, process_set)
    return jax.tree_util.tree_unflatten(treedef, reduced)


def allgather(tree, name: Optional[str] = None, process_set=global_process_set):
    """Concatenates every process's array (or every leaf of a pytree) on the first dimension.
    Eagerly the first dimension may differ across ranks; under jit it must be the same."""
    leaves, treedef = _leaves(tree)
    base = array_ops.make_name("allgather", name, process_set)
    names = [base] if _is_leaf(tree) else ["%s.%d" % (base, i) for i in range(len(leaves))]

    def fn(*arrays):
        handles = [array_ops.allgather_async(a, n, process_set) for a, n in zip(arrays, names)]
        return [array_ops.synchronize(h) for h in handles]
    n = set_size(process_set)
    specs = [_spec(x, (x.shape[0] * n) if x.ndim else n) for x in leaves]
    return jax.tree_util.tree_unflatten(treedef, _run(fn, leaves, lambda: specs))


def broadcast(tree, root_rank: int, name: Optional[str] = None, process_set=global_process_set):
    """Returns root rank's array (or pytree of arrays) on every process (of ``process_set``;
    root_rank is a global rank, a member)."""
    set_id(process_set)
    leaves, treedef = _leaves(tree)
    base = array_ops.make_name("broadcast", name, process_set)
    names = [base] if _is_leaf(tree) else ["%s.%d" % (base, i) for i in range(len(leaves))]

    def fn(*arrays):
        handles = [array_ops.broadcast_async(a, root_rank, n, process_set)
                   for a, n in zip(arrays, names)]
        return [array_ops.synchronize(h) for h in handles]
    return jax.tree_util.tree_unflatten(treedef, _run(fn, leaves,
                                                      lambda: [_spec(x) for x in leaves]))


def alltoall(tensor, splits=None, name: Optional[str] = None, process_set=global_process_set):
    """Sends ``splits[i]`` rows to rank i (equal parts when None) and returns the rows received
    in rank order; with ``splits``, returns (output, received_splits). Eager only: the output's
    shape depends on the other ranks."""
    if _traced([tensor]):
        raise NotImplementedError("dadt.jax.alltoall runs eagerly only (its output shape depends "
                                  "on the other ranks); call it outside jax.jit")
    out, received = array_ops.alltoall(np.asarray(tensor), splits, name, process_set)
    out = _to_jax(out)
    return out if splits is None else (out, _to_jax(received))


def reducescatter(tensor, name: Optional[str] = None, op: int = Average,
                  prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                  process_set=global_process_set):
    """Reduces the array over all processes (or those of ``process_set``) and returns this
    rank's block of rows (lower ranks get one more row when the first dimension does not divide
    evenly)."""
    x = tensor if hasattr(tensor, "dtype") else jnp.asarray(tensor)
    name = array_ops.make_name("reducescatter", name, process_set)
    if _traced([x]):
        _, rows = call(_core.scatter_rows, x.shape[0], set_size(process_set),
                       set_rank(process_set))
        specs = [_spec(x, rows)]
    else:
        specs = []
    out, = _run(lambda a: [array_ops.reducescatter(a, name, op, prescale_factor,
                                                   postscale_factor, process_set)],
                [x], lambda: specs)
    return out


def barrier(process_set=global_process_set) -> None:
    """Returns once every process (of ``process_set``) has reached it."""
    array_ops.barrier(process_set)


def join() -> int:
    """Marks this rank as out of data and waits for every rank; returns the last to join."""
    return array_ops.join()
