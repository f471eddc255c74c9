"""DistributedOptimizer: averages gradients across ranks while backward is still running."""

import warnings
from contextlib import contextmanager

import torch

from dadt.common.basics import rank, size
from dadt.common.util import Adasum, Average, Sum, split_list
from dadt.torch.compression import Compression
from dadt.torch.functions import broadcast_object
from dadt.torch.handles import synchronize
from dadt.torch.mpi_ops import allgather_async, allreduce_async_, grouped_allreduce_async_
from dadt.torch import training_modes

__all__ = ["DistributedOptimizer"]


class _DistributedOptimizer(torch.optim.Optimizer):
    """Methods mixed into a dynamic subclass of the wrapped optimizer's class."""

    _dadt_distributed = True  # marks the dynamic subclass (it does not inherit from this class)

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=Average, gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False,
                 mode="sync", model=None, bucket_bytes=None):
        super(self.__class__, self).__init__(params)
        self._compression = compression

        all_params = [v for group in self.param_groups for v in group["params"]]
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [("allreduce.noname.%d" % i, v) for i, v in enumerate(all_params)]
        # make sure that named_parameters are tuples
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                             "usually produced by model.named_parameters().")

        dups = _find_duplicates([k for k, _ in named_parameters])
        if dups:
            raise ValueError("Parameter names in named_parameters must be unique. "
                             "Found duplicates: %s" % ", ".join(sorted(dups)))

        named_ids = {id(v) for _, v in named_parameters}
        unnamed = [id(v) for v in all_params if id(v) not in named_ids]
        if unnamed:
            raise ValueError("named_parameters was specified, but one or more model parameters "
                             "were not named. Python object ids: %s"
                             % ", ".join(str(i) for i in unnamed))

        self._parameter_names = {v: k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step for v in all_params}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense

        self._handles = {}        # param (or tuple of params, for a group) -> (handle, ctx)
        self._hook_handles = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True

        if groups is not None:
            if not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
                raise ValueError("groups should be a non-negative integer or a list of list of "
                                 "torch.Tensor.")
            if isinstance(groups, list):
                seen = set()
                for group in groups:
                    for p in group:
                        if not isinstance(p, torch.Tensor):
                            raise ValueError("groups must consist of torch.Tensor.")
                        if id(p) in seen:
                            raise ValueError("A parameter can only appear once in groups.")
                        seen.add(id(p))
        self._groups = groups
        self._p_to_group = {}
        self._group_counts = {}

        self.mode = mode
        self._engine = None
        if mode != "sync":
            order = training_modes.layer_order(all_params, model)
            if bucket_bytes is None:
                bucket_bytes = training_modes.default_bucket_bytes()
            base_step = _base_step(self.__class__)
            if mode == "async":
                self._engine = training_modes.AsyncEngine(self, order, bucket_bytes, base_step)
            else:
                self._engine = training_modes.DearEngine(self, order, bucket_bytes, base_step, model)
        elif size() > 1:
            self._register_hooks()

    def state_dict(self, *args, **kwargs):
        """The wrapped optimizer's state dict. mode="async" adds the averaged gradients not applied
        yet under ``"dadt_async_pending"`` (waiting for the allreduce in flight), so that a run
        resumed from it applies them at its first step; mode="dear" first completes the deferred
        updates (mathematically the same as completing them before the next forward)."""
        if self.mode == "dear":
            self._engine.synchronize()
        state = super(self.__class__, self).state_dict(*args, **kwargs)
        if self.mode == "async":
            state[training_modes.PENDING_KEY] = self._engine.pending_state()
        return state

    def _broadcast_mode_state(self, root_rank):
        """Called by broadcast_optimizer_state on every rank: root rank's pending async average
        becomes every rank's; dear's deferred updates are completed."""
        if self.mode == "dear":
            self._engine.synchronize()
        elif self.mode == "async":
            pending = self._engine.pending_state() if rank() == root_rank else None
            pending = broadcast_object(pending, root_rank,
                                       name="DistributedOptimizer.async_pending")
            if rank() != root_rank:
                self._engine.load_pending_state(pending)

    def flush(self):
        """Completes every update that step() has scheduled: mode="async" applies the pending
        average of the last step's gradients, mode="dear" its deferred per-bucket updates. Call it
        at the end of training and before saving the model. A no-op in mode="sync"."""
        if self._engine is not None:
            self._engine.synchronize()

    def load_state_dict(self, state_dict, *args, **kwargs):
        state_dict = dict(state_dict)
        pending = state_dict.pop(training_modes.PENDING_KEY, None)
        if self.mode == "async":
            self._engine.load_pending_state(pending)
        else:
            if self.mode == "dear":
                self._engine.synchronize()
            if pending and pending.get("buckets"):
                warnings.warn("the state dict holds the pending averaged gradients of an "
                              "async-mode optimizer; mode=%r drops them" % self.mode)
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        super(self.__class__, self).load_state_dict(state_dict, *args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        """Changes how many backward passes are accumulated locally before communicating."""
        if self.mode != "sync" and passes != 1:
            raise ValueError("backward_passes_per_step must be 1 in mode=%r" % self.mode)
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step

    def _register_hooks(self):
        p_list = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        if self._groups is not None:
            # Every rank must form the same groups in the same order: take rank 0's order.
            names = broadcast_object([self._parameter_names[p] for p in p_list], root_rank=0,
                                     name="DistributedOptimizer.parameter_order")
            order = {n: i for i, n in enumerate(names)}
            p_list = sorted(p_list, key=lambda p: order[self._parameter_names[p]])
            if isinstance(self._groups, list):
                listed = {id(p) for p in p_list}
                p_groups = [[p for p in group if id(p) in listed] for group in self._groups]
                grouped = {id(p) for group in p_groups for p in group}
                p_groups = [g for g in p_groups if g] + [[p] for p in p_list if id(p) not in grouped]
            else:
                p_groups = [g for g in split_list(p_list, self._groups) if g]
            for group in map(tuple, p_groups):
                for p in group:
                    self._p_to_group[p] = group
                self._group_counts[group] = 0

        for p in p_list:
            self._requires_update.add(p)
            hook = self._make_hook(p)
            if hasattr(p, "register_post_accumulate_grad_hook"):
                self._hook_handles.append(p.register_post_accumulate_grad_hook(hook))
            else:  # torch < 2.1: hook the gradient accumulator
                grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hook_handles.append(grad_acc.register_hook(hook))
                self._hook_handles.append(grad_acc)  # keep the accumulator alive

    def _scale_factors(self):
        """(op, prescale, postscale): gradient_predivide_factor f splits the average into
        1/f before and f/size after the sum."""
        if self.op == Average and self.gradient_predivide_factor != 1.0:
            f = self.gradient_predivide_factor
            return Sum, 1.0 / f, f / size()
        return self.op, 1.0, 1.0

    def _grad_name(self, p):
        return "grad." + self._parameter_names[p]

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # Gradient was not computed, but we still need to submit a tensor to allreduce
            # as one of the other ranks may have computed it (due to dynamic forward functions).
            p.grad = torch.zeros_like(p)
        tensor = p.grad
        if tensor.is_sparse:
            if not self.sparse_as_dense:
                return self._sparse_allreduce_grad_async(p)
            tensor = tensor.to_dense()
        tensor_compressed, ctx = self._compression.compress(tensor)
        op, prescale, postscale = self._scale_factors()
        handle = allreduce_async_(tensor_compressed.contiguous(), name=self._grad_name(p), op=op,
                                  prescale_factor=prescale, postscale_factor=postscale)
        return handle, ctx

    def _sparse_allreduce_grad_async(self, p):
        """Sparse gradients: allgather indices and values; the sum is their concatenation."""
        grad = p.grad.coalesce()
        name = self._grad_name(p)
        h_indices = allgather_async(grad.indices().t().contiguous(), name=name + ".indices")
        h_values = allgather_async(grad.values().contiguous(), name=name + ".values")

        def finish():
            indices, values = synchronize(h_indices).t(), synchronize(h_values)
            if self.op == Average:
                values = values / size()
            return torch.sparse_coo_tensor(indices, values, grad.size())
        return finish, None

    def _grouped_allreduce_grad_async(self, ps):
        """Sparse gradients in a group travel dense (as with sparse_as_dense)."""
        for p in ps:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        dense = [p.grad.to_dense() if p.grad.is_sparse else p.grad for p in ps]
        compressed, ctxs = zip(*[self._compression.compress(t) for t in dense])
        op, prescale, postscale = self._scale_factors()
        handle = grouped_allreduce_async_([t.contiguous() for t in compressed],
                                          name="grad.group." + self._parameter_names[ps[0]],
                                          op=op, prescale_factor=prescale,
                                          postscale_factor=postscale)
        return handle, ctxs

    def _set_grad(self, p, output, ctx):
        aggregated = self._compression.decompress(output, ctx)
        if p.grad.is_sparse:
            if not aggregated.is_sparse:  # reduced dense: back to sparse for the update
                aggregated = aggregated.to_sparse()
            p.grad = aggregated
        else:
            p.grad.set_(aggregated)

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than backward_passes_per_step times "
                        "before call to step(). Increase backward_passes_per_step to accumulate "
                        "gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                if self._groups is not None:
                    group = self._p_to_group[p]
                    self._group_counts[group] += 1
                    if self._group_counts[group] == len(group):
                        self._handles[group] = self._grouped_allreduce_grad_async(group)
                        for gp in group:  # drop the placeholders of the other members
                            self._handles.pop(gp, None)
                        self._group_counts[group] = 0
                        return
                else:
                    handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Waits for every gradient allreduce and writes the averaged gradients into ``p.grad``.
        First submits the allreduce of every gradient not submitted yet: parameters that got no
        gradient on this rank, or fewer than backward_passes_per_step backward passes.

        mode="async" and mode="dear": the same as flush()."""
        if self._engine is not None:
            return self._engine.synchronize()
        submitted = set()
        for key, (handle, _) in self._handles.items():
            if isinstance(key, tuple):
                submitted.update(key)
            elif handle is not None:
                submitted.add(key)
        # Sorted by name, so every rank submits (and numbers its groups) in the same order.
        missing = sorted(self._requires_update - submitted, key=self._parameter_names.get)
        if self._groups is None:
            for p in missing:
                self._handles[p] = self._allreduce_grad_async(p)
        else:
            for group in dict.fromkeys(self._p_to_group[p] for p in missing):
                for gp in group:
                    self._handles.pop(gp, None)
                self._handles[group] = self._grouped_allreduce_grad_async(group)

        for p, (handle, ctx) in self._handles.items():
            if isinstance(p, tuple):
                outputs = synchronize(handle)
                for gp, output, gctx in zip(p, outputs, ctx):
                    self._allreduce_delay[gp] = self.backward_passes_per_step
                    self._set_grad(gp, output, gctx)
                self._group_counts[p] = 0
                continue
            output = handle() if callable(handle) else synchronize(handle)
            self._allreduce_delay[p] = self.backward_passes_per_step
            if self._groups is not None:
                self._group_counts[self._p_to_group[p]] = 0
            self._set_grad(p, output, ctx)
        self._handles.clear()
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self):
        """
        A context manager used to specify that optimizer.step() should not perform
        synchronization.

        It's typically used in a following pattern:

        .. code-block:: python

            optimizer.synchronize()
            with optimizer.skip_synchronize():
                optimizer.step()
        """
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._engine is not None:
            if closure is not None:
                raise ValueError("step(closure) is not supported in mode=%r" % self.mode)
            if not self._should_synchronize:
                raise RuntimeError("skip_synchronize() is a mode='sync' pattern: in mode=%r "
                                   "synchronize() applies updates instead of averaging "
                                   "gradients" % self.mode)
            return self._engine.step()
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, set_to_none: bool = True):
        # async and dear take each gradient (a copy, or a large one itself) the moment
        # it is ready.
        if self._handles and self._engine is None:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        if self._engine is not None and not set_to_none:
            self._engine.release_grads()  # zeroing must not write into a reduction
        return super(self.__class__, self).zero_grad(set_to_none=set_to_none)


def _base_step(cls):
    """The wrapped optimizer's step(), bypassing dadt's."""
    def step(opt):
        return super(cls, opt).step()
    return step


def _find_duplicates(items):
    seen, dups = set(), set()
    for item in items:
        (dups if item in seen else seen).add(item)
    return dups


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         groups=None, sparse_as_dense=False, *, num_groups=0, mode="sync",
                         model=None, bucket_bytes=None):
    """
    An optimizer that wraps another torch.optim.Optimizer, using an allreduce to combine gradient
    values before applying gradients to model weights.

    Allreduce operations are executed after each gradient is computed by ``loss.backward()`` in
    parallel with each other. The ``step()`` method ensures that all allreduce operations are
    finished before applying gradients to the model.

    DistributedOptimizer exposes the ``synchronize()`` method, which forces allreduce operations
    to finish before continuing the execution. It's useful in conjunction with gradient clipping,
    or other operations that modify gradients in place before ``step()`` is executed. Make sure
    to use ``optimizer.skip_synchronize()`` if you're calling ``synchronize()`` in your code.

    Example of gradient clipping:

    .. code-block:: python

        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.synchronize()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
        with optimizer.skip_synchronize():
            optimizer.step()

    Arguments:
        optimizer: Optimizer to use for computing gradients and applying updates.
        named_parameters: A mapping between parameter names and values. Used for naming of
                          allreduce operations. Typically just ``model.named_parameters()``.
        compression: Compression algorithm used during allreduce to reduce the amount of data
                     sent during each parameter update step. Defaults to not using compression.
        backward_passes_per_step: Number of expected backward passes to perform before calling
                                  step()/synchronize(). This allows accumulating gradients over
                                  multiple mini-batches before reducing and applying them.
        op: The reduction operation to use when combining gradients across different ranks:
            Average (default) or Sum. Adasum is not implemented.
        gradient_predivide_factor: If op == Average, gradient_predivide_factor splits the
                                   averaging before and after the sum. Gradients are scaled by
                                   1.0 / gradient_predivide_factor before the sum and
                                   gradient_predivide_factor / size after the sum.
        groups: The parameter to group the gradient allreduce ops. Accepted values are a
                non-negative integer or a list of list of torch.Tensor. If groups is a
                non-negative integer, it is the number of groups to assign gradient allreduce ops
                to for explicit grouping. If groups is a list of list of torch.Tensor, tensors in
                the same inner list will be assigned to the same group, while parameters that do
                not appear in any list will form a group itself. Defaults to None, which means no
                explicit groups.
        sparse_as_dense: If set True, convert all sparse gradients to dense and perform allreduce,
                         then convert back to sparse before applying the update.
        num_groups: Deprecated, use `groups`.
        mode: How gradients are exchanged (docs/training-modes.md):
              "sync" (default): the averaged gradients of this step are applied by step().
              "async" (DADT): step t applies the average of step t-1's gradients, reduced while
              step t ran; step 0 applies nothing, ``flush()`` applies the pending average.
              "dear" (DeAR): reduce-scatter in backward, all-gather before the next forward
              needs the bucket, per-bucket update; needs ``model``. Same weights as "sync".
        model: The torch.nn.Module being trained. Required by mode="dear" (its forward
               pre-hooks apply the deferred updates); in mode="async" it sets the layer order.
        bucket_bytes: Bucket size of mode="async" and mode="dear", in bytes. Default: the fusion
                      threshold (``DADT_FUSION_THRESHOLD``, ``dadtrun --fusion-threshold-mb``), or
                      25 MiB when none is set; 0 puts every parameter in its own bucket. A
                      parameter of bucket_bytes or more is reduced in its own gradient tensor,
                      which then belongs to dadt until its update is applied
                      (docs/training-modes.md).
    """
    if mode not in training_modes.MODES:
        raise ValueError("mode must be one of %s, got %r" % (", ".join(map(repr, training_modes.MODES)),
                                                            mode))
    if mode == "dear" and not isinstance(model, torch.nn.Module):
        raise ValueError("mode='dear' needs the model: DistributedOptimizer(..., mode='dear', "
                         "model=model), so that it can hook the forward pass")
    if model is not None and not isinstance(model, torch.nn.Module):
        raise ValueError("model must be a torch.nn.Module, got %s" % type(model).__name__)
    if mode != "sync":
        if backward_passes_per_step != 1:
            raise ValueError("mode=%r takes one backward pass per step: backward_passes_per_step "
                             "must be 1, got %d" % (mode, backward_passes_per_step))
        if groups is not None or num_groups != 0:
            raise ValueError("groups is a mode='sync' option; mode=%r buckets gradients by "
                             "bucket_bytes" % mode)
    if bucket_bytes is not None and (not isinstance(bucket_bytes, int) or bucket_bytes < 0):
        raise ValueError("bucket_bytes must be an int >= 0, got %r" % (bucket_bytes,))
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups`", DeprecationWarning)
        if groups is None:
            groups = num_groups
    if backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0")
    if op == Adasum:
        raise NotImplementedError("Adasum is not implemented in dadt; use op=Average or op=Sum")
    if op not in (Average, Sum):
        raise ValueError("DistributedOptimizer supports op=Average or op=Sum, got %r" % (op,))

    # A new class that inherits from the optimizer's, so that isinstance() checks keep working
    # and step() is overridden with the allreduce version.
    methods = {k: v for k, v in _DistributedOptimizer.__dict__.items()
               if k not in ("__dict__", "__weakref__")}
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), methods)
    opt = cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
              op, gradient_predivide_factor, groups, sparse_as_dense, mode, model, bucket_bytes)
    opt.defaults = optimizer.defaults
    opt.state.update(optimizer.state)
    return opt
