"""The "async" and "dear" training modes of DistributedOptimizer (docs/training-modes.md).

Both modes take each gradient as soon as autograd has accumulated it. A parameter of
``bucket_bytes`` or more is a bucket of its own, whose collectives work on the gradient tensor
itself (no copy; the tensor is lent to the engine until its update is applied, and a change to it
meanwhile is refused). The smaller parameters between them form runs in layer order (the model's
parameter order), each closed once it holds ``bucket_bytes``, and their gradients are copied into
the run's flat buffer. A bucket is one collective, so the runtime's own fusion has little left to
do. Ordering ("priority") is decided here, in the issue order: the runtime executes collectives in
the order in which every rank has submitted them, so the earliest-submitted bucket goes first.

async (DADT, Pipe-SGD): step t submits the allreduce of step t's gradients and applies the average
    of step t-1's, which was reduced while step t's forward and backward ran. Step t waits for
    step t-1's average, so the staleness is exactly one step. Step 0 applies nothing (the wrapped
    optimizer is not called, so its state does not move); ``synchronize()`` applies the pending
    average, so no gradient is ever lost.

dear (DeAR): a bucket's reduce-scatter starts the moment its last gradient arrives in backward.
    step() only schedules the update. A forward pre-hook on every module that owns parameters
    waits for the reduce-scatters in layer order, issues the all-gathers of the averaged shards in
    layer order, and applies the wrapped optimizer to a bucket's parameters just before the
    module runs. Every rank applies the same update to the same full averaged gradient, so the
    weights equal sync mode's up to floating-point reordering, for any torch optimizer.
"""

import os
from typing import Dict, List, Optional

import torch

from dadt.common.basics import rank, size
from dadt.torch.handles import poll, synchronize
from dadt.torch.mpi_ops import allgather_async, allreduce_async_, reducescatter_async

MODES = ("sync", "async", "dear")
PENDING_KEY = "dadt_async_pending"  # optimizer.state_dict() key of async mode's pending average

# DeAR groups layers into buckets of about 25 MB; dadt uses that when no fusion threshold is set.
DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024


def default_bucket_bytes() -> int:
    """The fusion threshold in bytes (``DADT_FUSION_THRESHOLD``, set by ``dadtrun
    --fusion-threshold-mb``), or DeAR's 25 MiB when none is set. 0 puts every parameter in a
    bucket of its own."""
    value = os.environ.get("DADT_FUSION_THRESHOLD", "").strip()
    if not value:
        return DEFAULT_BUCKET_BYTES
    try:
        bytes_ = int(float(value))
    except ValueError:
        raise ValueError("DADT_FUSION_THRESHOLD must be a number of bytes, got %r" % value) from None
    if bytes_ < 0:
        raise ValueError("DADT_FUSION_THRESHOLD must be >= 0 bytes, got %d" % bytes_)
    return bytes_


def plan_buckets(params: List[torch.Tensor], bucket_bytes: int,
                 large_alone: bool = False) -> List[List[torch.Tensor]]:
    """Splits params (in layer order) into runs of one dtype; a run is closed as soon as it holds
    bucket_bytes bytes or more (as DDP's buckets), so a large parameter does not leave the small
    ones around it (biases) in buckets of their own.

    large_alone: every parameter of bucket_bytes or more gets a bucket of its own (so its gradient
    can be reduced where autograd left it), and the smaller ones between them form the runs. The
    buckets are then in the layer order of their first parameters."""
    position = {id(p): i for i, p in enumerate(params)}
    alone, runs, current, current_bytes = [], [], [], 0
    for p in params:
        nbytes = p.numel() * p.element_size()
        if large_alone and nbytes >= bucket_bytes:
            alone.append([p])
            continue
        if current and p.dtype != current[0].dtype:
            runs.append(current)
            current, current_bytes = [], 0
        current.append(p)
        current_bytes += nbytes
        if current_bytes >= bucket_bytes:
            runs.append(current)
            current, current_bytes = [], 0
    if current:
        runs.append(current)
    return sorted(alone + runs, key=lambda bucket: position[id(bucket[0])])


