"""Training helpers for JAX: an optax transformation that averages gradients across processes,
and broadcasts of parameter pytrees and Python objects."""

from typing import Any, List, NamedTuple, Optional

from dadt.common import array_ops
from dadt.common.process_sets import global_process_set
from dadt.common.util import Average, Sum
from dadt.jax.ops import allreduce, broadcast

__all__ = ["average_gradients", "DistributedOptimizer", "broadcast_parameters",
           "broadcast_object", "allgather_object"]


class AverageGradientsState(NamedTuple):
    """average_gradients keeps no state."""


def average_gradients(op: int = Average, name: Optional[str] = None,
                      process_set=global_process_set):
    """An optax GradientTransformation that reduces the updates (gradients) across processes
    with one grouped allreduce per step (op: Average by default, or Sum). Put it first in a
    chain:

    .. code-block:: python

        tx = optax.chain(dadt.average_gradients(), optax.adam(1e-3))

    Works eagerly and under jax.jit (an ordered host callback; the step's name is fixed at trace
    time). ``name`` is the base name of the collectives (generated when None); ``process_set``
    the ranks that average (default: every rank).
    """
    import optax  # only when asked for: dadt.jax itself does not need optax
    if op not in (Average, Sum):
        raise ValueError("gradients are reduced with op=Average or op=Sum, got op=%r" % (op,))

    def init_fn(params):
        del params
        return AverageGradientsState()

    def update_fn(updates, state, params=None):
        del params
        return allreduce(updates, name=name, op=op, process_set=process_set), state

    return optax.GradientTransformation(init_fn, update_fn)


def DistributedOptimizer(optimizer, op: int = Average, name: Optional[str] = None,  # noqa: N802
                         process_set=global_process_set):
    """Wraps an optax optimizer so that it sees gradients averaged across processes (of
    ``process_set``): ``optax.chain(average_gradients(op, name, process_set), optimizer)``."""
    import optax
    return optax.chain(average_gradients(op, name, process_set), optimizer)


def broadcast_parameters(params: Any, root_rank: int = 0, name: Optional[str] = None,
                         process_set=global_process_set) -> Any:
    """Returns root rank's pytree of parameters (any pytree of arrays: a flax ``params`` dict,
    an equinox model's arrays, optax state) on every process. JAX arrays are immutable, so use
    the result: ``params = dadt.broadcast_parameters(params)``."""
    return broadcast(params, root_rank, name=array_ops.make_name("broadcast_parameters", name, process_set),
                     process_set=process_set)


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None,
                     process_set=global_process_set) -> Any:
    """Pickles ``obj`` on root rank and returns root rank's object on every process (of
    ``process_set``)."""
    return array_ops.broadcast_object(obj, root_rank, name, process_set)


def allgather_object(obj: Any, name: Optional[str] = None,
                     process_set=global_process_set) -> List[Any]:
    """Pickles ``obj`` on every process (of ``process_set``) and returns their objects, in rank
    order."""
    return array_ops.allgather_object(obj, name, process_set)
