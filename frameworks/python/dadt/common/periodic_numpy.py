"""The modes that send less (local_sgd, diloco, easgd) on NumPy arrays: what dadt.keras and dadt.jax
share (docs/frameworks.md, "Modes that send less"; the rules and the schedule are
dadt.common.periodic's and dadt.common.local_sgd / diloco / easgd's, as in dadt.torch).

A front end hands the engine the model's variables as a list of NumPy arrays (in a fixed order: a
Keras optimizer's trainable variables, a JAX pytree's leaves) around each step of the wrapped
optimizer:

    step t < warmup_steps:   average_gradients(grads) before the step (sync mode), step() after
    step t >= warmup_steps:  the wrapped optimizer's step on local gradients, then
                             step(after, before) runs the exchanges the schedule says start or
                             finish now and returns the variables they changed

The model is cut into ``fragments`` contiguous runs of variables of about equal bytes (as
dadt.torch cuts its parameters); each fragment travels as one flat array of its first variable's
dtype. The engine keeps no framework object: TensorFlow's tf.py_function and JAX's io_callback
call it with NumPy arrays, and it runs eagerly alike.

Threading: one training thread at a time (a graph-mode step's callbacks run in program order).
"""

import pickle
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from dadt.common import array_ops, periodic
from dadt.common.periodic import split_by_bytes
from dadt.common.diloco import DiLoCoRule, NesterovOuter
from dadt.common.easgd import EASGDRule
from dadt.common.local_sgd import LocalSGDRule
from dadt.common.process_sets import set_size
from dadt.common.util import Average

MODE_KNOBS = periodic.MODE_KNOBS
MODES = tuple(MODE_KNOBS)
# The outer optimizer's hyperparameters a dict may set (dadt.common.diloco.NesterovOuter).
OUTER_KEYS = ("lr", "momentum", "nesterov")


def _bfloat16():
    import ml_dtypes  # comes with TensorFlow and JAX
    return np.dtype(ml_dtypes.bfloat16)


class NumpyOps(periodic.ArrayOps):
    """dadt.common.periodic.ArrayOps on flat NumPy arrays, averaged over ``process_set`` through
    dadt.common.array_ops (the collectives of dadt.tensorflow, dadt.keras and dadt.jax)."""

    def __init__(self, process_set=None):
        self._process_set = process_set

    def clone(self, x):
        return np.array(x, copy=True)

    def assign(self, dst, src):
        dst[...] = src

    def allreduce_average_async(self, x, name):
        return array_ops.allreduce_async(np.ascontiguousarray(x), name, Average,
                                         process_set=self._process_set)

    def allgather_async(self, x, name):
        return array_ops.allgather_async(np.ascontiguousarray(x), name, self._process_set)

    def wait(self, handle):
        return array_ops.synchronize(handle)

    def cast(self, x, compression):
        return x.astype(np.float16 if compression == "fp16" else _bfloat16())

    def uncast(self, y, like):
        return y.astype(like.dtype)

    def quantize_int8(self, x):
        # As dadt.torch's TorchOps: one float32 scale per fragment (the largest magnitude maps to
        # 127; symmetric, round half to even as torch.round), its 4 bytes first, then the values.
        x32 = np.asarray(x, dtype=np.float32)
        peak = np.float32(np.max(np.abs(x32))) if x32.size else np.float32(0.0)
        scale = np.maximum(peak / np.float32(127.0), np.finfo(np.float32).tiny).astype(np.float32)
        q = np.clip(np.round(x32 / scale), -127, 127).astype(np.int8)
        header = np.array([scale], dtype=np.float32).view(np.int8)
        return np.concatenate([header, q]), (q.astype(np.float32) * scale).astype(x.dtype)

    def dequantize_int8_mean(self, gathered, ranks, like):
        rows = np.asarray(gathered).reshape(ranks, -1)
        scales = np.ascontiguousarray(rows[:, :4]).view(np.float32)  # (ranks, 1)
        return (rows[:, 4:].astype(np.float32) * scales).mean(axis=0).astype(like.dtype)


def wire_name(compression: Any) -> str:
    """The dadt.common.periodic name of ``compression``: None, one of its names ("none", "fp16",
    "bf16", "int8"), or a compressor class with a ``wire`` attribute (dadt.tensorflow.Compression).
    """
    if compression is None:
        return "none"
    if isinstance(compression, str):
        return compression
    wire = getattr(compression, "wire", None)
    if isinstance(wire, str):
        return wire
    raise ValueError("compression must be None, one of %s or a dadt Compression member, got %r"
                     % (", ".join(repr(c) for c in periodic.COMPRESSIONS), compression))


