"""The "async" training mode (DADT, Pipe-SGD; docs/training-modes.md).

Step t submits the allreduce of step t's gradients and applies the average of step t-1's, which
was reduced while step t's forward and backward ran. Step t waits for step t-1's average, so the
staleness is exactly one step. Step 0 applies nothing (the wrapped optimizer is not called, so its
state does not move); ``synchronize()`` applies the pending average, so no gradient is ever lost.
"""

from dadt.common.basics import rank
from dadt.torch.functions import broadcast_object
from dadt.torch.handles import synchronize
from dadt.torch.async_collectives import allreduce_async_
from dadt.torch.training_modes.bucket_engine import BucketEngine
from dadt.torch.training_modes.engine import PENDING_KEY


class AsyncEngine(BucketEngine):
    """DADT's asynchronous allreduce with staleness exactly one step."""

    name = "async"
    copies = 2  # step t fills one buffer while step t-1's is reduced in place in the other

    def __init__(self, host, params, bucket_bytes, model=None):
        super().__init__(host, params, bucket_bytes, model)
        self._current = {}    # bucket index -> (handle, ctx, tensor): this step's allreduces
        self._previous = {}   # the same for the previous step's, still in flight
        self._pending = None  # bucket index -> averaged flat gradient, waiting to be applied

    # -- the ModeEngine interface -----------------------------------------------------------------
    def synchronize(self):
        """Applies the average in flight (flush): afterwards every gradient of every step() so
        far has been applied exactly once."""
        self._wait_previous()
        self._apply_pending()

    def checkpoint_state(self):
        """The averaged gradients not applied yet, under PENDING_KEY (waits for the allreduces
        in flight), so that a run resumed from the state dict applies them at its first step."""
        return {PENDING_KEY: self.pending_state()}

    def load_checkpoint_state(self, pending):
        self.load_pending_state(pending)

    def broadcast_state(self, root_rank):
        """Root rank's pending average becomes every rank's."""
        pending = self.pending_state() if rank() == root_rank else None
        pending = broadcast_object(pending, root_rank, name="DistributedOptimizer.async_pending")
        if rank() != root_rank:
            self.load_pending_state(pending)

    # -- the mode -----------------------------------------------------------------------------------
    def _start(self, bucket, flat):
        tensor, ctx = self._compress_and_lend(bucket, flat)
        op, prescale, postscale = self._host.reduction()
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
            done[index] = self._host.decompress(tensor, ctx)
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

    def _step_mode(self):
        """Step t: starts what is left of step t's allreduces, waits for step t-1's (reduced while
        this step's forward and backward ran) and applies their average."""
        self._submit_remaining()
        self._wait_previous()
        self._apply_pending()
        self._previous, self._current = self._current, {}
        self._step += 1

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
