"""The "hogwild" training mode: the ranks of one host update one shared copy of the weights, with
no lock and no communication (Hogwild!, Recht, Re, Wright and Niu, NIPS 2011; the asynchronous
shared-parameter training of the distributed-TF guide; torch's mnist_hogwild example, here across
dadt's ranks instead of torch.multiprocessing's children).

    x: the weights, one copy in a shared-memory segment that every rank maps
    rank i, at its own pace, with no lock:
        g_i = grad f_i(x_read)          x_read: the shared weights as rank i's forward read them
        x  <- InnerOpt_i(x, g_i)        in place; InnerOpt_i's state (momentum, Adam's moments,
                                        step count) is rank i's own, as are its gradients

Sends nothing while training. Collectives: three object exchanges when the optimizer is built
(every rank's host and parameter layout, the segment's name, every rank's "mapped"), one barrier
at the first step() and one per flush(). Staleness: no bound. Between a rank's read of x and its
write, the other n - 1 ranks write theirs (about n - 1 updates per step time); a read may mix
components from before and after another rank's update; and two ranks updating one component at
the same instant may lose one of the writes (there is no atomic float add on CPUs). Hogwild!'s
analysis tolerates such conflicts when updates are sparse; on dense models with few ranks they are
rare (in 20 runs of 100 lockstep steps on a 64-element vector, 2 ranks lost at most 1% of a
component's updates, 4 ranks 0.5%) and digits trains as well as in sync mode.

Set-up, collective on every rank of the job (rank 0's parameters become everyone's):

    1. allgather every rank's host (local_size(), the hostname) and its parameter layout (names,
       shapes, dtypes, devices). Ranks on more than one host, different layouts, or parameters
       outside CPU memory: every rank raises the same error, naming the ranks.
    2. rank 0 creates a file in /dev/shm (O_EXCL, mode 0600, reserved with posix_fallocate so a
       full tmpfs fails here rather than with SIGBUS later) under a name of its pid and 64 random
       bits, copies its parameters into it, each at a 64-byte aligned offset, and broadcasts the
       name (or its error).
    3. the other ranks map the file; all allgather whether they could; then every rank unlinks
       the name (the first one succeeds; rank 0 also when anything failed), so it is gone when
       the optimizer is built and nothing stays in /dev/shm whatever happens later: the memory
       lives as long as a process maps it.
    4. every rank points each parameter's .data at its view of the segment (p stays the same
       Parameter object, so the wrapped optimizer, its state and the model's names stay valid).

Ranks on several hosts are refused, not averaged across hosts: with one copy per host and some
averaging between copies, the mode would be local_sgd with hierarchical=True over a different
intra-host rule; that job is better served by local_sgd or sync.
"""

import mmap
import os
import secrets
import socket
import tempfile
from typing import List

import torch

from dadt.common.basics import local_size, rank, size
from dadt.common.elastic import is_elastic
from dadt.common.process_sets import set_id
from dadt.common.util import Average
from dadt.torch.async_collectives import barrier
from dadt.torch.functions import allgather_object, broadcast_object
from dadt.torch.training_modes.engine import ModeEngine

# Each parameter starts on a cache line of its own: no false sharing between two parameters
# updated by two ranks at once, and any dtype's alignment.
ALIGN = 64
SEGMENT_PREFIX = "dadt-hogwild-"


def segment_dir() -> str:
    """Where the segment's file is made: /dev/shm (memory, never disk) where there is one."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def layout(params: List[torch.Tensor]):
    """(offsets, total bytes) of `params` packed in one segment, each at an ALIGN-byte offset."""
    offsets, at = [], 0
    for p in params:
        offsets.append(at)
        at += -(-p.numel() * p.element_size() // ALIGN) * ALIGN
    return offsets, max(at, ALIGN)


def create_segment(path: str, nbytes: int) -> torch.Tensor:
    """A new shared file of `nbytes` at `path` (refused if the name exists), mapped as uint8."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, nbytes)  # ENOSPC now, not SIGBUS on a later write
            else:
                os.ftruncate(fd, nbytes)
            return _map(fd, nbytes)
        except BaseException:
            os.unlink(path)
            raise
    finally:
        os.close(fd)


