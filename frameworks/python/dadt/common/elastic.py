"""Elastic training, framework-agnostic part: ``State``, ``ObjectState``, the ``run`` loop and
``HostsUpdatedInterrupt``, with Horovod's names (docs/elastic.md).

A training function wrapped by a framework's ``run`` (``dadt.torch.elastic.run``, ...) is called
with a ``State``; what the state holds is committed with ``state.commit()`` and comes back after a
reset:

1. A peer died: a collective raised ``DadtInternalError``. Every rank restores its last commit,
   shuts the runtime down and init()s into the launcher's next round; the state is then synced from
   the rank holding the newest commit (normally the new rank 0, on the oldest surviving host).
2. Hosts were added or removed by discovery: ``check_host_updates()`` (called by ``commit()``)
   raises ``HostsUpdatedInterrupt`` on every rank at once; the state is current (it was just
   saved), so it is not restored.
3. This worker was removed: init() raises ``WorkerRemovedError``, a ``SystemExit`` with code 0.

Where the sync after an init() takes the state from is agreed by all ranks of the new world
(``State.sync_after_init``), never decided by one rank alone: skipped only when every rank may skip
it; else from the rank holding the newest commit; else, when every original worker was replaced,
from the elastic checkpoint the user named (dadt.common.elastic_checkpoint).
"""

import copy
import functools
import os
import sys
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

from dadt.common import elastic_checkpoint as ckpt
from dadt.common.elastic_checkpoint import ElasticCheckpointError  # noqa: F401 - re-exported
from dadt.common.exceptions import DadtInternalError

_ELASTIC_ENV = "DADT_ELASTIC"
# The name of ObjectState's plain objects in a state (and its checkpoint): not a Python identifier,
# so it cannot clash with a keyword argument naming a model or a sampler.
OBJECTS = "<objects>"


_CHECKPOINT_ERROR, _STORE_ERROR = "checkpoint", "store"


class LauncherUnreachableError(RuntimeError):
    """Raised by ``check_host_updates()`` (and ``commit()``) on every rank when the launcher's
    store did not answer rank 0 within DADT_START_TIMEOUT seconds: dadtrun is gone or wedged, so
    the job can no longer learn of host changes. Not a ``DadtInternalError``: ``run`` does not
    try a reset (which needs the same store) but ends the worker with this message."""


class HostsUpdatedInterrupt(RuntimeError):
    """Raised by ``check_host_updates()`` on every rank at once when the launcher's host set
    changed. ``skip_sync``: this rank's state is already that of the other survivors, so it needs
    no sync (the ranks still agree on it after the reset)."""

    def __init__(self, skip_sync: bool = False):
        super().__init__("the job's hosts were updated")
        self.skip_sync = skip_sync


def is_elastic() -> bool:
    """Whether this process is an elastic worker (started by ``dadtrun --min-np/--max-np``)."""
    return os.environ.get(_ELASTIC_ENV, "") == "1"


def _core():
    from dadt import _core as core  # imported late: unit tests run without a built runtime
    return core


def host_updates() -> Tuple[bool, bool]:
    """This rank's view, as (pending, removals_only): a host-update notice newer than the one read
    at the last init(), or a round newer than the one joined; and whether every such notice only
    removed hosts (then the workers that stay all hold the committed state and may skip the sync).
    (False, False) when the process is not an elastic worker."""
    if not is_elastic():
        return False, False
    from dadt.common.basics import call  # dadt's exception types (DadtInternalError) for failures
    core = _core()
    latest_round, notice = call(core.elastic_updates)
    baseline = core.elastic_notice_at_init()
    if notice == baseline and latest_round <= core.elastic_round():
        return False, False
    kinds = [call(core.elastic_notice_kind, seq) for seq in range(baseline + 1, notice + 1)]
    return True, bool(kinds) and all(kind == "removed" for kind in kinds)