class _Bucket:
    """Parameters reduced as one flat tensor; slots[i] is params[i]'s range in the flat buffer."""

    def __init__(self, index: int, params: List[torch.Tensor], copies: int):
        self.index = index
        self.params = params
        self.slots = []
        offset = 0
        for p in params:
            self.slots.append((offset, p.numel()))
            offset += p.numel()
        self.numel = offset
        self.dtype = params[0].dtype
        self.copies = copies
        self._buffers = [None] * copies  # made on first use (an adopted gradient needs none)
        self.arrived = set()      # ids of the params whose gradient is in the buffer this step
        self.submitted = False
        # The gradient of the bucket's only parameter when the bucket reduces it where autograd
        # left it, instead of a copy of it (ModeEngine._adopt); None otherwise. Reset at step().
        self.adopted = None
        # Per buffer slot, (param, gradient, version counter) of an adopted gradient that the
        # engine still needs (collective in flight or update not applied), else None.
        self.lent = [None] * copies

    def buffer(self, k: int) -> torch.Tensor:
        if self._buffers[k] is None:
            self._buffers[k] = torch.zeros(self.numel, dtype=self.dtype)
        return self._buffers[k]

    def view(self, flat: torch.Tensor, i: int) -> torch.Tensor:
        start, n = self.slots[i]
        return flat.narrow(0, start, n).view_as(self.params[i])

    def views(self, flat: torch.Tensor) -> List[torch.Tensor]:
        """Every parameter's view of `flat`, in order: the gradients an update reads."""
        return [self.view(flat, i) for i in range(len(self.params))]


