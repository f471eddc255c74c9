"""PowerSGD in mode="sync": the per-parameter state and the pipeline of its two allreduces.

PowerSGD (Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for
Distributed Optimization", NeurIPS 2019; torch's powerSGD_hook) sends each gradient G (n x m, its
first dimension by the rest) as two factors of rank r. Rank i of N, with its residual E_i and
the Q kept from the last step (or Q0 = randn(m, r) from a generator seeded alike on every rank):

    1. M_i = G_i + E_i                   (E_i = 0 without error feedback)
    2. P = (1/N) sum_i M_i Q             allreduce of n x r
    3. P <- orth(P)                      Gram-Schmidt, the same on every rank
    4. Q = (1/N) sum_i M_i^T P           allreduce of m x r; kept for the next step (warm start)
    5. the update's gradient is P Q^T (= P P^T avg_i M_i); E_i <- M_i - P Q^T

The sync engine starts step 2 from a parameter's gradient hook; step 4 needs that P's average.
The pipeline: every gradient hook (and every wait of step()) first starts the Q allreduce of
each layer whose P average has arrived, so a layer's Q is on the wire while the P's of the layers
that backward produced after it are still in flight; step() waits for the P's in the order they
were submitted and starts each Q the moment its P is there, before it waits for any Q. The runtime
fuses P's and Q's that are ready together (fusion buffer), so small layers still go in few
collectives. What it costs: the Q of the last gradient backward produces (the first layer) is
always exposed, after its P; and the QR-free orthogonalization is r^2 n flops per layer.

Trade-offs against torch's powerSGD_hook, which compresses a DDP bucket at a time (the bucket's
vectors, then all its P's, then all its Q's, each allreduce waiting for the one before): no layer
waits for the rest of its bucket, and the Q round of one layer overlaps the P round of the next,
instead of the two rounds running one after the other (pytorch/pytorch#74148). Per layer, more
collectives are negotiated.
"""

import zlib
from collections import deque
from typing import Dict, List, Optional

import torch

from dadt.common.util import Average, Sum
from dadt.torch import handles as _handles
from dadt.torch.async_collectives import allreduce_async_


class RuntimeComm:
    """The collectives PowerSGD uses: dadt's in-place allreduce, poll and synchronize. A test
    passes another object with these three methods to watch the order of the pipeline."""

    @staticmethod
    def allreduce_async_(tensor, name, process_set):
        return allreduce_async_(tensor, name=name, op=Average, process_set=process_set)

    @staticmethod
    def poll(handle) -> bool:
        return _handles.poll(handle)

    @staticmethod
    def synchronize(handle):
        return _handles.synchronize(handle)


def orthogonalize_(matrix: torch.Tensor) -> torch.Tensor:
    """Orthonormalizes the columns of `matrix` (n x r) in place, modified Gram-Schmidt; a column
    with nothing left of it (a zero gradient) stays zero instead of becoming NaN."""
    for i in range(matrix.shape[1]):
        col = matrix[:, i:i + 1]
        norm = torch.linalg.vector_norm(col)
        if norm > 0:
            col.div_(norm)
        else:
            col.zero_()
        if i + 1 < matrix.shape[1]:
            rest = matrix[:, i + 1:]
            rest.sub_(col * (col.t() @ rest))
    return matrix


def initial_q(seed: int, name: str, m: int, r: int, dtype, device) -> torch.Tensor:
    """Q0 of a parameter: randn(m, r) in `dtype` (the computation's: float64 for float64
    gradients, else float32) of a CPU generator seeded with seed * 2^32 + crc32(name), the same on
    every rank and independent of the order in which the gradients arrive."""
    gen = torch.Generator().manual_seed(q_seed(seed, name))
    return torch.randn(m, r, generator=gen, dtype=dtype).to(device)


def q_seed(seed: int, name: str) -> int:
    return (seed * 2 ** 32 + zlib.crc32(name.encode())) % 2 ** 63


class _Matrix:
    """What PowerSGD keeps of one parameter between steps."""

    def __init__(self, n, m, r, dtype):
        self.n, self.m, self.r, self.dtype = n, m, r, dtype
        self.q: Optional[torch.Tensor] = None       # Q of the last step (warm start)
        self.error: Optional[torch.Tensor] = None   # E_i, n x m (error feedback)
        self.generator: Optional[torch.Generator] = None  # new Q each step, without warm start


class _Reduction:
    """One parameter's PowerSGD reduction in flight: P's allreduce, then Q's."""

    def __init__(self, param, state, matrix, p, q, p_handle, grad):
        self.param, self.state, self.matrix = param, state, matrix
        self.p, self.q = p, q
        self.p_handle, self.q_handle = p_handle, None
        self.grad = grad  # where the result goes when it can (same dtype, contiguous)


