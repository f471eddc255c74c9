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
"""
from typing import Dict, Optional

from dadt.common.basics import _core


class InFlightNames:
    def __init__(self) -> None:
        self._handles: Dict[str, int] = {}  # name -> the runtime's handle, until synchronize()

    def busy(self, name: str) -> bool:
        """Whether the runtime still runs this rank's collective named ``name``."""
        handle = self._handles.get(name)
        # Completed (either way): the runtime freed the name before it completed the handle.
        return handle is not None and not _core.poll(handle)

    def check(self, name: str) -> None:
        if self.busy(name):
            raise ValueError("a collective named '%s' is already in flight on this rank; names "
                             "must be unique among pending collectives (synchronize the first one, "
                             "or pick another name)" % name)

    def add(self, name: str, handle: int) -> None:
        self._handles[name] = handle

    def handle(self, name: str) -> Optional[int]:
        """The handle last enqueued under ``name`` and not yet synchronized (None if none)."""
        return self._handles.get(name)

    def discard(self, name: str, handle: int) -> None:
        """Forgets ``name`` if it still stands for ``handle`` (the name may have been reused)."""
        if self._handles.get(name) == handle:
            del self._handles[name]

    def clear(self) -> None:
        self._handles.clear()
