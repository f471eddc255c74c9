"""Training helpers for JAX: an optax transformation that averages gradients across processes,
and broadcasts of parameter pytrees and Python objects."""

from typing import Any, List, NamedTuple, Optional

from dadt.common import array_ops
from dadt.common.process_sets import global_process_set, keeps_own_gradients
from dadt.common.util import Adasum, Average, Sum
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
    the ranks that average (default: every rank); a rank outside it keeps its own gradients, as
    in Horovod and dadt's other front ends.
    """
    import optax  # only when asked for: dadt.jax itself does not need optax
    if op not in (Average, Sum, Adasum):
        raise ValueError("gradients are reduced with op=Average, op=Sum or op=Adasum, got "
                         "op=%r" % (op,))

    def init_fn(params):
        del params
        return AverageGradientsState()

    def update_fn(updates, state, params=None):
        del params
        if keeps_own_gradients(process_set):  # this rank is not in the set: it takes no part
            return updates, state
        return allreduce(updates, name=name, op=op, process_set=process_set), state

    return optax.GradientTransformation(init_fn, update_fn)


def DistributedOptimizer(optimizer, op: int = Average, name: Optional[str] = None,  # noqa: N802
                         process_set=global_process_set, *, mode: str = "sync",
                         compression=None, sync_every: Optional[int] = None,
                         warmup_steps: Optional[int] = None, fragments: Optional[int] = None,
                         fragment_sync_delay: Optional[int] = None,
                         fragment_update_alpha: Optional[float] = None, outer_optimizer=None,
                         moving_rate: Optional[float] = None,
                         asynchronous: Optional[bool] = None):
    """Wraps an optax optimizer so that it sees gradients averaged across processes (of
    ``process_set``): ``optax.chain(average_gradients(op, name, process_set), optimizer)``.

    mode: "sync" (default: the above), or one of the modes that send less, where each rank
    steps on its own gradients and the parameters are exchanged every ``sync_every`` steps
    (docs/frameworks.md, "Modes that send less"; dadt.jax.periodic): "local_sgd" averages the
    parameters, "diloco" applies the averaged pseudo-gradient with an outer Nesterov SGD,
    "easgd" pulls towards a centre variable. The result is then a PeriodicTransformation: an
    optax GradientTransformation whose ``update`` needs ``params``, with ``flush(params)``
    (call it at the end: every rank gets the same parameters), ``mode_state()`` /
    ``load_mode_state()`` (checkpoints) and ``bytes_sent``. Eager and under jax.jit (ordered host
    callbacks). The knobs are dadt.torch's: sync_every (required), warmup_steps (0), fragments
    (1; local_sgd, diloco), fragment_sync_delay (0), fragment_update_alpha (0.0), outer_optimizer
    (a dict of lr, momentum, nesterov or a dadt.common.diloco.NesterovOuter; default 0.7, 0.9,
    True), compression (diloco, local_sgd: Compression.none, fp16, bf16 or int8), moving_rate (easgd; 0.9 /
    ranks), asynchronous (easgd). ``name`` is the base name of the exchanges (default
    "dadt.<mode>"); ``op`` must be Average."""
    import optax
    knobs = {k: v for k, v in dict(
        sync_every=sync_every, warmup_steps=warmup_steps, fragments=fragments,
        fragment_sync_delay=fragment_sync_delay, fragment_update_alpha=fragment_update_alpha,
        outer_optimizer=outer_optimizer, moving_rate=moving_rate,
        asynchronous=asynchronous).items() if v is not None}
    if mode == "sync":
        if knobs:
            raise ValueError("%s: option(s) of the modes that send less (local_sgd, diloco, "
                             "easgd), not of mode='sync'" % ", ".join(sorted(knobs)))
        if compression not in (None, "none"):
            raise ValueError("compression= is for mode='diloco' in dadt.jax")
        return optax.chain(average_gradients(op, name, process_set), optimizer)
    if op != Average:
        raise ValueError("mode=%r averages the model; op=Average only" % mode)
    from dadt.jax.periodic import periodic_transformation
    return periodic_transformation(optimizer, mode, knobs, compression, process_set, name)


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
