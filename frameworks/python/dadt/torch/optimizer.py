"""DistributedOptimizer: averages gradients across ranks while backward is still running."""

import warnings
from contextlib import contextmanager

import torch

from dadt.common.process_sets import global_process_set, set_id
from dadt.common.util import Adasum, Average, Sum
from dadt.torch.compression import WIRE_NAMES, Compression, PowerSGD
from dadt.torch import training_modes

__all__ = ["DistributedOptimizer"]


class _DistributedOptimizer(torch.optim.Optimizer):
    """Methods mixed into a dynamic subclass of the wrapped optimizer's class.

    The training mode is an engine (training_modes.ModeEngine): every mode-dependent decision is
    the engine's, and the engine sees this optimizer only through a training_modes.EngineHost."""

    _dadt_distributed = True  # marks the dynamic subclass (it does not inherit from this class)

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=Average, gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False,
                 mode="sync", model=None, bucket_bytes=None, process_set=global_process_set,
                 knobs=None, gossip=(None, None)):
        super(self.__class__, self).__init__(params)

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
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self._should_synchronize = True

        self.mode = mode
        cls = self.__class__
        host = training_modes.EngineHost(
            self, self._parameter_names, compression,
            base_step=lambda *args: super(cls, self).step(*args),  # the wrapped step, not dadt's
            process_set=process_set)
        self.process_set = process_set
        engine = training_modes.AdasumEngine if op == Adasum else training_modes.ENGINES[mode]
        extra = {}
        if mode in training_modes.PERIODIC_MODES:
            extra = {"knobs": knobs, "compression": WIRE_NAMES.get(compression, "custom")}
        elif mode == "gossip":
            extra = {"graph": gossip[0], "algorithm": gossip[1]}
        self._engine = engine.create(host, all_params, model=model, bucket_bytes=bucket_bytes,
                                     groups=groups, **extra)

    def state_dict(self, *args, **kwargs):
        """The wrapped optimizer's state dict. mode="async" adds the averaged gradients not applied
        yet under ``"dadt_async_pending"`` (waiting for the allreduce in flight), so that a run
        resumed from it applies them at its first step; mode="dear" first completes the deferred
        updates (mathematically the same as completing them before the next forward)."""
        extra = self._engine.checkpoint_state()
        state = super(self.__class__, self).state_dict(*args, **kwargs)
        state.update(extra)
        return state

    def _broadcast_mode_state(self, root_rank):
        """Called by broadcast_optimizer_state on every rank: root rank's pending async average
        becomes every rank's; dear's deferred updates are completed."""
        self._engine.broadcast_state(root_rank)

    def flush(self):
        """Completes every update that step() has scheduled: mode="async" applies the pending
        average of the last step's gradients, mode="dear" its deferred per-bucket updates. The
        modes that send less (local_sgd, diloco, easgd) finish the exchanges in flight and then
        exchange the whole model once more, so that every rank holds the same weights and no
        inner step is lost. Call it at the end of training and before saving or evaluating the
        model. A no-op in mode="sync"."""
        self._engine.flush()

    def _dadt_reset(self):
        """Called by an elastic state's reset (dadt.torch.elastic): the modes that send less drop
        their exchanges in flight and roll back to the last synced weights."""
        self._engine.reset()

    @property
    def bytes_sent(self):
        """Bytes this rank has handed to the model exchanges of mode local_sgd, diloco or easgd
        (after compression; 0 in the other modes)."""
        exchanger = getattr(self._engine, "exchanger", None)
        return exchanger.bytes_sent if exchanger is not None else 0

    def load_state_dict(self, state_dict, *args, **kwargs):
        state_dict = dict(state_dict)
        self._engine.load_checkpoint_state(state_dict.pop(training_modes.PENDING_KEY, None))
        self._engine.load_mode_state(state_dict.pop(training_modes.PERIODIC_KEY, None))
        self._should_synchronize = True
        super(self.__class__, self).load_state_dict(state_dict, *args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        """Changes how many backward passes are accumulated locally before communicating."""
        self._engine.set_backward_passes_per_step(passes)
        self.backward_passes_per_step = passes

    def synchronize(self):
        """Waits for every gradient allreduce and writes the averaged gradients into ``p.grad``.
        First submits the allreduce of every gradient not submitted yet: parameters that got no
        gradient on this rank, or fewer than backward_passes_per_step backward passes.

        mode="async" and mode="dear": the same as flush()."""
        return self._engine.synchronize()

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
        return self._engine.step(closure, self._should_synchronize)

    def zero_grad(self, set_to_none: bool = True):
        self._engine.before_zero_grad(set_to_none)
        return super(self.__class__, self).zero_grad(set_to_none=set_to_none)


def _find_duplicates(items):
    seen, dups = set(), set()
    for item in items:
        (dups if item in seen else seen).add(item)
    return dups


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         groups=None, sparse_as_dense=False, process_set=global_process_set, *,
                         num_groups=0, mode="sync", model=None, bucket_bytes=None,
                         sync_every=None, warmup_steps=None, fragments=None,
                         fragment_sync_delay=None, fragment_update_alpha=None,
                         outer_optimizer=None, moving_rate=None, asynchronous=None,
                         hierarchical=None, graph=None, algorithm=None):
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
                     ``Compression.fp16`` and ``Compression.bf16`` halve the bytes;
                     ``Compression.int8`` (mode="diloco" and "local_sgd" only) quarters
                     them, with error feedback.
        backward_passes_per_step: Number of expected backward passes to perform before calling
                                  step()/synchronize(). This allows accumulating gradients over
                                  multiple mini-batches before reducing and applying them.
        op: The reduction operation to use when combining gradients across different ranks:
            Average (default) or Sum; or Adasum (mode="sync"), which steps the wrapped
            optimizer on this rank's gradients and combines the updates across ranks with
            Adasum, as Horovod does (docs/training-modes.md).
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
        process_set: Process set whose ranks average the gradients (default: every rank);
                     mode="sync" and the modes that send less (which average the model within
                     the set). A rank outside the set trains on its own gradients
                     (as in Horovod); Average divides by the set's size.
        num_groups: Deprecated, use `groups`.
        mode: How gradients are exchanged (docs/training-modes.md):
              "sync" (default): the averaged gradients of this step are applied by step().
              "async" (DADT): step t applies the average of step t-1's gradients, reduced while
              step t ran; step 0 applies nothing, ``flush()`` applies the pending average.
              "dear" (DeAR): reduce-scatter in backward, all-gather before the next forward
              needs the bucket, per-bucket update; needs ``model``. Same weights as "sync".
              The modes that send less (each rank steps on its own gradients; the model is
              exchanged every ``sync_every`` steps; ``flush()`` at the end):
              "local_sgd": the weights are averaged (post-local SGD).
              "diloco": the averaged pseudo-gradient goes through ``outer_optimizer``
              (DiLoCo; Streaming DiLoCo with ``fragments`` and ``fragment_sync_delay``).
              "easgd": elastic averaging towards a centre variable (EASGD, EAMSGD).
              "gossip" (AD-PSGD): no collective at all while training; after each step the
              weights are swapped with one neighbour of ``graph`` in the background and half the
              difference added when the swap returns; ``flush()`` averages over every rank.
              "hogwild": one host only; every rank steps one shared copy of the weights (shared
              memory), lock-free, sending nothing; ``flush()`` is a barrier.
        model: The torch.nn.Module being trained. Required by mode="dear" (its forward
               pre-hooks apply the deferred updates); in mode="async" it sets the layer order.
        bucket_bytes: Bucket size of mode="async" and mode="dear", in bytes. Default: the fusion
                      threshold (``DADT_FUSION_THRESHOLD``, ``dadtrun --fusion-threshold-mb``), or
                      25 MiB when none is set; in mode="dear" across hosts, at most a quarter of
                      the gradients' bytes (at least 256 KiB; not in elastic jobs); 0 puts every
                      parameter in its own bucket. A
                      parameter of bucket_bytes or more is reduced in its own gradient tensor,
                      which then belongs to dadt until its update is applied
                      (docs/training-modes.md).
        sync_every: local_sgd, diloco, easgd: inner steps between two exchanges of the model
                    (required).
        warmup_steps: local_sgd, diloco, easgd: steps of mode="sync" first (default 0).
        fragments: local_sgd, diloco: the model is exchanged in this many parts on a staggered
                   schedule (default 1).
        fragment_sync_delay: diloco: inner steps a fragment's allreduce overlaps before its
                             outer update is applied (default 0; less than
                             sync_every // fragments).
        fragment_update_alpha: diloco: the weights after an outer update are
                               (1 - a) * synced + a * local (default 0).
        outer_optimizer: diloco: a torch optimizer over the model's parameters, or a function of
                         the parameters that makes one (default SGD, lr 0.7, momentum 0.9,
                         Nesterov).
        moving_rate: easgd: alpha (default 0.9 / ranks).
        asynchronous: easgd: the centre's allreduce overlaps the next sync_every steps.
        hierarchical: local_sgd: the ranks of each host average their gradients every step (sync
                      mode within the host); the weights are averaged across hosts every
                      sync_every steps.
        graph: gossip: who a rank may exchange its weights with, one of "complete" (any rank,
               the default), "ring", "exponential", "bipartite" (dadt.common.topology).
        algorithm: gossip: "adpsgd" (the default: AD-PSGD, pairwise averaging with whichever
                   neighbour is free, no rank ever waits for another) or "sgp" (Stochastic
                   Gradient Push with one step of overlap, on the exponential graph).
    """
    if mode not in training_modes.MODES:
        raise ValueError("mode must be one of %s, got %r" % (", ".join(map(repr, training_modes.MODES)),
                                                            mode))
    knobs = {k: v for k, v in dict(
        sync_every=sync_every, warmup_steps=warmup_steps, fragments=fragments,
        fragment_sync_delay=fragment_sync_delay, fragment_update_alpha=fragment_update_alpha,
        outer_optimizer=outer_optimizer, moving_rate=moving_rate,
        asynchronous=asynchronous, hierarchical=hierarchical).items() if v is not None}
    if knobs and mode not in training_modes.PERIODIC_MODES:
        raise ValueError("%s: option(s) of the modes that send less (%s), not of mode=%r"
                         % (", ".join(sorted(knobs)), ", ".join(training_modes.PERIODIC_MODES),
                            mode))
    if (graph is not None or algorithm is not None) and mode != "gossip":
        raise ValueError("%s= is an option of mode='gossip', not of mode=%r"
                         % ("graph" if graph is not None else "algorithm", mode))
    if mode == "gossip":
        if algorithm is not None and algorithm not in training_modes.GOSSIP_ALGORITHMS:
            raise ValueError("algorithm must be one of %s, got %r"
                             % (", ".join(map(repr, training_modes.GOSSIP_ALGORITHMS)), algorithm))
        if graph is not None and graph not in training_modes.GOSSIP_GRAPHS:
            raise ValueError("graph must be one of %s, got %r"
                             % (", ".join(map(repr, training_modes.GOSSIP_GRAPHS)), graph))
        if compression is not Compression.none:
            raise ValueError("mode='gossip' swaps the weights themselves; compression= is not "
                             "supported")
    if compression is Compression.int8 and mode not in training_modes.PERIODIC_MODES:
        raise ValueError("Compression.int8 is for mode='diloco' and mode='local_sgd' (their "
                         "exchanges go through an allgather); mode=%r allreduces, which cannot "
                         "sum int8" % mode)
    PowerSGD.check_compression(compression, mode, mode in training_modes.PERIODIC_MODES)
    training_modes.ENGINES[mode].check_options(
        model=model, backward_passes_per_step=backward_passes_per_step,
        groups=groups if groups is not None else (num_groups or None))
    if set_id(process_set) != 0 and mode in ("async", "dear"):
        raise ValueError("DistributedOptimizer(mode=%r) reduces over every rank; process_set= "
                         "needs mode=\"sync\" or one of the modes that send less" % mode)
    if model is not None and not isinstance(model, torch.nn.Module):
        raise ValueError("model must be a torch.nn.Module, got %s" % type(model).__name__)
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
        if mode != "sync":
            raise ValueError("op=Adasum combines each step's updates (mode=\"sync\"); mode=%r "
                             "averages, use op=Average" % mode)
        if compression is not Compression.none:
            raise ValueError("op=Adasum combines the updates in full precision; compression= is "
                             "not supported with it")
        if set_id(process_set) != 0:
            raise ValueError("op=Adasum runs on the global process set only")
    elif op not in (Average, Sum):
        raise ValueError("DistributedOptimizer supports op=Average, Sum or Adasum, got %r" % (op,))
    if op != Average and (mode in training_modes.PERIODIC_MODES or mode == "gossip"):
        raise ValueError("mode=%r averages the model across ranks; op= must be Average" % mode)

    # A new class that inherits from the optimizer's, so that isinstance() checks keep working
    # and step() is overridden with the allreduce version.
    methods = {k: v for k, v in _DistributedOptimizer.__dict__.items()
               if k not in ("__dict__", "__weakref__")}
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), methods)
    opt = cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
              op, gradient_predivide_factor, groups, sparse_as_dense, mode, model, bucket_bytes,
              process_set, knobs, (graph, algorithm))
    opt.defaults = optimizer.defaults
    opt.state.update(optimizer.state)
    return opt
