"""Which collective names a front end may not use again yet, with Horovod's rule.

A name is taken while the runtime still runs the collective of that name on this rank, not until
its handle is synchronized: Horovod frees it when the collective completes, and its own tests
leave handles of completed collectives unsynchronized and then reuse their names. The runtime
refuses a taken name itself (runtime/core/tensor_queue.h, freed before the handle completes); the
front ends ask here first so that a grouped collective can be refused before any member is
enqueued (a refused member would leave the ones before it waiting for a group that never
completes), with the same message.

    names = InFlightNames()
    names.check(name)            # ValueError when the runtime still runs a collective `name`
    names.add(name, handle)      # after enqueueing it
    names.discard(name, handle)  # when synchronize() releases the handle

Names are per process set, as in the runtime: pass ``key(name, set_id)`` for a collective of
another set than the global one, so that two sets may run the same name at once.
"""
from typing import Dict, Hashable, Optional, Tuple, Union

from dadt.common.basics import _core


Key = Union[str, Tuple[int, str]]


def key(name: str, set_id: int = 0) -> Key:
    """The in-flight key of collective ``name`` of process set ``set_id`` (the name itself for
    the global set)."""
    return (set_id, name) if set_id else name


def _describe(name: Hashable) -> str:
    if isinstance(name, tuple):
        return "'%s' (process set %d)" % (name[1], name[0])
    return "'%s'" % name


class InFlightNames:
    def __init__(self) -> None:
        self._handles: Dict[Key, int] = {}  # key -> the runtime's handle, until synchronize()

    def busy(self, name: Key) -> bool:
        """Whether the runtime still runs this rank's collective named ``name``."""
        handle = self._handles.get(name)
        # Completed (either way): the runtime freed the name before it completed the handle.
        return handle is not None and not _core.poll(handle)

    def check(self, name: Key) -> None:
        if self.busy(name):
            raise ValueError("a collective named %s is already in flight on this rank; names "
                             "must be unique among pending collectives (synchronize the first one, "
                             "or pick another name)" % _describe(name))

    def add(self, name: Key, handle: int) -> None:
        self._handles[name] = handle

    def handle(self, name: str) -> Optional[int]:
        """The handle last enqueued under ``name`` and not yet synchronized (None if none)."""
        return self._handles.get(name)

    def discard(self, name: Key, handle: int) -> None:
        """Forgets ``name`` if it still stands for ``handle`` (the name may have been reused)."""
        if self._handles.get(name) == handle:
            del self._handles[name]

    def clear(self) -> None:
        self._handles.clear()
