"""The modes that send less (local_sgd, diloco, easgd) as an optax transformation: JAX's side of
dadt.common.periodic_numpy.PeriodicEngine (docs/frameworks.md, "Modes that send less").

``DistributedOptimizer(optax.adam(1e-3), mode="diloco", sync_every=H)`` returns a
GradientTransformation whose update, per step:

    1. warm-up steps: averages the gradients over the ranks (sync mode)
    2. runs the wrapped (inner) optimizer: inner updates u, x = params + u
    3. runs the exchanges the schedule says start or finish now on x; returns u for the
       parameters they left alone and (the mode's result - params) for those they changed

so ``optax.apply_updates(params, updates)`` lands on what the mode's rule gives (up to the
rounding of the subtraction and the addition). Between exchanges a step sends nothing. 1 and 3
are host calls on NumPy arrays: direct when the arrays are concrete, ordered
``jax.experimental.io_callback``s under ``jax.jit`` (as dadt.jax's collectives), which copy the
parameters to the host once per step. The mode's state (step count, theta and the outer
momentum, the centre, the error feedback) lives on the host, in the transformation, not in the
optax state: ``mode_state()`` / ``load_mode_state()`` checkpoint it. ``flush(params)`` at the end
returns parameters equal on every rank.
"""

from typing import Any, Dict, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from dadt.common.periodic_numpy import PeriodicEngine, check_mode, wire_name
from dadt.common.process_sets import set_size


class Compression:
    """What diloco's pseudo-gradient travels as (``compression=`` of DistributedOptimizer):
    ``none`` (default), ``fp16``, ``bf16``, or ``int8`` (a scale per fragment, through an
    allgather; with error feedback)."""
    none = "none"
    fp16 = "fp16"
    bf16 = "bf16"
    int8 = "int8"


class PeriodicState(NamedTuple):
    """The optax state of a mode that sends less: the inner optimizer's (the mode's own state is
    on the host: PeriodicTransformation.mode_state())."""
    inner: Any


def _traced(leaves) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in leaves)


class _Mode:
    """The host side of one transformation: the knobs, and the engine once init saw the params."""

    def __init__(self, mode, knobs, compression, process_set, name):
        self.mode, self.knobs, self.compression = mode, dict(knobs), compression
        self.process_set, self.name = process_set, name
        self.engine: Optional[PeriodicEngine] = None
        self.treedef = None

    def init(self, params) -> None:
        leaves, treedef = jax.tree_util.tree_flatten(params)
        if self.engine is not None and _traced(leaves):
            return  # jax.eval_shape(tx.init, ...) and the like: the engine stays
        self.treedef = treedef
        self.engine = PeriodicEngine(self.mode, [np.shape(x) for x in leaves],
                                     [jnp.result_type(x) for x in leaves], self.knobs,
                                     self.compression, self.process_set, self.name)

    def check(self, params):
        if self.engine is None:
            raise ValueError("call tx.init(params) before tx.update in mode=%r" % self.mode)
        if params is None:
            raise ValueError("mode=%r exchanges the parameters: call tx.update(grads, opt_state, "
                             "params)" % self.mode)
        leaves, treedef = jax.tree_util.tree_flatten(params)
        if treedef != self.treedef:
            raise ValueError("tx.update got parameters of another structure than tx.init: %s, "
                             "not %s" % (treedef, self.treedef))
        return leaves


def periodic_transformation(optimizer, mode: str, knobs: Dict[str, Any], compression=None,
                            process_set=None, name: Optional[str] = None):
    """The GradientTransformation of DistributedOptimizer(optimizer, mode=...) (module
    docstring); ``knobs`` are the keywords the caller set."""
    import optax

    compression = wire_name(compression)
    check_mode(mode, knobs, compression, max(set_size(process_set), 1))  # fail here, not at init
    host = _Mode(mode, knobs, compression, process_set, name)
    warmup = knobs.get("warmup_steps", 0) > 0

    def init_fn(params):
        host.init(params)
        return PeriodicState(inner=optimizer.init(params))

    def update_fn(updates, state, params=None):
        p_leaves = host.check(params)
        engine, treedef = host.engine, host.treedef
        g_leaves = treedef.flatten_up_to(updates)
        if warmup:
            g_leaves = _average(engine, g_leaves)
        inner, inner_state = optimizer.update(treedef.unflatten(g_leaves), state.inner, params)
        u_leaves = treedef.flatten_up_to(inner)
        out = _exchange(engine, p_leaves, u_leaves)
        return treedef.unflatten(out), PeriodicState(inner=inner_state)

    cls = _transformation_class(optax)
    tx = cls(init_fn, update_fn)
    tx._dadt_mode = host
    return tx


