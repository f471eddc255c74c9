"""The training modes that send less: what local SGD, DiLoCo and EASGD share, once for every
front end (docs/training-modes.md, "Modes that send less").

Each rank trains on its own copy of the model with the wrapped optimizer (the *inner* steps) and,
every ``sync_every`` steps, exchanges the model (or a difference from it) with the other ranks.
The model is cut into ``fragments`` contiguous parts of about equal size; fragment f is exchanged
on a staggered schedule (below), so that with several fragments one exchange is on the wire at a
time instead of the whole model at once. An exchange has two halves:

    start(f):  compute what is sent from the local weights x_f, submit its collective;
    finish(f): wait for the collective and apply the mode's rule to x_f.

The halves are ``fragment_sync_delay`` inner steps apart (0: the same step), so the collective
overlaps that many inner steps. The rules (one per mode, dadt.common.local_sgd / diloco / easgd)
are written with Python's arithmetic operators on flat arrays, which NumPy arrays (the TensorFlow
and JAX front ends) and torch tensors (dadt.torch) share; what differs between frameworks (copies,
collectives, quantization) is behind ``ArrayOps``.

Schedule. ``s`` counts the inner steps after warm-up (1 after the first). With H = sync_every,
F = fragments and d = fragment_sync_delay, fragment f's exchange finishes at every step with
s % H == ((f + 1) * H // F) % H and starts d steps earlier. With F = 1 and d = 0 the whole model
is exchanged at s = H, 2H, ...
"""

from typing import Any, Callable, Dict, List, Optional, Sequence

# Compression of what the modes send: the names ``compression=`` takes (a front end also maps its
# Compression.fp16 / bf16 / int8 classes to them).
COMPRESSIONS = ("none", "fp16", "bf16", "int8")


class Int8Compressor:
    """Every front end's ``Compression.int8``: 8-bit quantization with a scale per exchanged
    fragment and error feedback, for what mode="diloco" and mode="local_sgd" send (Exchanger does it):
    int8 values cannot be summed in int8, so they travel through an allgather (a quarter of
    float32's bytes per rank) and are averaged after dequantization. A gradient allreduce refuses
    it."""

    wire = "int8"

    @staticmethod
    def compress(tensor):
        raise ValueError("Compression.int8 is for DistributedOptimizer(mode='diloco' or "
                         "mode='local_sgd'), whose exchanges go through an allgather; allreduce "
                         "cannot sum int8")

    @staticmethod
    def decompress(tensor, ctx):
        return tensor

# The modes that send less and the knobs each takes, in every front end (dadt.torch's local_sgd
# also takes `hierarchical`, which needs its per-host process sets).
MODE_KNOBS = {
    "local_sgd": ("sync_every", "warmup_steps", "fragments", "fragment_sync_delay"),
    "diloco": ("sync_every", "warmup_steps", "fragments", "fragment_sync_delay",
               "fragment_update_alpha", "outer_optimizer"),
    "easgd": ("sync_every", "warmup_steps", "moving_rate", "asynchronous"),
}
# What each mode may send compressed: diloco its pseudo-gradient, local_sgd the weights' difference
# from the last average; easgd averages the weights themselves.
MODE_COMPRESSIONS = {"local_sgd": COMPRESSIONS, "diloco": COMPRESSIONS, "easgd": ("none",)}

# The knobs of the modes that send less, with their defaults (None: the mode's own default).
KNOBS = {
    "sync_every": None,            # inner steps between exchanges of a fragment (required)
    "warmup_steps": 0,             # steps of sync mode (every gradient averaged) first
    "fragments": 1,                # parts of the model exchanged on a staggered schedule
    "fragment_sync_delay": 0,      # inner steps between an exchange's start and its finish
    "fragment_update_alpha": 0.0,  # diloco: weight of the local weights when the result lands
    "outer_optimizer": None,       # diloco: the update applied to the averaged pseudo-gradient
    "moving_rate": None,           # easgd: alpha (default 0.9 / ranks)
    "asynchronous": False,         # easgd: the centre's update overlaps the next period
    "hierarchical": False,         # local_sgd: gradients averaged within a host every step
}


