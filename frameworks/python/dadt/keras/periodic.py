"""The modes that send less (local_sgd, diloco, easgd) in dadt.keras.DistributedOptimizer: Keras's
side of dadt.common.periodic_numpy.PeriodicEngine (docs/frameworks.md, "Modes that send less").

Each step of the wrapped optimizer (its ``apply``) becomes:

    1. warm-up steps: the gradients averaged over the ranks (sync mode); the first inner step:
       the weights before it, which the rule starts from (theta, the centre, the synced weights)
    2. the wrapped optimizer's own update, on local gradients after warm-up
    3. the exchanges the schedule says start or finish now; the variables they change are
       assigned

How 1 and 3 run depends on the backend and on whether the step is compiled:

    eager (run_eagerly=True, or the torch backend)   direct calls, NumPy arrays in and out
    tensorflow, tf.function (model.fit's default)    tf.py_function: 1 reads the variables, 3
                                                     reads them after the update (data
                                                     dependencies order both) and assigns eagerly
    jax, jax.jit (model.fit's default)               ordered io_callbacks: 3 gets the weights
                                                     before and after the update and returns the
                                                     new ones, which are assigned in the
                                                     stateless scope

Between exchanges a step sends nothing; the compiled forms copy the weights to NumPy once per
step (and back on the jax backend), which on the CPU costs far less than the step.
"""

from typing import Any, Dict, List, Optional

import keras
import numpy as np

from dadt.common.periodic_numpy import PeriodicEngine

# The entry of the optimizer's saved variables that holds the mode's state (a pickled uint8 array).
STATE_KEY = "dadt_periodic"

# The last error raised inside a compiled step's callback: tf.py_function and jax's io_callback
# re-raise it as their own error class (UnknownError, XlaRuntimeError), which no longer says that
# a peer died; dadt.keras.elastic reads it here to tell a peer's death from a bug.
_callback_failure: List[BaseException] = []


def _recorded(fn):
    """``fn`` for a compiled step's callback: an exception it raises is kept for
    ``take_callback_failure`` before the framework wraps it."""

    def call(*args):
        try:
            return fn(*args)
        except BaseException as e:
            _callback_failure[:] = [e]
            raise
    return call


def take_callback_failure() -> Optional[BaseException]:
    """The exception of the last failed step callback (None if there was none since the last
    call), forgotten once read."""
    failure = _callback_failure[0] if _callback_failure else None
    _callback_failure.clear()
    return failure


def _backend() -> str:
    return keras.backend.backend()


def _read(variable) -> np.ndarray:
    """A Keras variable's value as a NumPy array (its stateless-scope value under the jax
    backend)."""
    return np.asarray(keras.ops.convert_to_numpy(keras.ops.stop_gradient(variable.value)))


def _dense(grad):
    """A gradient as a dense backend tensor (tf.IndexedSlices made dense)."""
    if _backend() == "tensorflow":
        import tensorflow as tf
        if isinstance(grad, tf.IndexedSlices):
            return tf.convert_to_tensor(grad)
    return grad


def _traced(values) -> bool:
    backend = _backend()
    if backend == "tensorflow":
        import tensorflow as tf
        return not tf.executing_eagerly()
    if backend == "jax":
        import jax
        return any(isinstance(v, jax.core.Tracer) for v in values)
    return False