class ModeEngine:
    """What the async and dear engines share: the buckets, the gradient hooks that fill them, and
    the per-bucket application of the wrapped optimizer."""

    name = ""
    copies = 1  # flat buffers per bucket

    def __init__(self, opt, params: List[torch.Tensor], bucket_bytes: int, base_step):
        self._opt = opt
        self._base_step = base_step  # the wrapped optimizer's own step(), unbound from dadt's
        self._step = 0               # completed step() calls
        self.buckets = [_Bucket(i, ps, self.copies) for i, ps in
                        enumerate(plan_buckets(params, bucket_bytes, large_alone=True))]
        self._where = {}             # param -> (bucket, slot)
        for b in self.buckets:
            for i, p in enumerate(b.params):
                self._where[p] = (b, i)
        self._hook_handles = [self._register_grad_hook(p) for p in params]
        # (param, gradient, its version counter) for each gradient taken this step: step()
        # refuses one changed in place since (it would not reach the update).
        self._taken = []
        # Per bucket, the wrapped optimizer's param_groups restricted to the bucket's parameters.
        self._groups_of = [self._restricted_groups(b) for b in self.buckets]

    # -- gradient hooks ---------------------------------------------------------------------------
    def _register_grad_hook(self, p):
        def hook(*_):
            self._on_grad(p)
        if hasattr(p, "register_post_accumulate_grad_hook"):
            return p.register_post_accumulate_grad_hook(hook)
        raise RuntimeError("mode=%r needs torch >= 2.1 (Tensor.register_post_accumulate_grad_hook)"
                           % self.name)

    def _on_grad(self, p):
        bucket, i = self._where[p]
        if p.grad.is_sparse:
            raise RuntimeError("mode=%r does not take sparse gradients (parameter '%s'); use "
                               "mode='sync' or a dense layer" % (self.name, self._opt._parameter_names[p]))
        if bucket.submitted or id(p) in bucket.arrived:
            raise RuntimeError(
                "mode=%r: the gradient of '%s' was computed twice before step(); these modes take "
                "exactly one backward pass per step (accumulate into one loss, or use mode='sync' "
                "with backward_passes_per_step)" % (self.name, self._opt._parameter_names[p]))
        self._before_fill(bucket, p)
        if not self._adopt(bucket, p):
            bucket.view(self._fill_buffer(bucket), i).copy_(p.grad)
        bucket.arrived.add(id(p))
        self._taken.append((p, p.grad, p.grad._version))
        if len(bucket.arrived) == len(bucket.params):
            self._submit(bucket)

    def _before_fill(self, bucket, p):
        """Called before a gradient is copied into the bucket (dear checks for stale weights)."""

    def _adopt(self, bucket, p) -> bool:
        """Takes p.grad itself as the bucket's flat buffer when it is the bucket's only parameter
        (a parameter of bucket_bytes or more): the collectives then work where autograd left the
        gradient, with no copy and no buffer. Its buffer stays for the steps in which it gets no
        gradient, a gradient of another dtype, on a GPU, or not contiguous."""
        grad = p.grad
        if (len(bucket.params) != 1 or grad.dtype != bucket.dtype or grad.device.type != "cpu"
                or not grad.is_contiguous()):
            return False
        bucket.adopted = grad
        return True

    def _compress_and_lend(self, bucket, flat):
        """Compresses the bucket's flat tensor for its collective. When the collective works on an
        adopted gradient itself (no compression copy), lends it: it must not change until
        _return_lent, which checks that it did not."""
        tensor, ctx = self._compressed(flat)
        if bucket.adopted is not None and tensor is flat:
            grad = bucket.adopted
            bucket.lent[self._step % bucket.copies] = (bucket.params[0], grad, grad._version)
        return tensor, ctx

    def _return_lent(self, bucket, slot) -> Optional[RuntimeError]:
        """The engine is done with what bucket.lent[slot] lent (if anything). Returns the error to
        raise if something else wrote into it meanwhile, else None."""
        lent, bucket.lent[slot] = bucket.lent[slot], None
        if lent is not None and lent[1]._version != lent[2]:
            return RuntimeError(
                "mode=%r: the gradient of '%s' was changed in place while this mode was still "
                "reducing it (from loss.backward() until its update is applied), so the update "
                "would read a corrupted average. Zero gradients with optimizer.zero_grad() (any "
                "set_to_none) or with set_to_none=True elsewhere, and do not change them after "
                "backward" % (self.name, self._opt._parameter_names[lent[0]]))
        return None

    def release_grads(self):
        """Before zero_grad(set_to_none=False): gives each parameter whose gradient the engine
        still holds a fresh gradient to zero, so zeroing does not write into a reduction."""
        for bucket in self.buckets:
            for lent in bucket.lent:
                if lent is not None and lent[0].grad is lent[1]:
                    lent[0].grad = torch.zeros_like(lent[1])

    def _fill_buffer(self, bucket) -> torch.Tensor:
        return bucket.buffer(self._step % bucket.copies)

    def _submit(self, bucket):
        """Copies zeros for the parameters that got no gradient (as sync mode does) and starts the
        bucket's collective."""
        if bucket.adopted is not None:
            flat = bucket.adopted.view(-1)
        else:
            flat = self._fill_buffer(bucket)
            for i, p in enumerate(bucket.params):
                if id(p) not in bucket.arrived:
                    bucket.view(flat, i).zero_()
        bucket.submitted = True
        self._start(bucket, flat)

    def _submit_remaining(self):
        """step(): buckets not complete in backward go now, in layer order (the next forward
        needs the first layers first)."""
        taken, self._taken = self._taken, []
        for p, grad, version in taken:
            if grad._version != version:
                raise RuntimeError(
                    "mode=%r: the gradient of '%s' was changed in place after backward produced "
                    "it (gradient clipping or scaling between loss.backward() and step(), say). "
                    "This mode reduces each gradient the moment autograd produces it, so such a "
                    "change cannot reach the update; use mode='sync' with optimizer.synchronize() "
                    "before changing gradients" % (self.name, self._opt._parameter_names[p]))
        for bucket in self.buckets:
            if not bucket.submitted:
                self._submit(bucket)
        for bucket in self.buckets:
            bucket.arrived.clear()
            bucket.submitted = False
            bucket.adopted = None

    def _compressed(self, flat):
        return self._opt._compression.compress(flat)

    def _decompressed(self, tensor, ctx):
        return self._opt._compression.decompress(tensor, ctx)

    # -- applying the wrapped optimizer -----------------------------------------------------------
    def _restricted_groups(self, bucket):
        members = {id(p) for p in bucket.params}
        return [[p for p in group["params"] if id(p) in members] for group in self._opt.param_groups]

    def _apply(self, grads: Dict[int, List[torch.Tensor]]):
        """Runs the wrapped optimizer's step on the parameters of the buckets in `grads` (bucket
        index -> averaged gradient per parameter), leaving every p.grad as it found it."""
        opt = self._opt
        params = [p for index in grads for p in self.buckets[index].params]
        saved = [p.grad for p in params]
        full = [group["params"] for group in opt.param_groups]
        try:
            for index, views in grads.items():
                for p, g in zip(self.buckets[index].params, views):
                    p.grad = g
            if len(grads) != len(self.buckets):
                for gi, group in enumerate(opt.param_groups):
                    group["params"] = [p for index in grads for p in self._groups_of[index][gi]]
            self._base_step(opt)
        finally:
            for group, ps in zip(opt.param_groups, full):
                group["params"] = ps
            for p, g in zip(params, saved):
                p.grad = g

    def remove_hooks(self):
        for h in self._hook_handles:
            h.remove()
        self._hook_handles = []