class StateHandler:
    """One part of a State (a model, an optimizer, a list of variables, the plain objects): what a
    commit saves of it (``saved``, a picklable deep copy: it is also what the elastic checkpoint
    holds), put back by ``restore`` and broadcast from the sync's root rank by ``sync``.

    Subclasses define ``capture`` (a deep copy of the value's state) and ``apply`` (puts such a
    copy back); ``sync`` broadcasts ``capture()`` as an object unless a subclass has a faster
    broadcast (tensors); ``reset`` runs after each new world is up (samplers re-partition)."""

    name = ""  # set by State.add_handler; names the handler's collectives and checkpoint entry

    def __init__(self, value: Any):
        self.value = value
        self.saved = self.capture()

    def capture(self) -> Any:
        raise NotImplementedError()

    def apply(self, saved: Any) -> None:
        raise NotImplementedError()

    def save(self) -> None:
        self.saved = self.capture()

    def restore(self) -> None:
        self.apply(self.saved)

    def sync(self, root_rank: int, bcast_object: Callable) -> None:
        self.apply(bcast_object(self.capture(), root_rank=root_rank,
                                name="dadt.elastic." + self.name))

    def reset(self) -> None:
        pass


class State:
    """State of a training job, committed in memory (and to the elastic checkpoint, when one is
    named) and synced after a reset. What it holds is a list of StateHandlers (``add_handler``);
    save, restore, sync and reset apply to each in the order they were added.

    Args:
      bcast_object: ``bcast_object(obj, root_rank=0, name=None)`` of the framework.
      get_rank: the framework's ``rank``.
      allgather_object: the framework's ``allgather_object``, used to agree on the sync's source
        (without it, rank 0's view decides and the sync is never skipped).
    """

    def __init__(self, bcast_object: Callable, get_rank: Callable[[], int],
                 allgather_object: Optional[Callable] = None):
        self.__dict__.setdefault("_handlers", {})
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._allgather_object = allgather_object
        self._reset_callbacks: List[Callable[[], None]] = []
        self._commit_seq = 0  # commits made or synced into this process; 0: none yet
        self._sync_root = 0
        self._checkpoint_path = ckpt.checkpoint_path_from_env()

    def add_handler(self, name: str, handler: StateHandler) -> None:
        """Adds (or replaces) the part ``name`` of this state."""
        handler.name = name
        self.__dict__.setdefault("_handlers", {})[name] = handler

    def register_reset_callbacks(self, callbacks: List[Callable[[], None]]) -> None:
        """Callbacks run (in order) after each reset, once the new world is up (``size()`` and
        ``rank()`` are the new ones) and before the state is synced from the new rank 0, as in
        Horovod: for example to scale the learning rate with the new ``size()``."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Saves the state (what a reset restores), writes it to the elastic checkpoint on rank 0
        when one is named, and checks for host updates, which raises ``HostsUpdatedInterrupt`` on
        every rank alike. Call it every few batches: a reset after a peer's death redoes
        everything since the last commit."""
        self.save()
        self._commit_seq += 1
        write_error = None
        if self._checkpoint_path and self._rank() == 0:
            try:
                ckpt.write_checkpoint(self._checkpoint_path, self._commit_seq, self._snapshot())
            except ckpt.ElasticCheckpointError as e:
                write_error = (_CHECKPOINT_ERROR, str(e))
        self._check_host_updates(write_error)

    def check_host_updates(self) -> None:
        """Raises ``HostsUpdatedInterrupt`` on every rank when the launcher published a host
        update; rank 0 reads it and broadcasts its answer, so all ranks decide alike. Its
        ``skip_sync`` is True when the updates only removed hosts; whether the sync is then
        skipped is agreed again in the new world (a worker that joined meanwhile needs it).

        Never blocks for long: rank 0's read of the launcher's store fails after
        DADT_START_TIMEOUT seconds without an answer, and then every rank raises
        ``LauncherUnreachableError`` with rank 0's message."""
        self._check_host_updates(None)

    def _check_host_updates(self, error: Optional[Tuple[str, str]]) -> None:
        # Rank 0's failures (writing the checkpoint, reading the store) ride on the broadcast of
        # what it saw: every rank raises the same error.
        if not is_elastic() and not self._checkpoint_path:
            return
        seen: Tuple[bool, bool, Optional[Tuple[str, str]]] = (False, False, error)
        if self._rank() == 0 and error is None:
            try:
                seen = host_updates() + (None,)
            except DadtInternalError as e:  # the store did not answer (elastic_membership.h)
                seen = (False, False, (_STORE_ERROR, "check_host_updates on rank 0: %s" % e))
        pending, removals_only, error = self._bcast_object(seen, root_rank=0,
                                                           name="dadt.elastic.host_updates")
        if error:
            kind, message = error
            raise (LauncherUnreachableError if kind == _STORE_ERROR
                   else ckpt.ElasticCheckpointError)(message)
        if pending:
            raise HostsUpdatedInterrupt(skip_sync=removals_only)

    def sync_after_init(self, may_skip_sync: bool) -> None:
        """The sync after an init(), from the source all ranks agree on (elastic_checkpoint's
        steps): skipped only when every rank may skip it; else from the rank holding the newest
        commit; else, when no live rank holds one, from the elastic checkpoint (loaded on rank 0)
        if it exists; else from rank 0."""
        plan = self._agree(may_skip_sync)
        if plan.kind == "skip":
            return
        if plan.kind == "checkpoint":
            plan = ckpt.SyncPlan("rank", 0, self._load_checkpoint(plan.checkpoint_path))
        self._sync_root = plan.root_rank
        try:
            self.sync()
        finally:
            self._sync_root = 0
        self._commit_seq = plan.commit_seq

    def _agree(self, may_skip_sync: bool) -> ckpt.SyncPlan:
        mine = ckpt.RankView(bool(may_skip_sync), self._commit_seq, self._checkpoint_path)
        if self._allgather_object is not None:
            views = self._allgather_object(tuple(mine), name="dadt.elastic.sync_plan")
        else:
            views = [self._bcast_object(tuple(mine._replace(may_skip_sync=False)), root_rank=0,
                                        name="dadt.elastic.sync_plan")]
        return ckpt.choose_source([ckpt.RankView(*v) for v in views])

    def _load_checkpoint(self, path: str) -> int:
        """Rank 0 loads ``path`` when it exists; every rank gets its commit sequence (0: none) or
        raises the same ElasticCheckpointError."""
        outcome: Tuple[int, Optional[str]] = (0, None)
        if self._rank() == 0 and os.path.exists(path):
            try:
                seq, snapshot = ckpt.read_checkpoint(path, list(self._handlers))
                for name, handler in self._handlers.items():
                    handler.saved = snapshot[name]
                    handler.restore()
                outcome = (seq, None)
                print("dadt: elastic: resuming from commit %d in %s" % (seq, path),
                      file=sys.stderr, flush=True)
            except Exception as e:  # noqa: BLE001 - sent to every rank, raised there
                outcome = (0, str(e) if isinstance(e, ckpt.ElasticCheckpointError) else
                           "cannot restore the elastic checkpoint %s: %s: %s"
                           % (path, type(e).__name__, e))
        seq, error = self._bcast_object(outcome, root_rank=0, name="dadt.elastic.checkpoint")
        if error:
            raise ckpt.ElasticCheckpointError(error)
        return seq

    def _snapshot(self) -> Dict[str, Any]:
        return {name: handler.saved for name, handler in self._handlers.items()}

    def save(self) -> None:
        for handler in self._handlers.values():
            handler.save()

    def restore(self) -> None:
        for handler in self._handlers.values():
            handler.restore()

    def sync(self) -> None:
        """Every part takes the root rank's value (rank 0 unless ``sync_after_init`` chose
        another), which then counts as saved."""
        for handler in self._handlers.values():
            handler.sync(self._sync_root, self._bcast_object)
            handler.save()

    def reset(self) -> None:
        """Called after the new world is up and before the sync (e.g. samplers re-partition)."""
        for handler in self._handlers.values():
            handler.reset()