def open_segment(path: str, nbytes: int) -> torch.Tensor:
    """The existing shared file at `path` (never created here), mapped as uint8."""
    fd = os.open(path, os.O_RDWR)
    try:
        found = os.fstat(fd).st_size
        if found != nbytes:
            raise OSError("%s holds %d bytes, expected %d" % (path, found, nbytes))
        return _map(fd, nbytes)
    finally:
        os.close(fd)


def _map(fd: int, nbytes: int) -> torch.Tensor:
    # The tensor holds the mmap's buffer export, so the mapping lives as long as any view of it.
    return torch.frombuffer(mmap.mmap(fd, nbytes), dtype=torch.uint8)


def views(segment: torch.Tensor, params: List[torch.Tensor], offsets: List[int]):
    """Each parameter's place in the segment: a tensor of its shape and dtype."""
    return [segment[o:o + p.numel() * p.element_size()].view(p.dtype).view(p.shape)
            for p, o in zip(params, offsets)]


class HogwildEngine(ModeEngine):
    """Every rank of the host steps one shared copy of the weights, lock-free (module docstring)."""

    name = "hogwild"

    @classmethod
    def check_options(cls, *, model, backward_passes_per_step, groups):
        if groups is not None:
            raise ValueError("groups is a mode='sync' option; mode='hogwild' reduces no gradient")

    @classmethod
    def create(cls, host, params, *, model, bucket_bytes, groups):
        if bucket_bytes is not None:
            raise ValueError("bucket_bytes is an option of mode='async' and mode='dear'; "
                             "mode='hogwild' reduces no gradient")
        if host.process_set is not None and set_id(host.process_set) != 0:
            raise ValueError("mode='hogwild' shares the weights among every rank of the job; "
                             "process_set= is not supported")
        if host.reduction() != (Average, 1.0, 1.0):
            raise ValueError("mode='hogwild' reduces no gradient; op= and "
                             "gradient_predivide_factor= do not apply")
        probe = torch.zeros(1)
        if host.compress(probe)[0] is not probe:
            raise ValueError("mode='hogwild' sends nothing; compression= is not supported")
        if is_elastic():
            raise ValueError("mode='hogwild' is not supported in elastic jobs: the segment is "
                             "mapped once, by the ranks of the first world, and a later world "
                             "may span other hosts; use mode='sync' or a mode that sends less")
        return cls(host, params)

    def __init__(self, host, params: List[torch.Tensor]):
        self._host = host
        self._params = list(params)
        self._name = "dadt.hogwild.%s" % host.name_of(self._params[0])
        self.segment_path = _share(self._params, self._name, host.name_of)
        self._addresses = [p.data_ptr() for p in self._params]
        self._started = False

    # -- the ModeEngine interface ----------------------------------------------------------------
    def step(self, closure, should_synchronize):
        if not self._started:
            # A broadcast_parameters() after the optimizer was built rewrites the segment on every
            # non-root rank (with the values it holds); no rank may update it before all are done.
            barrier()
            self._started = True
        result = self._host.base_step(closure)
        self._check_shared()
        return result

    def synchronize(self):
        """No gradient is averaged: nothing to wait for (`synchronize(); clip;
        with skip_synchronize(): step()` clips this rank's own gradients)."""

    def flush(self):
        """A barrier: once it returns on a rank, every rank's steps before its flush() are in the
        shared weights."""
        barrier()
        self._started = True

    def set_backward_passes_per_step(self, passes):
        """Accumulation is autograd's own (the gradients are this rank's): any count is fine."""

    def _check_shared(self):
        for p, address in zip(self._params, self._addresses):
            if p.data_ptr() != address:
                raise RuntimeError(
                    "mode='hogwild': parameter %r no longer lives in the shared segment (its "
                    "tensor was replaced: p.data = ..., model.to(), an optimizer that does not "
                    "update in place); its updates would stay on this rank"
                    % self._host.name_of(p))


