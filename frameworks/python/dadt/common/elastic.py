"""Elastic training, framework-agnostic part: ``State``, ``ObjectState``, the ``run`` loop and
``HostsUpdatedInterrupt``, with Horovod's names (docs/elastic.md).

A training function wrapped by a framework's ``run`` (``dadt.torch.elastic.run``, ...) is called
with a ``State``; what the state holds is committed with ``state.commit()`` and comes back after a
reset:

1. A peer died: a collective raised ``DadtInternalError``. Every rank restores its last commit,
   shuts the runtime down and init()s into the launcher's next round; the state is then synced from
   the new rank 0 (the oldest surviving host).
2. Hosts were added or removed by discovery: ``check_host_updates()`` (called by ``commit()``)
   raises ``HostsUpdatedInterrupt`` on every rank at once; the state is current (it was just
   saved), so it is not restored.
3. This worker was removed: init() raises ``WorkerRemovedError``, a ``SystemExit`` with code 0.

Whether the sync after a reset may be skipped is agreed by all ranks of the new world (skipped only
when every rank may skip it), never decided by one rank alone.
"""

import copy
import functools
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

from dadt.common.exceptions import DadtInternalError

_ELASTIC_ENV = "DADT_ELASTIC"


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
    core = _core()
    latest_round, notice = core.elastic_updates()
    baseline = core.elastic_notice_at_init()
    if notice == baseline and latest_round <= core.elastic_round():
        return False, False
    kinds = [core.elastic_notice_kind(seq) for seq in range(baseline + 1, notice + 1)]
    return True, bool(kinds) and all(kind == "removed" for kind in kinds)


class State:
    """State of a training job, committed in memory and synced after a reset.

    Args:
      bcast_object: ``bcast_object(obj, root_rank=0, name=None)`` of the framework.
      get_rank: the framework's ``rank``.
      allgather_object: the framework's ``allgather_object``, used to agree on skipping the sync.
    """

    def __init__(self, bcast_object: Callable, get_rank: Callable[[], int],
                 allgather_object: Optional[Callable] = None):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._allgather_object = allgather_object
        self._reset_callbacks: List[Callable[[], None]] = []

    def register_reset_callbacks(self, callbacks: List[Callable[[], None]]) -> None:
        """Callbacks run (in order) after each reset, once the new world is up and synced: for
        example to scale the learning rate with the new ``size()``."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Saves the state (what a reset restores) and checks for host updates, which raises
        ``HostsUpdatedInterrupt`` on every rank alike. Call it every few batches: a reset after a
        peer's death redoes everything since the last commit."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raises ``HostsUpdatedInterrupt`` on every rank when the launcher published a host
        update; rank 0 reads it and broadcasts its answer, so all ranks decide alike. Its
        ``skip_sync`` is True when the updates only removed hosts; whether the sync is then
        skipped is agreed again in the new world (a worker that joined meanwhile needs it)."""
        if not is_elastic():
            return
        seen = host_updates() if self._rank() == 0 else (False, False)
        pending, removals_only = self._bcast_object(seen, root_rank=0,
                                                    name="dadt.elastic.host_updates")
        if pending:
            raise HostsUpdatedInterrupt(skip_sync=removals_only)

    def agree_skip_sync(self, may_skip: bool) -> bool:
        """True only when every rank may skip the sync (one collective every rank takes part in)."""
        if self._allgather_object is None:
            return False
        return all(self._allgather_object(bool(may_skip), name="dadt.elastic.skip_sync"))

    def save(self) -> None:
        raise NotImplementedError()

    def restore(self) -> None:
        raise NotImplementedError()

    def sync(self) -> None:
        raise NotImplementedError()

    def reset(self) -> None:
        """Called after the new world is up and before the sync (e.g. samplers re-partition)."""


class ObjectState(State):
    """State of plain Python objects, given as keyword arguments and kept as attributes:
    ``ObjectState(bcast_object, get_rank, epoch=0, batch=0)`` then ``state.epoch += 1``.
    ``save`` deep-copies them, ``restore`` puts the copies back, ``sync`` broadcasts rank 0's
    saved values to every rank."""

    def __init__(self, bcast_object: Callable, get_rank: Callable[[], int],
                 allgather_object: Optional[Callable] = None, **kwargs: Any):
        self._saved_state: Dict[str, Any] = kwargs
        self._set_attrs()
        super().__init__(bcast_object, get_rank, allgather_object)

    def save(self) -> None:
        self._saved_state = {k: copy.deepcopy(getattr(self, k)) for k in self._saved_state}

    def restore(self) -> None:
        self._set_attrs()

    def sync(self) -> None:
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state, root_rank=0,
                                                   name="dadt.elastic.object_state")
            self._set_attrs()

    def _set_attrs(self) -> None:
        for k, v in self._saved_state.items():
            setattr(self, k, copy.deepcopy(v))


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
                if not state.agree_skip_sync(may_skip_sync):
                    state.sync()
                return func(state, *args, **kwargs)
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
        except DadtInternalError:
            # Joined a round whose world then failed to connect: the launcher publishes another.
            if _joined_round() == joined_before:
                raise


def _joined_round() -> int:
    if not is_elastic():
        return 0
    return _core().elastic_round()