class KerasPeriodic:
    """The mode of one wrapped Keras optimizer: its knobs, and its engine once the variables are
    known (at the first step)."""

    def __init__(self, mode: str, knobs: Dict[str, Any], compression: Any, process_set,
                 name: Optional[str]):
        self.mode, self.knobs, self.compression = mode, dict(knobs), compression
        self.process_set, self.name = process_set, name
        self.engine: Optional[PeriodicEngine] = None
        self._variables: List[Any] = []
        self._pending_state: Optional[np.ndarray] = None  # loaded before the engine existed

    def ensure_engine(self, variables) -> PeriodicEngine:
        variables = list(variables)
        if self.engine is None:
            self._variables = variables
            self.engine = PeriodicEngine(
                self.mode, [tuple(v.shape) for v in variables],
                [keras.backend.standardize_dtype(v.dtype) for v in variables], self.knobs,
                self.compression, self.process_set, self.name)
            if self._pending_state is not None:
                self.engine.load_state_bytes(self._pending_state)
                self._pending_state = None
        elif len(variables) != len(self._variables) or any(
                a is not b for a, b in zip(variables, self._variables)):
            raise ValueError("DistributedOptimizer(mode=%r) exchanges the %d trainable variables "
                             "it was first applied to; apply() got a different list of %d"
                             % (self.mode, len(self._variables), len(variables)))
        return self.engine

    # -- one step ----------------------------------------------------------------------------------
    def apply(self, optimizer, base_apply, grads, trainable_variables):
        """optimizer.apply(grads, trainable_variables) in a mode that sends less."""
        grads = list(grads)
        if not grads:
            return base_apply(grads, trainable_variables)
        if trainable_variables is not None:
            trainable_variables = list(trainable_variables)
            if not optimizer.built:
                with keras.name_scope(optimizer.name, caller=optimizer):
                    optimizer.build(trainable_variables)
                optimizer.built = True
        variables = list(optimizer._trainable_variables)
        engine = self.ensure_engine(variables)
        if not _traced(grads + [v.value for v in variables]):
            grads = self._eager_before(engine, grads, variables)
            base_apply(grads, trainable_variables)
            for i, value in engine.step([_read(v) for v in variables]).items():
                variables[i].assign(value)
            return None
        if _backend() == "tensorflow":
            return self._tf_apply(engine, base_apply, grads, trainable_variables, variables)
        if _backend() == "jax":
            return self._jax_apply(engine, base_apply, grads, trainable_variables, variables)
        raise NotImplementedError("DistributedOptimizer(mode=%r) runs compiled steps on the "
                                  "tensorflow and jax backends of Keras; on %r, run eagerly"
                                  % (self.mode, _backend()))

    def _eager_before(self, engine, grads, variables):
        if engine.needs_start:
            engine.set_start([_read(v) for v in variables])
        if not engine.warming_up:
            return grads
        present = [i for i, g in enumerate(grads) if g is not None]
        arrays = [np.asarray(keras.ops.convert_to_numpy(_dense(grads[i]))) for i in present]
        averaged = engine.average_gradients(arrays)
        out = list(grads)
        for i, a in zip(present, averaged):
            out[i] = keras.ops.convert_to_tensor(a, dtype=keras.backend.standardize_dtype(
                grads[i].dtype))
        return out

    def _tf_apply(self, engine, base_apply, grads, trainable_variables, variables):
        import tensorflow as tf

        def before(*tensors):
            if engine.needs_start:
                engine.set_start([_read(v) for v in variables])
            if not tensors:
                return tf.constant(True)
            return [tf.convert_to_tensor(a) for a in
                    engine.average_gradients([t.numpy() for t in tensors])]

        present = [i for i, g in enumerate(grads) if g is not None]
        grads = list(grads)
        if engine.knobs.get("warmup_steps", 0) > 0 and present:
            dense = [tf.convert_to_tensor(_dense(grads[i])) for i in present]
            out = tf.py_function(_recorded(before), dense, Tout=[g.dtype for g in dense])
            for i, g, o in zip(present, dense, out):
                o.set_shape(g.shape)
                grads[i] = o
        else:
            # The update reads the gradients, so it runs after `before` reads the weights.
            token = tf.py_function(_recorded(before), [], Tout=tf.bool)
            with tf.control_dependencies([token]):
                grads = [None if g is None else tf.identity(g) for g in grads]
        base_apply(grads, trainable_variables)

        def after(*tensors):
            for i, value in engine.step([t.numpy() for t in tensors]).items():
                variables[i].assign(value)
            return tf.constant(True)

        # The reads follow the update's writes of the same variables (automatic control
        # dependencies); the py_function follows the reads.
        reads = [tf.convert_to_tensor(v.value) for v in variables]
        tf.py_function(_recorded(after), reads, Tout=tf.bool)
        return None

    def _jax_apply(self, engine, base_apply, grads, trainable_variables, variables):
        import jax
        from jax.experimental import io_callback

        before_values = [v.value for v in variables]
        present = [i for i, g in enumerate(grads) if g is not None]
        grads = list(grads)
        if engine.knobs.get("warmup_steps", 0) > 0 and present:
            specs = [jax.ShapeDtypeStruct(grads[i].shape, grads[i].dtype) for i in present]

            def average(*arrays):
                return [np.asarray(a, dtype=s.dtype) for a, s in
                        zip(engine.average_gradients([np.asarray(a) for a in arrays]), specs)]
            out = io_callback(_recorded(average), specs, *[grads[i] for i in present],
                              ordered=True)
            for i, o in zip(present, out):
                grads[i] = o
        base_apply(grads, trainable_variables)
        after_values = [v.value for v in variables]
        specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in after_values]
        n = len(variables)

        def exchange(*arrays):
            after = [np.asarray(a) for a in arrays[n:]]
            changed = engine.step(after, before=lambda: arrays[:n])
            return [np.asarray(changed.get(i, after[i]), dtype=s.dtype)
                    for i, s in enumerate(specs)]
        new = io_callback(_recorded(exchange), specs, *before_values, *after_values, ordered=True)
        for v, value in zip(variables, new):
            v.assign(value)
        return None

    # -- outside the step --------------------------------------------------------------------------
    def flush(self) -> None:
        if self.engine is None:
            return
        if _traced([v.value for v in self._variables]):
            raise ValueError("flush() runs eagerly: call it outside tf.function / jax.jit (after "
                             "model.fit, or through callbacks.FlushCallback)")
        changed = self.engine.flush([_read(v) for v in self._variables])
        for i, value in changed.items():
            self._variables[i].assign(value)

    def state(self) -> Optional[Dict[str, Any]]:
        return None if self.engine is None else self.engine.state()

    def load_state(self, state: Optional[Dict[str, Any]]) -> None:
        if self.engine is not None:
            self.engine.load_state(state)
        elif state:
            import pickle
            self._pending_state = np.frombuffer(pickle.dumps(state), np.uint8).copy()

    def restart(self, state: Optional[Dict[str, Any]]) -> None:
        """Back to ``state`` (a ``state()``; None: before the first step), dropping the exchanges
        in flight: an elastic restore, whose collectives belonged to the old world."""
        if state is None:
            self.engine, self._variables, self._pending_state = None, [], None
        else:
            self.load_state(state)

    def state_bytes(self) -> Optional[np.ndarray]:
        return None if self.engine is None else self.engine.state_bytes()

    def load_state_bytes(self, data) -> None:
        if self.engine is not None:
            self.engine.load_state_bytes(data)
        else:
            self._pending_state = np.asarray(data, dtype=np.uint8).copy()


class WithoutKey:
    """A Keras variable store (``keys()``, ``[]``) without one key: what the wrapped optimizer's
    own load_own_variables sees, so that it counts only its variables."""

    def __init__(self, store, key: str):
        self._store, self._key = store, key

    def keys(self):
        return [k for k in self._store.keys() if k != self._key]

    def __getitem__(self, key):
        return self._store[key]

    def __contains__(self, key):
        return key != self._key and key in self._store.keys()

    def __len__(self):
        return len(self.keys())