def _average(engine: PeriodicEngine, leaves):
    """Step 1: the gradients averaged during warm-up, as given afterwards."""
    present = [i for i, g in enumerate(leaves) if g is not None]
    if not present:
        return leaves
    grads = [leaves[i] for i in present]
    if _traced(grads):
        specs = [jax.ShapeDtypeStruct(np.shape(g), jnp.result_type(g)) for g in grads]

        def average(*arrays):
            return [np.asarray(a, dtype=s.dtype) for a, s in
                    zip(engine.average_gradients([np.asarray(a) for a in arrays]), specs)]
        out = io_callback(average, specs, *grads, ordered=True)
    elif engine.warming_up:
        out = [jnp.asarray(a) for a in engine.average_gradients([np.asarray(g) for g in grads])]
    else:
        out = grads
    leaves = list(leaves)
    for i, o in zip(present, out):
        leaves[i] = o
    return leaves


def _exchange(engine: PeriodicEngine, p_leaves, u_leaves):
    """Step 3: the updates that move params to the mode's weights."""
    n = len(p_leaves)

    def host(*arrays):
        before = [np.asarray(a) for a in arrays[:n]]
        inner = [np.asarray(a) for a in arrays[n:]]
        after = [(p + u).astype(p.dtype) for p, u in zip(before, inner)]  # optax.apply_updates
        changed = engine.step(after, before=before)
        return [(changed[i] - before[i]).astype(inner[i].dtype) if i in changed else inner[i]
                for i in range(n)], changed

    if _traced(list(p_leaves) + list(u_leaves)):
        specs = [jax.ShapeDtypeStruct(np.shape(u), jnp.result_type(u)) for u in u_leaves]
        return io_callback(lambda *a: host(*a)[0], specs, *p_leaves, *u_leaves, ordered=True)
    out, changed = host(*p_leaves, *u_leaves)
    return [jnp.asarray(out[i]) if i in changed else u for i, u in enumerate(u_leaves)]


_CLASS = None


def _transformation_class(optax):
    """PeriodicTransformation, made on first use (optax is imported only when asked for)."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS

    class PeriodicTransformation(optax.GradientTransformation):
        """An optax GradientTransformation of a mode that sends less, with what the mode adds:
        ``flush(params)``, ``mode_state()``, ``load_mode_state(state)`` and ``bytes_sent``."""

        def flush(self, params):
            """Finishes the exchanges in flight and exchanges the whole model once more: returns
            the parameters, the same on every rank, with no step lost. Call it eagerly (not under
            jax.jit) on every rank, at the end of training and before evaluating or saving."""
            host = self._dadt_mode
            if host.engine is None:
                return params
            leaves = host.check(params)
            if _traced(leaves):
                raise ValueError("flush() runs eagerly: call it outside jax.jit")
            changed = host.engine.flush([np.asarray(x) for x in leaves])
            out = [jnp.asarray(changed[i]) if i in changed else x for i, x in enumerate(leaves)]
            return host.treedef.unflatten(out)

        def mode_state(self):
            """The mode's host state (picklable; None before init): keep it with the optax state
            to resume a run as if it had not stopped."""
            engine = self._dadt_mode.engine
            return None if engine is None else engine.state()

        def load_mode_state(self, state):
            """Restores mode_state()'s result; call it after tx.init(params)."""
            host = self._dadt_mode
            if host.engine is None:
                raise ValueError("call tx.init(params) before load_mode_state")
            host.engine.load_state(state)

        @property
        def bytes_sent(self) -> int:
            """Bytes this rank has handed to the model exchanges (after compression)."""
            engine = self._dadt_mode.engine
            return 0 if engine is None else engine.bytes_sent

    _CLASS = PeriodicTransformation
    return _CLASS