class _ObjectsHandler(StateHandler):
    """The plain objects of an ObjectState, kept as its attributes."""

    def __init__(self, owner: "ObjectState", initial: Dict[str, Any]):
        self._owner = owner
        self.value = owner
        self.saved = initial
        self.restore()  # the attributes start as copies of the keyword arguments

    def capture(self) -> Any:
        return {k: copy.deepcopy(getattr(self._owner, k)) for k in self.saved}

    def apply(self, saved: Any) -> None:
        for k, v in saved.items():
            setattr(self._owner, k, copy.deepcopy(v))

    def sync(self, root_rank: int, bcast_object: Callable) -> None:
        if self.saved:  # Horovod's ObjectState broadcasts the saved values
            self.saved = bcast_object(self.saved, root_rank=root_rank,
                                      name="dadt.elastic.object_state")
            self.restore()


class ObjectState(State):
    """State of plain Python objects, given as keyword arguments and kept as attributes:
    ``ObjectState(bcast_object, get_rank, epoch=0, batch=0)`` then ``state.epoch += 1``.
    ``save`` deep-copies them, ``restore`` puts the copies back, ``sync`` broadcasts the root
    rank's saved values to every rank. Subclasses add their handlers before calling this
    constructor; the objects come last."""

    def __init__(self, bcast_object: Callable, get_rank: Callable[[], int],
                 allgather_object: Optional[Callable] = None, **kwargs: Any):
        super().__init__(bcast_object, get_rank, allgather_object)
        self.add_handler(OBJECTS, _ObjectsHandler(self, dict(kwargs)))