class AsyncEngine(ModeEngine):
    """DADT's asynchronous allreduce with staleness exactly one step."""

    name = "async"
    copies = 2  # step t fills one buffer while step t-1's is reduced in place in the other

    def __init__(self, opt, params, bucket_bytes, base_step):
        super().__init__(opt, params, bucket_bytes, base_step)
        self._current = {}    # bucket index -> (handle, ctx, tensor): this step's allreduces
        self._previous = {}   # the same for the previous step's, still in flight
        self._pending = None  # bucket index -> averaged flat gradient, waiting to be applied

    def _start(self, bucket, flat):
        tensor, ctx = self._compress_and_lend(bucket, flat)
        op, prescale, postscale = self._opt._scale_factors()
        handle = allreduce_async_(tensor, name="async.%d.b%d" % (self._step % 2, bucket.index),
                                  op=op, prescale_factor=prescale, postscale_factor=postscale)
        self._current[bucket.index] = (handle, ctx, tensor)

    def _wait_previous(self):
        """Waits for the previous step's allreduces; their average becomes the pending update."""
        if not self._previous:
            return
        done = {}
        for index in sorted(self._previous):
            handle, ctx, tensor = self._previous[index]
            synchronize(handle)
            done[index] = self._decompressed(tensor, ctx)
        self._previous = {}
        self._pending = done

    def _apply_pending(self):
        pending, self._pending = self._pending, None
        # Every bucket is returned before the first refusal is raised: nothing stays lent.
        refused = [self._return_lent(self.buckets[index], (self._step - 1) % 2)
                   for index in sorted(pending or ())]  # the previous step's buffers
        for error in refused:
            if error is not None:
                raise error
        if pending:
            self._apply({index: self.buckets[index].views(flat)
                         for index, flat in sorted(pending.items())})

    def step(self):
        """Step t: starts what is left of step t's allreduces, waits for step t-1's (reduced while
        this step's forward and backward ran) and applies their average."""
        self._submit_remaining()
        self._wait_previous()
        self._apply_pending()
        self._previous, self._current = self._current, {}
        self._step += 1

    def synchronize(self):
        """Applies the average in flight (flush): afterwards every gradient of every step() so
        far has been applied exactly once."""
        self._wait_previous()
        self._apply_pending()

    def pending_state(self):
        """What a resumed run needs (waits for the allreduces in flight): the averaged gradients
        not applied yet (None if none) and the step count, which names the collectives."""
        self._wait_previous()
        buckets = None
        if self._pending:
            buckets = {index: t.clone() for index, t in self._pending.items()}
        return {"step": self._step, "buckets": buckets, "numels": [b.numel for b in self.buckets]}

    def load_pending_state(self, state):
        self._wait_previous()
        self._pending = None
        for bucket in self.buckets:  # the dropped average's gradients are the user's again
            bucket.lent = [None] * bucket.copies
        if state is None:
            return
        numels = [b.numel for b in self.buckets]
        if list(state.get("numels", [])) != numels:
            raise ValueError("the checkpoint's pending async gradients have bucket sizes %s, this "
                             "optimizer's buckets are %s: build the optimizer with the same model, "
                             "parameters and bucket_bytes" % (state.get("numels"), numels))
        self._step = int(state["step"])
        if state["buckets"]:
            self._pending = {int(k): v.clone().to(self.buckets[int(k)].dtype)
                             for k, v in state["buckets"].items()}