class ArrayOps:
    """What the modes need of a framework, on flat one-dimensional arrays of one dtype.

    Role: the only framework-specific part of an exchange; a front end gives one instance to each
    engine. Threading: called on the training thread only.
    """

    def clone(self, x):
        """A new array equal to x."""
        raise NotImplementedError

    def assign(self, dst, src) -> None:
        """dst[:] = src, in place."""
        raise NotImplementedError

    def allreduce_average_async(self, x, name: str):
        """Starts averaging x over the ranks of the mode's process set; returns a handle."""
        raise NotImplementedError

    def allgather_async(self, x, name: str):
        """Starts gathering x (equal lengths) from every rank, in rank order; returns a handle."""
        raise NotImplementedError

    def wait(self, handle):
        """The result of a started collective (a new array)."""
        raise NotImplementedError

    def cast(self, x, compression: str):
        """x converted to what ``compression`` ("fp16" or "bf16") sends."""
        raise NotImplementedError

    def uncast(self, y, like):
        """y converted back to the dtype of ``like``."""
        raise NotImplementedError

    def quantize_int8(self, x):
        """(payload, dequantized): x as int8 with a scale of its own, packed into one int8 array
        (the scale's 4 bytes first), and what the receivers will read back from it."""
        raise NotImplementedError

    def dequantize_int8_mean(self, gathered, ranks: int, like):
        """The mean over ranks of the int8 payloads gathered one after the other."""
        raise NotImplementedError