def _share(params, name, name_of) -> str:
    """Steps 1-4 of the module docstring; returns the segment's (already unlinked) path."""
    me = {"host": os.environ.get("DADT_HOSTNAME") or socket.gethostname(),
          "local_size": local_size(),
          "layout": [(name_of(p), tuple(p.shape), str(p.dtype)) for p in params],
          "problem": next(("parameter %r is on %s; the segment is CPU memory"
                           % (name_of(p), p.device) for p in params if p.device.type != "cpu"),
                          None)}
    everyone = allgather_object(me, name=name + ".check")
    _refuse_unless_one_host(everyone)
    if any(r["layout"] != everyone[0]["layout"] for r in everyone):
        differ = [r for r, e in enumerate(everyone) if e["layout"] != everyone[0]["layout"]]
        raise ValueError("mode='hogwild' maps every rank's parameters onto rank 0's: the names, "
                         "shapes or dtypes of rank(s) %s differ from rank 0's" % _ranks(differ))
    problems = ["rank %d: %s" % (r, e["problem"]) for r, e in enumerate(everyone) if e["problem"]]
    if problems:
        raise ValueError("mode='hogwild' cannot share the parameters: " + "; ".join(problems))

    offsets, nbytes = layout(params)
    path, segment, error, everyone_tried = None, None, None, False
    try:
        if rank() == 0:
            try:
                path = os.path.join(segment_dir(), "%s%d-%s" % (SEGMENT_PREFIX, os.getpid(),
                                                               secrets.token_hex(8)))
                segment = create_segment(path, nbytes)
                with torch.no_grad():
                    for p, v in zip(params, views(segment, params, offsets)):
                        v.copy_(p)
            except OSError as e:
                error = "rank 0 could not create %d bytes of shared memory in %s: %s" % (
                    nbytes, segment_dir(), e)
            path, error = broadcast_object((path, error), 0, name=name + ".segment")
        else:
            path, error = broadcast_object(None, 0, name=name + ".segment")
        if error is not None:
            raise RuntimeError("mode='hogwild': " + error)
        if rank() != 0:
            try:
                segment = open_segment(path, nbytes)
            except OSError as e:
                error = "rank %d: %s" % (rank(), e)
        errors = [e for e in allgather_object(error, name=name + ".mapped") if e is not None]
        everyone_tried = True
    finally:
        # Rank 0 always (it made the file); the others once every rank has tried to map it, so
        # that the name is gone on every rank when the optimizer is built.
        if path is not None and (rank() == 0 or everyone_tried):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    if errors:
        raise RuntimeError("mode='hogwild': a rank could not map rank 0's segment %s (a host "
                           "that does not share rank 0's /dev/shm?): %s"
                           % (path, "; ".join(errors)))
    for p, v in zip(params, views(segment, params, offsets)):
        p.data = v
    return path


def _refuse_unless_one_host(everyone):
    """Every rank raises the same error unless every rank's local_size() is size(). The hostnames
    only help the reader: two ranks on one machine placed as two hosts have one hostname."""
    n = size()
    if all(e["local_size"] == n for e in everyone):
        return
    sizes, hosts = {}, {}
    for r, e in enumerate(everyone):
        if e["local_size"] != n:
            sizes.setdefault(e["local_size"], []).append(r)
        hosts.setdefault(e["host"], []).append(r)
    raise ValueError(
        "mode='hogwild' shares one copy of the weights in one host's memory, but the ranks are "
        "not all on one host: local_size() is %s, not size() = %d (hostnames: %s). Across hosts "
        "use mode='sync', or mode='local_sgd' with hierarchical=True (sync within each host)"
        % ("; ".join("%d on rank(s) %s" % (ls, _ranks(rs)) for ls, rs in sorted(sizes.items())),
           n, "; ".join("%s: rank(s) %s" % (h, _ranks(rs)) for h, rs in hosts.items())))


def _ranks(ranks) -> str:
    return ", ".join(str(r) for r in ranks)