class PowerSGDReducer:
    """The PowerSGD side of one SyncEngine: which gradients it compresses, their state, and the
    reductions in flight. Lifetime: the engine's; reset() forgets the state (an elastic reset, a
    loaded checkpoint). Threading: the engine's gradient hooks and step(), one at a time."""

    def __init__(self, settings, host, params: List[torch.Tensor], comm=RuntimeComm):
        self.settings = settings
        self._host = host
        self._comm = comm
        self._matrices: Dict[torch.Tensor, _Matrix] = {}
        for p in params:
            shape = settings.matrix(p.shape) if p.requires_grad else None
            if shape is None:
                continue
            if not p.dtype.is_floating_point:
                raise ValueError("Compression.powersgd compresses real floating-point gradients; "
                                 "parameter %r is %s" % (host.name_of(p), p.dtype))
            # fp16/bf16 gradients are multiplied and orthogonalized in float32.
            dtype = p.dtype if p.dtype in (torch.float32, torch.float64) else torch.float32
            self._matrices[p] = _Matrix(*shape, dtype)
        self._reductions: Dict[torch.Tensor, int] = {}   # parameter -> reductions so far
        self._waiting_p = deque()   # _Reduction whose P allreduce is in flight, in submission order

    def reset(self):
        """Forgets Q, the error feedback and the count of reductions (start_iter starts over).
        The reductions in flight, if any, are dropped."""
        for state in self._matrices.values():
            state.q = state.error = state.generator = None
        self._reductions.clear()
        self._waiting_p.clear()

    # -- the sync engine's calls ------------------------------------------------------------------
    def submit(self, p: torch.Tensor, grad: torch.Tensor):
        """Counts one reduction of `p` and, if PowerSGD compresses it this time, starts its P
        allreduce and returns the function that completes it (its averaged gradient, shaped as
        `grad`); None: `p` goes as a plain allreduce (a vector, too small a matrix, or one of the
        first start_iter reductions)."""
        count = self._reductions.get(p, 0)
        self._reductions[p] = count + 1
        state = self._matrices.get(p)
        if state is None or count < self.settings.start_iter:
            return None
        if not grad.dtype.is_floating_point:
            raise ValueError("Compression.powersgd compresses real floating-point gradients; the "
                             "gradient of %r is %s" % (self._host.name_of(p), grad.dtype))
        self.start_ready_qs()
        name = self._host.name_of(p)
        g = grad.detach().reshape(state.n, state.m).to(state.dtype)
        if self.settings.error_feedback:
            if state.error is None:
                state.error = g.clone()
            else:
                state.error.add_(g)
            matrix = state.error  # M = G + E, in E's buffer: it becomes the new E at the end
        else:
            matrix = g
        if state.q is None or not self.settings.warm_start:
            state.q = self._fresh_q(state, name, g.device)
        p_mat = matrix @ state.q
        handle = self._comm.allreduce_async_(p_mat, "powersgd.P." + name, self._host.process_set)
        red = _Reduction(p, state, matrix, p_mat, state.q, handle, grad)
        self._waiting_p.append(red)
        return lambda: self._finish(red)

    def start_ready_qs(self):
        """Starts the Q allreduce of the reductions whose P average has arrived (no wait), oldest
        first, up to the first one still in flight: the runtime completes the P's in the order
        they were submitted, so polling the later ones (at every hook) would cost time for
        nothing."""
        while self._waiting_p and self._comm.poll(self._waiting_p[0].p_handle):
            self._start_q(self._waiting_p.popleft())

    # -- the pipeline -----------------------------------------------------------------------------
    def _fresh_q(self, state, name, device):
        if not self.settings.warm_start:
            # A new Q every step, from the parameter's own generator (seeded alike everywhere).
            if state.generator is None:
                state.generator = torch.Generator().manual_seed(q_seed(self.settings.seed, name))
            return torch.randn(state.m, state.r, generator=state.generator,
                               dtype=state.dtype).to(device)
        return initial_q(self.settings.seed, name, state.m, state.r, state.dtype, device)

    def _start_q(self, red):
        """P's average is there (or being waited for): orthogonalize it, compute this rank's
        M^T P into Q's buffer and start Q's allreduce."""
        self._comm.synchronize(red.p_handle)
        orthogonalize_(red.p)
        torch.matmul(red.matrix.t(), red.p, out=red.q)
        red.q_handle = self._comm.allreduce_async_(
            red.q, "powersgd.Q." + self._host.name_of(red.param), self._host.process_set)

    def _finish(self, red):
        """Waits for `red`'s Q average and returns the averaged gradient. First starts every Q
        still waiting for its P, oldest first, each as soon as its P is in: those P's are ahead
        of this Q in the runtime's queue, so waiting for them costs nothing, and the Q's of the
        later layers get on the wire before this one is waited for."""
        self.start_ready_qs()
        while self._waiting_p:
            self._start_q(self._waiting_p.popleft())
        self._comm.synchronize(red.q_handle)
        state, grad = red.state, red.grad
        # P Q^T straight into the gradient's memory where it can go there: M is not read again
        # (Q is computed), and without error feedback M may be that memory itself.
        in_place = grad.dtype == state.dtype and grad.is_contiguous()
        approx = grad.view(state.n, state.m) if in_place else None
        approx = torch.matmul(red.p, red.q.t(), out=approx)
        if self.settings.error_feedback:
            red.matrix.sub_(approx)  # state.error: E <- M - P Q^T
        state.q = red.q if self.settings.warm_start else None
        op, prescale, postscale = self._host.reduction()
        scale = prescale * postscale * (self._host.reducing_ranks() if op == Sum else 1)
        if scale != 1.0:
            approx.mul_(scale)
        return approx.to(grad.dtype).view(grad.shape)