def check_mode(mode: str, given: Dict[str, Any], compression: str, ranks: int) -> Dict[str, Any]:
    """The knobs of ``mode`` with defaults filled in (dadt.common.periodic.check_knobs), after the
    checks of the mode and of what it may send; ValueError naming the option otherwise."""
    if mode not in MODE_KNOBS:
        raise ValueError("mode must be 'sync' or one of the modes that send less (%s), got %r"
                         % (", ".join(repr(m) for m in MODES), mode))
    periodic.check_compression(compression, mode)
    knobs = periodic.check_knobs(mode, dict(given), MODE_KNOBS[mode], ranks)
    if mode == "diloco":
        _check_outer(knobs.get("outer_optimizer"))
    if mode == "easgd" and not isinstance(knobs.get("asynchronous", False), bool):
        raise ValueError("asynchronous must be True or False, got %r" % (knobs["asynchronous"],))
    return knobs


def _check_outer(outer: Any) -> None:
    if outer is None or isinstance(outer, NesterovOuter):
        return
    if isinstance(outer, dict):
        unknown = sorted(set(outer) - set(OUTER_KEYS))
        if unknown:
            raise ValueError("outer_optimizer as a dict takes %s, got %s"
                             % (", ".join(OUTER_KEYS), ", ".join(map(str, unknown))))
        NesterovOuter(None, **outer)  # its range checks
        return
    if not all(callable(getattr(outer, m, None)) for m in ("step", "state", "load_state")):
        raise ValueError("outer_optimizer must be a dict of %s (dadt.common.diloco.NesterovOuter's "
                         "hyperparameters), a NesterovOuter, or an object with step(f, theta, "
                         "delta), state() and load_state(state); got %s"
                         % (", ".join(OUTER_KEYS), type(outer).__name__))


def _make_outer(ops: NumpyOps, outer: Any):
    if outer is None:
        return NesterovOuter(ops)  # the paper's: lr 0.7, momentum 0.9, Nesterov
    if isinstance(outer, NesterovOuter):  # its hyperparameters, on these arrays
        return NesterovOuter(ops, outer.lr, outer.momentum, outer.nesterov)
    if isinstance(outer, dict):
        return NesterovOuter(ops, **outer)
    return outer


Values = Union[Sequence[np.ndarray], Callable[[], Sequence[np.ndarray]]]