def check_knobs(mode: str, given: Dict[str, Any], accepted: Sequence[str], ranks: int) -> Dict[str, Any]:
    """The knobs of ``mode`` with defaults filled in; ValueError naming the knob for one the mode
    does not take or a value out of range. ``given`` holds only the knobs the caller set."""
    for knob in given:
        if knob not in accepted:
            raise ValueError("%s is not an option of mode=%r (its options: %s)"
                             % (knob, mode, ", ".join(sorted(accepted)) or "none"))
    knobs = {k: given.get(k, KNOBS[k]) for k in accepted}
    every = knobs.get("sync_every")
    if every is None:
        raise ValueError("mode=%r needs sync_every=H, the inner steps between two exchanges "
                         "(DiLoCo's H, EASGD's tau)" % mode)
    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        raise ValueError("sync_every must be an int >= 1, got %r" % (every,))
    for knob in ("warmup_steps", "fragments", "fragment_sync_delay"):
        value = knobs.get(knob, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError("%s must be an int >= 0, got %r" % (knob, value))
    fragments = knobs.get("fragments", 1)
    if fragments < 1 or fragments > every:
        raise ValueError("fragments must be between 1 and sync_every (%d), got %d"
                         % (every, fragments))
    delay = knobs.get("fragment_sync_delay", 0)
    if delay and delay >= every // fragments:
        raise ValueError("fragment_sync_delay must be less than sync_every // fragments (%d), got "
                         "%d: a fragment's exchange must finish before the next one starts"
                         % (every // fragments, delay))
    alpha = knobs.get("fragment_update_alpha", 0.0)
    if not 0.0 <= float(alpha) <= 1.0:
        raise ValueError("fragment_update_alpha must be in [0, 1], got %r" % (alpha,))
    if "moving_rate" in knobs:
        if knobs["moving_rate"] is None:
            knobs["moving_rate"] = 0.9 / max(ranks, 1)
        rate = float(knobs["moving_rate"])
        if not 0.0 < rate <= 1.0:
            raise ValueError("moving_rate must be in (0, 1], got %r" % (knobs["moving_rate"],))
    return knobs


def check_compression(compression: str, mode: str) -> str:
    """``compression`` (a COMPRESSIONS name) if ``mode`` may send it; ValueError otherwise."""
    if compression not in COMPRESSIONS:
        raise ValueError("compression of mode=%r must be one of %s, got %r"
                         % (mode, ", ".join(COMPRESSIONS), compression))
    if compression not in MODE_COMPRESSIONS[mode]:
        raise ValueError("mode=%r averages the weights themselves, uncompressed; compression= is "
                         "for the gradients of sync/async/dear, the pseudo-gradient of "
                         "mode='diloco' and the weights' change of mode='local_sgd'" % mode)
    return compression


def schedule_for(mode: str, knobs: Dict[str, Any]) -> "Schedule":
    """The Schedule of ``mode`` with its checked knobs: asynchronous EASGD finishes round k at
    round k+1 (a delay of sync_every, one fragment); the others as their knobs say."""
    every = knobs["sync_every"]
    if mode == "easgd":
        return Schedule(every, 1, every if knobs.get("asynchronous") else 0)
    return Schedule(every, knobs.get("fragments", 1), knobs.get("fragment_sync_delay", 0))


def split_by_bytes(nbytes: Sequence[int], parts: int, mode: str) -> List[List[int]]:
    """The model's parameters (their byte sizes, in the model's order) cut into ``parts``
    contiguous runs of about equal bytes, none empty, as lists of indices: a run is closed once it
    brings the total to its share (f + 1) / parts, or when the runs left need every parameter
    left."""
    if parts > len(nbytes):
        raise ValueError("fragments=%d but the model has %d parameters: mode=%r cuts the model "
                         "between parameters" % (parts, len(nbytes), mode))
    total = sum(nbytes)
    out: List[List[int]] = []
    run: List[int] = []
    acc = 0
    for i, n in enumerate(nbytes):
        run.append(i)
        acc += n
        left, parts_left = len(nbytes) - i - 1, parts - len(out) - 1
        if parts_left > 0 and (acc >= total * (len(out) + 1) / parts or left == parts_left):
            out.append(run)
            run = []
    out.append(run)
    return out


class Schedule:
    """When each fragment's exchange starts and finishes (the module docstring's rule)."""

    def __init__(self, sync_every: int, fragments: int = 1, delay: int = 0):
        self.sync_every, self.fragments, self.delay = sync_every, fragments, delay
        self._offset = [((f + 1) * sync_every // fragments) % sync_every for f in range(fragments)]

    def finishes(self, s: int) -> List[int]:
        """Fragments whose exchange finishes at inner step s (s >= 1)."""
        return [f for f, o in enumerate(self._offset) if s >= 1 and s % self.sync_every == o]

    def starts(self, s: int) -> List[int]:
        """Fragments whose exchange starts at inner step s (s >= 1)."""
        return [f for f, o in enumerate(self._offset)
                if s >= 1 and (s + self.delay) % self.sync_every == o]


class Rule:
    """One mode's update, on one fragment's flat weights. Subclasses: LocalSGDRule, DiLoCoRule,
    EASGDRule. ``begin`` is called once, before the first inner step, with the weights every rank
    starts from, and keeps a copy of them in ``kept`` (the last synced weights, DiLoCo's theta,
    EASGD's centre: what a reset rolls back to and a checkpoint holds, under ``kept_name``);
    ``send`` at an exchange's start returns (what is averaged, the fragment's new local weights
    or None to keep them); ``land`` at its finish, with the average, returns the fragment's new
    local weights (or None). ``state``/``load_state`` are what a checkpoint keeps beyond the model
    and the wrapped optimizer."""

    kept_name = "kept"
    # Whether every rank holds the same weights of a fragment once its exchange has landed (then
    # flush() right after a landing has nothing to exchange).
    settled_by_land = False

    def __init__(self, ops: ArrayOps):
        self.ops = ops
        self.kept: Dict[int, Any] = {}   # fragment -> the weights the rule keeps

    def begin(self, f: int, x) -> None:
        self.kept[f] = self.ops.clone(x)

    def send(self, f: int, x):
        raise NotImplementedError

    def land(self, f: int, x, average):
        raise NotImplementedError

    def final(self, f: int, x, average):
        """The fragment's weights after flush()'s last exchange: by default ``land``'s."""
        return self.land(f, x, average)

    def reset(self, f: int, x):
        """The weights a rank rolls back to after an elastic reset (None: keep x)."""
        return self.kept.get(f)

    def state(self) -> Dict[str, Any]:
        return {self.kept_name: {f: self.ops.clone(x) for f, x in self.kept.items()}}

    def load_state(self, state: Dict[str, Any]) -> None:
        self.kept = {int(f): x for f, x in state.get(self.kept_name, {}).items()}


class Exchanger:
    """Runs a Rule over the fragments on the Schedule: the framework-neutral engine of a mode
    that sends less. A front end calls ``after_step(read, write)`` after each inner step past
    warm-up (read(f): fragment f's current flat weights; write(f, flat): sets them), ``flush`` at
    the end, and ``state``/``load_state`` for checkpoints.

    Lifetime: the optimizer's. Threading: the training thread only.
    """

    def __init__(self, rule: Rule, ops: ArrayOps, schedule: Schedule, name: str,
                 compression: str = "none", ranks: Callable[[], int] = lambda: 1):
        self.rule, self.ops, self.schedule, self.name = rule, ops, schedule, name
        self.compression = compression
        self._ranks = ranks           # how many ranks average (the process set's size)
        self.steps = 0                # inner steps after warm-up
        self.rounds = 0               # exchanges finished, every fragment counted
        self._in_flight: Dict[int, Any] = {}   # fragment -> (handle, kind)
        self._landed: Dict[int, Any] = {}      # fragment -> average received, not applied yet
        self._error: Dict[int, Any] = {}       # fragment -> error feedback of lossy compression
        self.bytes_sent = 0           # payload bytes this rank handed to collectives
        self._flushed_at = 0          # self.steps at the last flush
        self._begun = False           # rule.begin done (the first inner step has run)
        self._landed_at: Dict[int, int] = {}   # fragment -> self.steps when its exchange landed

    # -- the schedule ------------------------------------------------------------------------------
    def before_step(self, read: Callable[[int], Any]) -> None:
        """Called before each inner step: the first one gives the rule its starting weights."""
        if not self._begun:
            for f in range(self.schedule.fragments):
                self.rule.begin(f, read(f))
            self._begun = True

    def after_step(self, read: Callable[[int], Any], write: Callable[[int, Any], None]) -> None:
        self.steps += 1
        s = self.steps
        finishes, starts = self.schedule.finishes(s), self.schedule.starts(s)
        if self.schedule.delay == 0:
            for f in starts:
                self._start(f, read(f), write)
        for f in finishes:
            self._finish(f, read, write)
        if self.schedule.delay != 0:
            for f in starts:
                self._start(f, read(f), write)

    def flush(self, read, write) -> None:
        """Finishes every exchange in flight, then exchanges every fragment once more and lands
        it with the rule's ``final``: afterwards every rank holds the same weights, and no inner
        step is lost."""
        for f in sorted(self._in_flight) + sorted(set(self._landed) - set(self._in_flight)):
            self._finish(f, read, write)
        if self.steps == self._flushed_at or not self._begun:
            return  # nothing trained since the last flush: a second flush changes nothing
        self._flushed_at = self.steps
        # A fragment whose exchange landed at this very step, under a rule whose landing leaves
        # every rank on the weights it keeps, is in sync already: it takes those weights again
        # (bit for bit, whatever rounding the front end's write made) and is not exchanged
        # (another DiLoCo outer step would move it by the outer momentum alone).
        due = []
        for f in range(self.schedule.fragments):
            if self.rule.settled_by_land and self._landed_at.get(f) == self.steps:
                write(f, self.ops.clone(self.rule.kept[f]))
            else:
                due.append(f)
        for f in due:
            self._start(f, read(f), write)
        for f in due:
            x = read(f)
            new = self.rule.final(f, x, self._receive(f))
            if new is not None:
                write(f, new)
            self._landed_at[f] = self.steps
            self.rounds += 1

    # -- one exchange ------------------------------------------------------------------------------
    def _start(self, f: int, x, write) -> None:
        payload, new = self.rule.send(f, x)
        self._in_flight[f] = self._submit(f, payload)
        if new is not None:
            write(f, new)

    def _finish(self, f: int, read, write) -> None:
        if f not in self._in_flight and f not in self._landed:
            return  # asynchronous EASGD's first period: nothing was started yet
        x = read(f)
        average = self._receive(f)
        new = self.rule.land(f, x, average)
        if new is not None:
            write(f, new)
        self._landed_at[f] = self.steps
        self.rounds += 1

    def _submit(self, f: int, payload):
        name = "%s.f%d" % (self.name, f)
        ops, kind = self.ops, self.compression
        if self._ranks() <= 1:
            return ("local", payload)
        if kind == "none":
            self.bytes_sent += _nbytes(payload)
            return (ops.allreduce_average_async(payload, name), "none", payload)
        # Lossy: send payload + error, keep what the receivers will not see as the next error.
        sent = payload + self._error[f] if f in self._error else payload
        if kind == "int8":
            wire, seen = ops.quantize_int8(sent)
            handle = ops.allgather_async(wire, name)
        else:
            wire = ops.cast(sent, kind)
            seen = ops.uncast(wire, sent)
            handle = ops.allreduce_average_async(wire, name)
        self._error[f] = sent - seen
        self.bytes_sent += _nbytes(wire)
        return (handle, kind, payload)

    def _receive(self, f: int):
        """The average of fragment f's exchange (waits for it)."""
        if f in self._landed:
            return self._landed.pop(f)
        entry = self._in_flight.pop(f)
        if entry[0] == "local":
            return entry[1]
        handle, kind, payload = entry
        result = self.ops.wait(handle)
        if kind == "int8":
            return self.ops.dequantize_int8_mean(result, self._ranks(), payload)
        if kind in ("fp16", "bf16"):
            return self.ops.uncast(result, payload)
        return result

    # -- checkpoints and resets --------------------------------------------------------------------
    def state(self) -> Dict[str, Any]:
        """What resuming needs to equal never stopping: the step count, the rule's state, the error
        feedback and the averages of the exchanges in flight (waited for; applied at their
        finish step by the resumed run, as they would have been)."""
        for f in sorted(self._in_flight):
            self._landed[f] = self._receive(f)
        return {"steps": self.steps, "rounds": self.rounds, "flushed_at": self._flushed_at,
                "begun": self._begun, "landed_at": dict(self._landed_at),
                "rule": self.rule.state(),
                "error": {f: self.ops.clone(e) for f, e in self._error.items()},
                "landed": {f: self.ops.clone(a) for f, a in self._landed.items()}}

    def load_state(self, state: Optional[Dict[str, Any]]) -> None:
        self._in_flight.clear()
        if not state:
            return
        self.steps, self.rounds = int(state["steps"]), int(state["rounds"])
        self._flushed_at = int(state.get("flushed_at", 0))
        self._begun = bool(state.get("begun", False))
        self._landed_at = {int(f): int(s) for f, s in state.get("landed_at", {}).items()}
        self.rule.load_state(state["rule"])
        self._error = {int(f): e for f, e in state.get("error", {}).items()}
        self._landed = {int(f): a for f, a in state.get("landed", {}).items()}

    def reset(self, read, write) -> None:
        """After an elastic reset: drops what was in flight (its collectives belong to the old
        world) and rolls the weights back to the last exchanged ones, where the rule keeps them."""
        self._in_flight.clear()
        self._landed.clear()
        self._error.clear()
        for f in range(self.schedule.fragments):
            back = self.rule.reset(f, read(f))
            if back is not None:
                write(f, back)


def _nbytes(x) -> int:
    if hasattr(x, "nbytes"):
        return int(x.nbytes)
    return int(x.numel() * x.element_size())
