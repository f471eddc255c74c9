"""The NumPy reference of the modes that send less, which tf/test_periodic_keras.py and
jax/test_periodic_jax.py compare dadt.keras and dadt.jax against (tf/test_periodic_numpy.py tests
dadt.common.periodic_numpy's own parts).

The reference simulates every rank of a job from the update rules as the docstrings of
dadt.common.local_sgd, diloco and easgd write them (and the schedule of dadt.common.periodic's
module docstring), with plain SGD as the inner optimizer; it shares no code with the engine.
"""
import numpy as np

F32 = np.float32
LR = 0.125  # the inner SGD's learning rate (exact in binary, as float32 and float64)


def gradient(rank, step, shapes, salt=0):
    """Rank `rank`'s gradient at step `step` (from 0): the data x of the loss <w, x>."""
    rng = np.random.default_rng([salt, rank, step])
    return [rng.normal(size=s).astype(F32) for s in shapes]


def start_weights(shapes, salt=0):
    rng = np.random.default_rng([salt, 999])
    return [rng.normal(size=s).astype(F32) for s in shapes]


def _quantize(x):
    """int8 with one float32 scale: what every rank reads back of x."""
    scale = max(F32(np.abs(x).max()) / F32(127.0), np.finfo(F32).tiny)
    scale = F32(scale)
    return np.clip(np.round(x / scale), -127, 127).astype(np.int8).astype(F32) * scale


