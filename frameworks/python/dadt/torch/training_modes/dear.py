"""The "dear" training mode (DeAR; docs/training-modes.md).

A bucket's reduce-scatter starts the moment its last gradient arrives in backward. step() only
schedules the update. A forward pre-hook on every module that owns parameters waits for the
reduce-scatters in layer order, issues the all-gathers of the averaged shards in layer order, and
applies the wrapped optimizer to a bucket's parameters just before the module runs. Every rank
applies the same update to the same full averaged gradient, so the weights equal sync mode's up
to floating-point reordering, for any torch optimizer.
"""

import torch

from dadt.common.basics import local_size, rank, size
from dadt.common.elastic import is_elastic
from dadt.torch.handles import poll, synchronize
from dadt.torch.async_collectives import allgather_async, reducescatter_async
from dadt.torch.training_modes.bucket_engine import BucketEngine
from dadt.torch.training_modes.buckets import dear_bucket_bytes, default_bucket_bytes, shard_rows
from dadt.torch.training_modes.engine import warn_dropped_pending


class DearEngine(BucketEngine):
    """DeAR: reduce-scatter in backward, all-gather before the next forward, per-bucket update.

    No collective allocates or copies: a bucket's reduce-scatter writes this rank's averaged
    shard in place, into the shard's own rows of the bucket's flat buffer, and its all-gather
    sends those rows and fills in the others (the buffer's views are the gradients the update
    uses; a large parameter's buffer is its own gradient). step() waits for the
    reduce-scatters (issued in backward, so mostly done) and issues every all-gather at once in
    layer order, so they are negotiated together and run, first layer first, while the next
    forward runs."""

    name = "dear"

    @classmethod
    def check_options(cls, *, model, backward_passes_per_step, groups):
        if not isinstance(model, torch.nn.Module):
            raise ValueError("mode='dear' needs the model: DistributedOptimizer(..., mode='dear', "
                             "model=model), so that it can hook the forward pass")
        super().check_options(model=model, backward_passes_per_step=backward_passes_per_step,
                              groups=groups)

    @classmethod
    def create(cls, host, params, *, model, bucket_bytes, groups):
        if bucket_bytes is None:
            bucket_bytes = cls.planned_bucket_bytes(params)
        return super().create(host, params, model=model, bucket_bytes=bucket_bytes, groups=groups)

    @staticmethod
    def planned_bucket_bytes(params) -> int:
        """dear's bucket size for these parameters when bucket_bytes is not given (buckets.py,
        dear_bucket_bytes). The same on every rank: local_size() < size() holds on every host of
        a job across hosts. Not cut finer in an elastic job, whose hosts change while the
        surviving ranks keep their buckets."""
        spans_hosts = local_size() < size() and not is_elastic()
        nbytes = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
        return dear_bucket_bytes(default_bucket_bytes(), nbytes, spans_hosts)

    def __init__(self, host, params, bucket_bytes, model):
        super().__init__(host, params, bucket_bytes, model)
        self._rs = {}        # bucket index -> (handle, ctx, tensor) of the reduce-scatter
        self._ag = {}        # bucket index -> (handle, ctx) of the all-gather
        self._deferred = []  # bucket indices whose update step() scheduled, in layer order
        # Buckets applied ahead of their modules (with another module's bucket, their all-gather
        # being done) whose own modules have not run since: a gradient for one of them means a
        # parameter was read outside its module, as if it were still deferred.
        self._early = set()
        # This rank's rows of each flat bucket, (start, count), by the runtime's reducescatter rule.
        self._shard_rows = [shard_rows(b.numel, size(), rank()) for b in self.buckets]
        self._module_hooks = []
        owned = {}
        for module in model.modules():
            indices = sorted({self._where[p][0].index for p in module.parameters(recurse=False)
                              if p in self._where})
            if indices:
                owned[module] = indices
        for module, indices in owned.items():
            self._module_hooks.append(module.register_forward_pre_hook(self._pre_hook(indices)))

    # -- the ModeEngine interface -----------------------------------------------------------------
    def synchronize(self):
        """Completes every deferred update, in layer order."""
        for index in list(self._deferred):
            self._complete(index)
        self._early.clear()  # the next forward reads updated weights wherever it reads them

    def checkpoint_state(self):
        """Completes the deferred updates first (mathematically the same as completing them
        before the next forward), so the saved state has them."""
        self.synchronize()
        return {}

    def load_checkpoint_state(self, pending):
        self.synchronize()
        warn_dropped_pending(pending, self.name)

    def broadcast_state(self, root_rank):
        self.synchronize()

    def remove_hooks(self):
        super().remove_hooks()
        for h in self._module_hooks:
            h.remove()
        self._module_hooks = []

    # -- the mode -----------------------------------------------------------------------------------
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
                "optimizer.synchronize() before the forward pass" % self._host.name_of(p))

    def _submit(self, bucket):
        # A bucket whose module did not run since the last step (no gradient now) still has its
        # previous update deferred: apply it before the buffer is reused.
        self._complete(bucket.index)
        super()._submit(bucket)

    def _start(self, bucket, flat):
        tensor, ctx = self._compress_and_lend(bucket, flat)
        shard = tensor.narrow(0, *self._shard_rows[bucket.index])  # in place, no copy
        op, prescale, postscale = self._host.reduction()
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
            flat = self._host.decompress(synchronize(handle), ctx)
            self._deferred.remove(i)
            if i != index:
                self._early.add(i)
            error = self._return_lent(self.buckets[i], 0)
            if error is not None:
                raise error
            grads[i] = self.buckets[i].views(flat)
        self._apply(grads)

    def _step_mode(self):
        self._submit_remaining()
        self._early.clear()
        self._deferred = sorted(self._rs)
        self._gather_all()
        self._step += 1