# The exit code of a worker whose error no other host would avoid (the elastic checkpoint cannot be
# written or read): dadtrun's elastic driver ends the job on it (dadtrun/elastic_driver.h,
# kJobFatalExitCode) rather than replacing the worker.
JOB_FATAL_EXIT_CODE = 86


def run_fn(func: Callable, reset: Callable[[], None]) -> Callable:
    """Wraps ``func(state, *args, **kwargs)`` in the elastic loop (module docstring, steps 1-3).
    ``reset`` shuts the runtime down and init()s it again (the framework's). Returns what ``func``
    returns. A failed init() into a new round (a peer of that round died while connecting) is
    retried; one that joined no round (the elastic timeout passed) is raised."""

    @functools.wraps(func)
    def wrapper(state: State, *args: Any, **kwargs: Any) -> Any:
        may_skip_sync = False
        while True:
            try:
                state.sync_after_init(may_skip_sync)
                return func(state, *args, **kwargs)
            except ckpt.ElasticCheckpointError:
                # The checkpoint's filesystem is the job's: no other host would write it, so the
                # job ends now (dadtrun's elastic driver stops on this code) instead of every host
                # being blacklisted in turn until --elastic-timeout.
                traceback.print_exc()
                print("dadt: the elastic checkpoint cannot be used; ending the job (exit code %d)"
                      % JOB_FATAL_EXIT_CODE, file=sys.stderr, flush=True)
                raise SystemExit(JOB_FATAL_EXIT_CODE) from None
            except DadtInternalError:
                state.restore()
                may_skip_sync = False
            except HostsUpdatedInterrupt as e:
                may_skip_sync = e.skip_sync
            _reset_until_joined(reset)
            state.reset()
            state.on_reset()

    return wrapper


def _reset_until_joined(reset: Callable[[], None]) -> None:
    while True:
        joined_before = _joined_round()
        try:
            reset()
            return
        except DadtInternalError as e:
            # Joined a round whose world then failed to connect: the launcher publishes another.
            joined = _joined_round()
            if joined == joined_before:
                raise
            print("dadt: elastic: round %d did not form (%s); waiting for the next round"
                  % (joined, str(e).splitlines()[0][:300] if str(e) else type(e).__name__), file=sys.stderr, flush=True)


def _joined_round() -> int:
    if not is_elastic():
        return 0
    return _core().elastic_round()