class Reference:
    """Every rank's weights in a job of `n` ranks, step by step, from the equations.

    Each variable is its own fragment when fragments > 1 (the tests' variables are of equal size,
    which is how the engine then cuts them too)."""

    def __init__(self, mode, w0, n, sync_every, warmup_steps=0, fragments=1,
                 fragment_sync_delay=0, fragment_update_alpha=0.0, outer=(0.7, 0.9, True),
                 moving_rate=None, asynchronous=False, compression="none"):
        self.mode, self.n, self.H = mode, n, sync_every
        self.w = [[np.array(v, F32) for v in w0] for _ in range(n)]  # w[rank][variable]
        self.warmup = warmup_steps
        self.F = fragments
        self.groups = ([list(range(len(w0)))] if fragments == 1 else
                       [[f] for f in range(len(w0))])
        assert len(self.groups) == fragments
        self.d = fragment_sync_delay if mode in ("diloco", "local_sgd") else 0
        self.alpha = F32(fragment_update_alpha)
        self.outer_lr, self.mu, self.nesterov = outer
        self.rate = F32(0.9 / n if moving_rate is None else moving_rate)
        self.asynchronous = asynchronous
        self.compression = compression
        self.s = 0              # inner steps after warm-up
        self.t = 0              # steps
        self.begun = False
        self.theta, self.m, self.center, self.error = {}, {}, {}, {}
        self.in_flight = {}     # fragment -> average not applied yet
        self.started = {}       # local_sgd with a delay: fragment -> every rank's weights at start
        self.flushed_at = 0
        self.landed_at = {}     # fragment -> s when its exchange landed

    # -- helpers -----------------------------------------------------------------------------------
    def _get(self, r, f):
        return [self.w[r][v] for v in self.groups[f]]

    def _set(self, r, f, values):
        for v, x in zip(self.groups[f], values):
            self.w[r][v] = np.array(x, F32)

    def _mean(self, per_rank):
        return [np.mean(np.stack([p[k] for p in per_rank]), axis=0).astype(F32)
                for k in range(len(per_rank[0]))]

    def _wire_mean(self, f, payloads):
        """The average of the ranks' payloads as sent (compression, error feedback)."""
        if self.compression == "none" or self.n == 1:
            return self._mean(payloads)
        seen_all = []
        for r, payload in enumerate(payloads):
            sent = [p + self.error[(r, f, k)] if (r, f, k) in self.error else p
                    for k, p in enumerate(payload)]
            flat = np.concatenate([s.reshape(-1) for s in sent])
            if self.compression == "int8":
                seen_flat = _quantize(flat)
            else:
                import ml_dtypes
                dtype = np.float16 if self.compression == "fp16" else ml_dtypes.bfloat16
                seen_flat = flat.astype(dtype).astype(F32)
            seen, at = [], 0
            for k, s in enumerate(sent):
                seen.append(seen_flat[at:at + s.size].reshape(s.shape))
                self.error[(r, f, k)] = s - seen[-1]
                at += s.size
            seen_all.append(seen)
        return self._mean(seen_all)

    def _offset(self, f):
        return ((f + 1) * self.H // self.F) % self.H

    # -- the modes ---------------------------------------------------------------------------------
    def _begin(self):
        for f in range(len(self.groups)):
            x = self._get(0, f)  # every rank starts from the same weights
            self.theta[f] = [np.array(v) for v in x]
            self.center[f] = [np.array(v) for v in x]

    def _outer(self, f, delta):
        """torch.optim.SGD's form (dadt.common.diloco.NesterovOuter's docstring)."""
        lr, mu = F32(self.outer_lr), F32(self.mu)
        if mu:
            if f not in self.m:
                self.m[f] = [np.array(d) for d in delta]
            else:
                self.m[f] = [m * mu + d for m, d in zip(self.m[f], delta)]
            step = ([d + m * mu for d, m in zip(delta, self.m[f])] if self.nesterov
                    else self.m[f])
        else:
            step = delta
        self.theta[f] = [t - s * lr for t, s in zip(self.theta[f], step)]

    def _start(self, f):
        if self.mode == "local_sgd":  # compressed: the change since the last average travels
            xs = [self._get(r, f) for r in range(self.n)]
            if self.d:
                self.started[f] = xs
            self.in_flight[f] = (self._mean(xs) if self.compression == "none" else
                                 self._wire_mean(f, [[x - t for x, t in zip(xr, self.theta[f])]
                                                     for xr in xs]))
        elif self.mode == "diloco":
            payloads = [[t - x for t, x in zip(self.theta[f], self._get(r, f))]
                        for r in range(self.n)]
            self.in_flight[f] = self._wire_mean(f, payloads)
        else:  # easgd: send x, pull towards the centre
            payloads = [self._get(r, f) for r in range(self.n)]
            self.in_flight[f] = self._mean(payloads)
            for r in range(self.n):
                self._set(r, f, [x - (x - c) * self.rate
                                 for x, c in zip(payloads[r], self.center[f])])

    def _finish(self, f, final=False):
        if f not in self.in_flight:
            return
        average = self.in_flight.pop(f)
        self.landed_at[f] = self.s
        if self.mode == "local_sgd":  # with a delay: plus each rank's steps since the start
            if self.compression != "none":
                average = [t + a for t, a in zip(self.theta[f], average)]
            self.theta[f] = average
            begun = self.started.pop(f, None)
            for r in range(self.n):
                self._set(r, f, average if begun is None or final else
                          [a + (x - b) for a, x, b in zip(average, self._get(r, f), begun[r])])
        elif self.mode == "diloco":
            self._outer(f, average)
            a = F32(0.0) if final else self.alpha
            for r in range(self.n):
                self._set(r, f, [t if a == 0 else t * (F32(1) - a) + x * a
                                 for t, x in zip(self.theta[f], self._get(r, f))])
        elif final:  # easgd's flush: everybody and the centre take the average
            self.center[f] = average
            for r in range(self.n):
                self._set(r, f, average)
        else:
            beta = self.rate * F32(self.n)
            self.center[f] = [c + (a - c) * beta for c, a in zip(self.center[f], average)]

    def step(self, grads):
        """One step; grads[rank] is that rank's list of gradients."""
        self.t += 1
        if self.t <= self.warmup:
            g = self._mean(grads)
            for r in range(self.n):
                self.w[r] = [w - gv * F32(LR) for w, gv in zip(self.w[r], g)]
            return
        if not self.begun:
            self._begin()
            self.begun = True
        for r in range(self.n):
            self.w[r] = [w - gv * F32(LR) for w, gv in zip(self.w[r], grads[r])]
        self.s += 1
        if self.mode == "easgd":
            if self.s % self.H == 0:
                if self.asynchronous:
                    self._finish(0)
                    self._start(0)
                else:
                    self._start(0)
                    self._finish(0)
            return
        fs = range(len(self.groups))
        starts = [f for f in fs if (self.s + self.d) % self.H == self._offset(f)]
        finishes = [f for f in fs if self.s % self.H == self._offset(f)]
        if self.d == 0:
            for f in starts:
                self._start(f)
        for f in finishes:
            self._finish(f)
        if self.d != 0:
            for f in starts:
                self._start(f)

    def flush(self):
        for f in sorted(self.in_flight):
            self._finish(f)
        if self.s == self.flushed_at or not self.begun:
            return
        self.flushed_at = self.s
        # Local SGD without a delay, and DiLoCo with alpha 0, leave every rank on the same
        # weights when an exchange lands: a fragment that landed at this step is not exchanged
        # again.
        settled = ((self.mode == "local_sgd" and self.d == 0)
                   or (self.mode == "diloco" and self.alpha == 0))
        due = [f for f in range(len(self.groups))
               if not (settled and self.landed_at.get(f) == self.s)]
        for f in due:
            self._start(f)
        for f in due:
            self._finish(f, final=True)


# The cases both front ends run: (id, DistributedOptimizer keywords, steps).
CASES = [
    ("local_sgd", dict(mode="local_sgd", sync_every=3, warmup_steps=2), 8),
    ("local_sgd_fragments", dict(mode="local_sgd", sync_every=4, fragments=2), 9),
    ("local_sgd_streaming_int8", dict(mode="local_sgd", sync_every=4, fragments=2,
                                      fragment_sync_delay=1, compression="int8"), 11),
    ("diloco", dict(mode="diloco", sync_every=3, warmup_steps=1), 8),
    ("diloco_lands_last", dict(mode="diloco", sync_every=3), 6),
    ("diloco_streaming_int8", dict(mode="diloco", sync_every=4, fragments=2,
                                   fragment_sync_delay=1, fragment_update_alpha=0.5,
                                   outer_optimizer={"lr": 0.5, "momentum": 0.8,
                                                    "nesterov": False},
                                   compression="int8"), 11),
    ("diloco_fp16", dict(mode="diloco", sync_every=2, compression="fp16"), 5),
    ("easgd", dict(mode="easgd", sync_every=2), 7),
    ("easgd_async", dict(mode="easgd", sync_every=2, moving_rate=0.3, asynchronous=True), 9),
]
CASE_IDS = [c[0] for c in CASES]
SHAPES = [(3, 2), (6,)]  # two variables of equal bytes: fragments=2 puts one in each


def reference_for(kwargs, n, w0):
    kw = dict(kwargs)
    mode = kw.pop("mode")
    outer = kw.pop("outer_optimizer", None)
    ref = Reference(mode, w0, n, **kw)
    if outer is not None:
        ref.outer_lr, ref.mu, ref.nesterov = outer["lr"], outer["momentum"], outer["nesterov"]
    return ref


def tolerance(kwargs):
    # fp16: the runtime averages float16 values (its rounding is not the reference's).
    return dict(rtol=2e-2, atol=2e-2) if kwargs.get("compression") == "fp16" else \
        dict(rtol=1e-5, atol=1e-5)


def digits_split():
    """scikit-learn's digits as float32 in [0, 1], split as the examples split it:
    (x_train, x_test, y_train, y_test)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    digits = load_digits()
    x = (digits.data / 16.0).astype(F32)
    return train_test_split(x, digits.target, test_size=0.2, random_state=42,
                            stratify=digits.target)