class DearEngine(ModeEngine):
    """DeAR: reduce-scatter in backward, all-gather before the next forward, per-bucket update.

    No collective allocates or copies: a bucket's reduce-scatter writes this rank's averaged
    shard in place, into the shard's own rows of the bucket's flat buffer, and its all-gather
    sends those rows and fills in the others (the buffer's views are the gradients the update
    uses; a large parameter's buffer is its own gradient). step() waits for the
    reduce-scatters (issued in backward, so mostly done) and issues every all-gather at once in
    layer order, so they are negotiated together and run, first layer first, while the next
    forward runs."""

    name = "dear"

    def __init__(self, opt, params, bucket_bytes, base_step, model):
        super().__init__(opt, params, bucket_bytes, base_step)
        self._rs = {}        # bucket index -> (handle, ctx, tensor) of the reduce-scatter
        self._ag = {}        # bucket index -> (handle, ctx) of the all-gather
        self._deferred = []  # bucket indices whose update step() scheduled, in layer order
        # Buckets applied ahead of their modules (with another module's bucket, their all-gather
        # being done) whose own modules have not run since: a gradient for one of them means a
        # parameter was read outside its module, as if it were still deferred.
        self._early = set()
        # This rank's rows of each flat bucket, (start, count): the reduce-scatter splits the
        # first dimension, lower ranks taking the remainder.
        n, r = size(), rank()
        self._shard_rows = [(r * (b.numel // n) + min(r, b.numel % n),
                             b.numel // n + (1 if r < b.numel % n else 0)) for b in self.buckets]
        self._module_hooks = []
        owned = {}
        for module in model.modules():
            indices = sorted({self._where[p][0].index for p in module.parameters(recurse=False)
                              if p in self._where})
            if indices:
                owned[module] = indices
        for module, indices in owned.items():
            self._module_hooks.append(module.register_forward_pre_hook(self._pre_hook(indices)))

    def _pre_hook(self, indices):
        def hook(*_):
            for index in indices:
                self._early.discard(index)
                self._complete(index)
        return hook

    def _before_fill(self, bucket, p):
        if bucket.index in self._deferred or bucket.index in self._early:
            raise RuntimeError(
                "mode='dear': parameter '%s' got a gradient while its update from the previous "
                "step was still deferred, so the forward pass used stale weights. dear applies "
                "a bucket's update in the forward pre-hook of the modules that own its parameters; "
                "use every parameter inside the forward of a module that owns it, or call "
                "optimizer.synchronize() before the forward pass" % self._opt._parameter_names[p])

    def _submit(self, bucket):
        # A bucket whose module did not run since the last step (no gradient now) still has its
        # previous update deferred: apply it before the buffer is reused.
        self._complete(bucket.index)
        super()._submit(bucket)

    def _start(self, bucket, flat):
        tensor, ctx = self._compress_and_lend(bucket, flat)
        shard = tensor.narrow(0, *self._shard_rows[bucket.index])  # in place, no copy
        op, prescale, postscale = self._opt._scale_factors()
        handle = reducescatter_async(tensor, name="dear.rs.b%d" % bucket.index, op=op,
                                     prescale_factor=prescale, postscale_factor=postscale, out=shard)
        self._rs[bucket.index] = (handle, ctx, tensor)

    def _gather_all(self):
        """Waits for the reduce-scatters and starts every all-gather, in layer order. The
        all-gather sends the shard's rows of the reduce-scatter's input (the bucket's flat buffer,
        or the compressed copy of it) and fills in the other ranks' rows around them."""
        for index in sorted(self._rs):
            handle, ctx, tensor = self._rs.pop(index)
            shard = synchronize(handle)
            self._ag[index] = (allgather_async(shard, name="dear.ag.b%d" % index, out=tensor), ctx)

    def _complete(self, index):
        """Applies bucket `index`'s deferred update once its all-gather is done, and with it, in
        the same call of the wrapped optimizer, every other deferred update whose all-gather has
        already finished: one optimizer call per forward pre-hook rather than one per bucket
        (each call costs a fixed ~0.3 ms of Python), and the same weights either way, since an
        update only has to land before its module runs."""
        if index not in self._deferred:
            return
        ready = [i for i in self._deferred if i == index or poll(self._ag[i][0])]
        grads = {}
        for i in ready:
            handle, ctx = self._ag.pop(i)
            flat = self._decompressed(synchronize(handle), ctx)
            self._deferred.remove(i)
            if i != index:
                self._early.add(i)
            error = self._return_lent(self.buckets[i], 0)
            if error is not None:
                raise error
            grads[i] = self.buckets[i].views(flat)
        self._apply(grads)

    def step(self):
        self._submit_remaining()
        self._early.clear()
        self._deferred = sorted(self._rs)
        self._gather_all()
        self._step += 1

    def synchronize(self):
        """Completes every deferred update, in layer order."""
        for index in list(self._deferred):
            self._complete(index)
        self._early.clear()  # the next forward reads updated weights wherever it reads them

    def remove_hooks(self):
        super().remove_hooks()
        for h in self._module_hooks:
            h.remove()
        self._module_hooks = []


def layer_order(opt_params: List[torch.Tensor], model: Optional[torch.nn.Module]):
    """The optimizer's trainable parameters in layer order: the model's parameter order when a
    model is given (optimizer parameters it lacks come last), else the optimizer's own order."""
    trainable = [p for p in opt_params if p.requires_grad]
    if model is None:
        return trainable
    ids = {id(p) for p in trainable}
    ordered, seen = [], set()
    for p in model.parameters():
        if id(p) in ids and id(p) not in seen:
            ordered.append(p)
            seen.add(id(p))
    return ordered + [p for p in trainable if id(p) not in seen]