class PeriodicEngine:
    """A mode that sends less over a fixed list of variables, as NumPy arrays (module docstring).

    Lifetime: the wrapping optimizer's (a Keras optimizer, a dadt.jax transformation); state()
    and load_state() are what a checkpoint keeps beyond the model and the wrapped optimizer.
    """

    def __init__(self, mode: str, shapes: Sequence[Sequence[int]], dtypes: Sequence[Any],
                 knobs: Dict[str, Any], compression: Any = None, process_set=None,
                 name: Optional[str] = None):
        self.mode = mode
        self._process_set = process_set
        self.compression = wire_name(compression)
        self.knobs = check_mode(mode, knobs, self.compression, self._ranks())
        self.shapes = [tuple(int(d) for d in s) for s in shapes]
        self.dtypes = [_bfloat16() if str(d) == "bfloat16" else np.dtype(d) for d in dtypes]
        if not self.shapes:
            raise ValueError("mode=%r needs at least one trainable variable" % mode)
        sizes = [int(np.prod(s)) for s in self.shapes]
        self._sizes = sizes
        self.fragments = split_by_bytes([n * d.itemsize for n, d in zip(sizes, self.dtypes)],
                                        self.knobs.get("fragments", 1), mode)
        self.ops = NumpyOps(process_set)
        # Not named after a variable as dadt.torch does: Keras's generated variable names follow
        # a per-process counter, which a rank that built one more model has moved on.
        self.name = name or "dadt." + mode
        self.warmup_left = self.knobs.get("warmup_steps", 0)
        self.exchanger = periodic.Exchanger(self._make_rule(), self.ops, periodic.schedule_for(self.mode, self.knobs),
                                            name=self.name, compression=self.compression,
                                            ranks=self._ranks)
        self._begun = False   # the rule has its starting weights (the first inner step ran)
        self._start: Optional[List[np.ndarray]] = None  # weights before it, when told early
        self._warmup_round = 0

    # -- what each mode defines --------------------------------------------------------------------
    def _make_rule(self) -> periodic.Rule:
        if self.mode == "local_sgd":
            return LocalSGDRule(self.ops, delay=self.knobs.get("fragment_sync_delay", 0),
                                compressed=self.compression != "none")
        if self.mode == "diloco":
            return DiLoCoRule(self.ops, _make_outer(self.ops, self.knobs.get("outer_optimizer")),
                              alpha=self.knobs.get("fragment_update_alpha", 0.0))
        return EASGDRule(self.ops, self.knobs["moving_rate"], self._ranks)

    def _ranks(self) -> int:
        return max(set_size(self._process_set), 1)

    # -- the step ----------------------------------------------------------------------------------
    @property
    def warming_up(self) -> bool:
        """The coming step is one of warmup_steps (sync mode: gradients averaged)."""
        return self.warmup_left > 0

    @property
    def needs_start(self) -> bool:
        """The coming step is the first inner step: step() needs the weights from before it."""
        return not self.warming_up and not self._begun and self._start is None

    def set_start(self, values: Sequence[Any]) -> None:
        """The weights before the first inner step, for a front end that can read them only then
        (TensorFlow graphs); step(after) without ``before`` uses them."""
        self._start = [np.asarray(v) for v in values]

    def average_gradients(self, grads: Sequence[Optional[Any]]) -> List[Optional[np.ndarray]]:
        """During warm-up: the gradients averaged over the ranks (one grouped allreduce; None
        stays None); afterwards: the gradients as given."""
        grads = list(grads)
        present = [i for i, g in enumerate(grads) if g is not None]
        if not self.warming_up or not present or self._ranks() <= 1:
            return grads
        name = "%s.warmup.%d" % (self.name, self._warmup_round)
        self._warmup_round += 1
        reduced = array_ops.grouped_allreduce([np.ascontiguousarray(grads[i]) for i in present],
                                              name, Average, process_set=self._process_set)
        out = list(grads)
        for i, r in zip(present, reduced):
            out[i] = r
        return out

    def step(self, after: Sequence[Any], before: Optional[Values] = None) -> Dict[int, np.ndarray]:
        """After a step of the wrapped optimizer: ``after`` are the variables now, ``before`` (a
        list or a function giving one) those before the step, read on the first inner step only.
        Returns {variable index: new value} for the variables the exchanges changed."""
        if self.warming_up:
            self.warmup_left -= 1
            return {}
        if not self._begun:
            start = self._start
            if start is None:
                if before is None:
                    raise RuntimeError("dadt: the first step of mode=%r needs the weights from "
                                       "before it (set_start or step(after, before))" % self.mode)
                start = [np.asarray(v) for v in (before() if callable(before) else before)]
            self.exchanger.before_step(lambda f: self._flat(start, f))
            self._begun, self._start = True, None
        current = [np.asarray(v) for v in after]
        changed: Dict[int, np.ndarray] = {}
        self.exchanger.after_step(lambda f: self._flat(current, f),
                                  lambda f, flat: self._unflat(f, flat, current, changed))
        return changed

    def flush(self, values: Sequence[Any]) -> Dict[int, np.ndarray]:
        """Finishes the exchanges in flight and exchanges the whole model once more
        (dadt.common.periodic.Exchanger.flush): every rank ends with the same weights. Returns
        the changed variables as step() does. A no-op before the first inner step."""
        if not self._begun:
            return {}
        current = [np.asarray(v) for v in values]
        changed: Dict[int, np.ndarray] = {}
        self.exchanger.flush(lambda f: self._flat(current, f),
                             lambda f, flat: self._unflat(f, flat, current, changed))
        return changed

    @property
    def bytes_sent(self) -> int:
        """Payload bytes this rank handed to the model exchanges (after compression)."""
        return self.exchanger.bytes_sent

    # -- checkpoints -------------------------------------------------------------------------------
    def state(self) -> Dict[str, Any]:
        """What resuming needs beyond the model and the wrapped optimizer (NumPy arrays and
        numbers; picklable): the warm-up left, the step count, the rule's state (the last synced
        weights, theta and the outer momentum, the centre), the error feedback, and the averages
        of the exchanges in flight (waited for)."""
        return {"mode": self.mode, "warmup_left": self.warmup_left, "begun": self._begun,
                "warmup_round": self._warmup_round, "exchanger": self.exchanger.state()}

    def load_state(self, state: Optional[Dict[str, Any]]) -> None:
        if not state:
            return
        if state.get("mode") != self.mode:
            raise ValueError("the checkpoint holds the state of mode=%r; this optimizer is mode=%r"
                             % (state.get("mode"), self.mode))
        self.warmup_left = int(state["warmup_left"])
        self._begun = bool(state["begun"])
        self._warmup_round = int(state.get("warmup_round", 0))
        self._start = None
        self.exchanger.load_state(state["exchanger"])

    def state_bytes(self) -> np.ndarray:
        """state() pickled into a uint8 array (for stores that keep arrays: Keras's)."""
        return np.frombuffer(pickle.dumps(self.state(), protocol=pickle.HIGHEST_PROTOCOL),
                             dtype=np.uint8).copy()

    def load_state_bytes(self, data: Any) -> None:
        self.load_state(pickle.loads(np.asarray(data, dtype=np.uint8).tobytes()))

    # -- fragments ---------------------------------------------------------------------------------
    def _flat(self, values: Sequence[np.ndarray], f: int) -> np.ndarray:
        members = self.fragments[f]
        dtype = self.dtypes[members[0]]
        return np.concatenate([np.asarray(values[i], dtype=dtype).reshape(-1) for i in members])

    def _unflat(self, f: int, flat: np.ndarray, current: List[np.ndarray],
                changed: Dict[int, np.ndarray]) -> None:
        at = 0
        for i in self.fragments[f]:
            n = self._sizes[i]
            value = np.array(flat[at:at + n], dtype=self.dtypes[i]).reshape(self.shapes[i])
            current[i] = changed[i] = value  # a copy: the rule may keep `flat` and change it
            at += n
