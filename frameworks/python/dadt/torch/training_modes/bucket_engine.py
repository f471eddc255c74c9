"""BucketEngine: what the async and dear engines share (docs/training-modes.md).

Both modes take each gradient as soon as autograd has accumulated it. A parameter of
``bucket_bytes`` or more is a bucket of its own, whose collectives work on the gradient tensor
itself (no copy; the tensor is lent to the engine until its update is applied, and a change to it
meanwhile is refused). The smaller parameters between them form runs in layer order (the model's
parameter order), each closed once it holds ``bucket_bytes``, and their gradients are copied into
the run's flat buffer. A bucket is one collective, so the runtime's own fusion has little left to
do. Ordering ("priority") is decided here, in the issue order: the runtime executes collectives in
the order in which every rank has submitted them, so the earliest-submitted bucket goes first.
"""

from typing import Dict, List, Optional

import torch

from dadt.torch.training_modes.buckets import (Bucket, default_bucket_bytes, layer_order,
                                                plan_buckets)
from dadt.torch.training_modes.engine import ModeEngine


class BucketEngine(ModeEngine):
    """The buckets, the gradient hooks that fill them, and the per-bucket application of the
    wrapped optimizer. Subclasses start a bucket's collective (_start) and decide when updates
    are applied (step, synchronize)."""

    copies = 1  # flat buffers per bucket

    @classmethod
    def check_options(cls, *, model, backward_passes_per_step, groups):
        if backward_passes_per_step != 1:
            raise ValueError("mode=%r takes one backward pass per step: backward_passes_per_step "
                             "must be 1, got %d" % (cls.name, backward_passes_per_step))
        if groups is not None:
            raise ValueError("groups is a mode='sync' option; mode=%r buckets gradients by "
                             "bucket_bytes" % cls.name)

    @classmethod
    def create(cls, host, params, *, model, bucket_bytes, groups):
        if bucket_bytes is None:
            bucket_bytes = default_bucket_bytes()
        return cls(host, layer_order(params, model), bucket_bytes, model=model)

    def __init__(self, host, params: List[torch.Tensor], bucket_bytes: int, model=None):
        self._host = host
        self._step = 0               # completed step() calls
        self.buckets = [Bucket(i, ps, self.copies) for i, ps in
                        enumerate(plan_buckets(params, bucket_bytes, large_alone=True))]
        self._where = {}             # param -> (bucket, slot)
        for b in self.buckets:
            for i, p in enumerate(b.params):
                self._where[p] = (b, i)
        self._hook_handles = [self._register_grad_hook(p) for p in params]
        # (param, gradient, its version counter) for each gradient taken this step: step()
        # refuses one changed in place since (it would not reach the update).
        self._taken = []

    def bucket_of(self, p: torch.Tensor):
        """(bucket, slot) of a parameter."""
        return self._where[p]

    # -- the ModeEngine interface -----------------------------------------------------------------
    def step(self, closure, should_synchronize):
        if closure is not None:
            raise ValueError("step(closure) is not supported in mode=%r" % self.name)
        if not should_synchronize:
            raise RuntimeError("skip_synchronize() is a mode='sync' pattern: in mode=%r "
                               "synchronize() applies updates instead of averaging "
                               "gradients" % self.name)
        self._step_mode()

    def flush(self):
        self.synchronize()

    def before_zero_grad(self, set_to_none):
        if not set_to_none:
            self.release_grads()  # zeroing must not write into a reduction

    def _step_mode(self):
        raise NotImplementedError

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
                               "mode='sync' or a dense layer" % (self.name, self._host.name_of(p)))
        if bucket.submitted or id(p) in bucket.arrived:
            raise RuntimeError(
                "mode=%r: the gradient of '%s' was computed twice before step(); these modes take "
                "exactly one backward pass per step (accumulate into one loss, or use mode='sync' "
                "with backward_passes_per_step)" % (self.name, self._host.name_of(p)))
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
        tensor, ctx = self._host.compress(flat)
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
                "backward" % (self.name, self._host.name_of(lent[0])))
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

    def _start(self, bucket, flat):
        raise NotImplementedError

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
                    "before changing gradients" % (self.name, self._host.name_of(p)))
        for bucket in self.buckets:
            if not bucket.submitted:
                self._submit(bucket)
        for bucket in self.buckets:
            bucket.arrived.clear()
            bucket.submitted = False
            bucket.adopted = None

    # -- applying the wrapped optimizer -----------------------------------------------------------
    def _apply(self, grads: Dict[int, List[torch.Tensor]]):
        """Runs the wrapped optimizer's step on the parameters of the buckets in `grads` (bucket
        index -> averaged gradient per parameter), leaving every p.grad as it found it."""
        params = [p for index in grads for p in self.buckets[index].params]
        saved = [p.grad for p in params]
        try:
            for index, views in grads.items():
                for p, g in zip(self.buckets[index].params, views):
                    p.grad = g
            if len(grads) != len(self.buckets):
                self._host.base_step_on(params)
            else:
                self._host.base_step()
        finally:
            for p, g in zip(params, saved):
                p.grad = g

    def remove_hooks(self):
        for h in self._hook_handles:
            h.remove()
        self._hook_handles = []
