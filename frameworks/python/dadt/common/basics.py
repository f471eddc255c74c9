"""Framework-agnostic runtime control: init, shutdown, job geometry and build facts.

Every front end (``dadt.torch`` now, TensorFlow and JAX later) re-exports these. They sit directly
on ``dadt._core`` and convert its errors into the exception types Horovod users expect.
"""

import atexit
import os
import sys
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

from dadt.common import process_sets as process_sets_module
from dadt.common import slurm
from dadt.common import torchrun
from dadt.common.exceptions import WorkerRemovedError, from_core_error
from dadt.common.util import (NOT_INITIALIZED, OP_ALLGATHER, OP_ALLREDUCE, OP_ALLTOALL,
                              OP_BROADCAST, OP_NEIGHBOR_ALLGATHER, OP_PEER_EXCHANGE,
                              OP_REDUCESCATTER, reset_collective_names)

try:
    from dadt import _core
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        "dadt._core is not built: run `bazel build //frameworks/bindings:_core.so` and link "
        "bazel-bin/frameworks/bindings/_core.so to frameworks/python/dadt/_core.so "
        "(or install dadt with pip): %s" % e) from e

# Communicators init() created from a list of ranks, by the list (tuple of world ranks).
_owned_comms: Dict[Tuple[int, ...], Any] = {}
# The mpi4py communicator of the running job when init(comm=...) was given one (None otherwise).
_job_comm: Any = None
# What every init() that starts a new runtime runs first (on_new_incarnation).
_incarnation_resets: List[Callable[[], None]] = [reset_collective_names,
                                                 process_sets_module.forget_all]


def on_new_incarnation(reset: Callable[[], None]) -> Callable[[], None]:
    """Registers ``reset`` to run at each init() that starts a runtime (not one that finds it
    running). Front ends forget there what belonged to the previous incarnation: the names of its
    collectives still in flight (the new runtime knows none of them) and its handles, which then
    raise ValueError instead of naming the new runtime's work. Returns ``reset``."""
    _incarnation_resets.append(reset)
    return reset


def call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Calls a ``dadt._core`` function, raising dadt's exception types instead of CoreError."""
    try:
        return fn(*args, **kwargs)
    except _core.CoreError as e:
        raise from_core_error(e) from None


def wait_all(handles) -> Optional[BaseException]:
    """Waits for every core handle in ``handles``, so that none still writes into memory the caller
    is about to free, and returns the first failure as a dadt exception (None when all succeeded).
    Used by every front end's ``synchronize``."""
    error = None
    for h in handles:
        try:
            _core.wait(h)
        except _core.CoreError as e:
            error = error or e
    return None if error is None else from_core_error(error)


# The collectives whose GPU tensors are staged through host memory although NCCL moves the job's
# other GPU tensors: init() named 'nccl' for one of broad_cast_executor / all_reduce_executor and a
# host engine for the other (the original DADT's `broad_cast_executor='nccl',
# all_reduce_executor='mpi'`). Broadcast follows broad_cast_executor; every other collective
# (allreduce, allgather, alltoall, reducescatter, point to point) follows all_reduce_executor.
_host_staged_ops = frozenset()


def host_staged(op_type: int) -> bool:
    """True when a GPU tensor of collective `op_type` goes through host memory and the host
    engine even though NCCL is the job's device data plane (see _host_staged_ops)."""
    return op_type in _host_staged_ops


def _check_executor(arg: str, executor: Optional[str], with_comm: bool):
    """The engines `executor` would run here (runtime/backends/engine_choice.h, through
    ``_core.choose_engines``); a refusal is raised naming the argument."""
    try:
        return _core.choose_engines(executor, with_comm)
    except _core.CoreError as e:
        error = from_core_error(e)
        if executor is None:
            raise error from None
        raise type(error)("%s=%r: %s" % (arg, executor, error)) from None


def _pick_backend(broad_cast_executor: Optional[str], all_reduce_executor: Optional[str],
                  with_comm: bool) -> Optional[str]:
    """The executor init() asks the runtime for (None: the launcher's choice), after checking each
    one given on its own, so that a refusal names the argument and says what it needs (NCCL on a
    machine without a GPU says so). The two may differ where one is 'nccl' and the other the host
    engine of this launch: NCCL then moves the GPU tensors of the first one's collectives, and the
    other's are staged through host memory (host_staged)."""
    global _host_staged_ops
    given = [(arg, str(value).lower()) for arg, value in
             (("broad_cast_executor", broad_cast_executor), ("all_reduce_executor", all_reduce_executor))
             if value is not None]
    engines = {arg: _check_executor(arg, executor, with_comm) for arg, executor in given}
    if not given:
        _check_executor("", None, with_comm)
    chosen = {executor for _, executor in given}
    staged = frozenset()
    if len(chosen) > 1:
        if "nccl" not in chosen:
            raise ValueError(
                "broad_cast_executor=%r and all_reduce_executor=%r: a job has one engine for host "
                "tensors, its controller's ('mpi' under mpirun or dadtrun --mpi, 'gloo' under "
                "dadtrun --gloo); the two may differ only where one of them is 'nccl', for GPU "
                "tensors" % (broad_cast_executor, all_reduce_executor))
        host_arg, host = next((arg, e) for arg, e in given if e != "nccl")
        nccl_host_engine = engines["broad_cast_executor" if host_arg == "all_reduce_executor"
                                   else "all_reduce_executor"][1]
        if nccl_host_engine != host:
            raise ValueError(
                "%s=%r: with the other executor 'nccl', host tensors and staged GPU tensors run "
                "on this launch's host engine, %r; launch with %s, or ask for %r"
                % (host_arg, host, nccl_host_engine,
                   "dadtrun --mpi or mpirun" if host == "mpi" else "dadtrun --gloo",
                   nccl_host_engine))
        if host_arg == "broad_cast_executor":
            staged = frozenset([OP_BROADCAST])
        else:
            staged = frozenset([OP_ALLREDUCE, OP_ALLGATHER, OP_ALLTOALL, OP_REDUCESCATTER,
                                OP_PEER_EXCHANGE, OP_NEIGHBOR_ALLGATHER])
        chosen = {"nccl"}
    if not is_initialized():
        _host_staged_ops = staged
    return chosen.pop() if chosen else None


def _mpi_comm_handle(comm) -> int:
    """The MPI_Comm behind `comm` (an mpi4py communicator, or a list of world ranks) as an int."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ValueError("init(comm=...) takes an mpi4py communicator or a list of ranks, which "
                         "needs mpi4py (pip install mpi4py): %s" % e) from None
    if isinstance(comm, (list, tuple, range)):
        ranks = [int(r) for r in comm]
        world = MPI.COMM_WORLD
        bad = [r for r in ranks if not 0 <= r < world.Get_size()]
        if bad or len(set(ranks)) != len(ranks) or not ranks:
            raise ValueError("init(comm=%r): ranks must be distinct ranks of MPI_COMM_WORLD "
                             "(size %d)" % (list(comm), world.Get_size()))
        if world.Get_rank() not in ranks:
            raise ValueError("init(comm=%r): this process (world rank %d) is not in the list"
                             % (ranks, world.Get_rank()))
        # One communicator per list, kept for the process: a later init() with the same list
        # reuses it, and with it the communicators the runtime keeps on it (runtime/backends/
        # mpi/mpi_env.h), instead of creating new ones every time.
        comm = _owned_comms.get(tuple(ranks))
        if comm is None:
            group = world.Get_group().Incl(ranks)
            comm = world.Create_group(group)
            group.Free()
            _owned_comms[tuple(ranks)] = comm
    global _job_comm
    _job_comm = comm
    if not isinstance(comm, MPI.Comm):
        raise ValueError("init(comm=...) takes an mpi4py communicator (mpi4py.MPI.Comm) or a list "
                         "of ranks, got %s" % type(comm).__name__)
    if comm == MPI.COMM_NULL:
        raise ValueError("init(comm=...): the communicator is MPI.COMM_NULL (this process is not "
                         "a member)")
    return int(MPI._handleof(comm))


def _fusion_threshold(all_reduce_buffer_size: Optional[int], group_buffer_size: Optional[int]):
    sizes = [int(s) for s in (all_reduce_buffer_size, group_buffer_size) if s is not None]
    for s in sizes:
        if s < 0:
            raise ValueError("buffer sizes must be >= 0 bytes, got %d" % s)
    if len(set(sizes)) > 1:
        warnings.warn("dadt fuses every collective under one threshold; using the larger of "
                      "all_reduce_buffer_size=%d and group_buffer_size=%d" % tuple(sizes))
    return max(sizes) if sizes else -1


def init(comm=None, process_sets=None, *, cycle_duration_ms: Optional[float] = None,
         broad_cast_executor: Optional[str] = None, all_reduce_executor: Optional[str] = None,
         all_reduce_buffer_size: Optional[int] = None, group_buffer_size: Optional[int] = None,
         timeline_path: Optional[str] = None) -> None:
    """A function that initializes dadt.

    Reads the job's geometry from the launcher's environment (``dadtrun``); in a task of a Slurm
    step started by ``srun`` without dadtrun, from Slurm's (docs/running.md, "Running under
    Slurm"); in a process that ``torchrun`` or a PyTorchJob started, from torch's (RANK,
    WORLD_SIZE, ...; docs/running.md, "torchrun and Kubernetes"); otherwise the process runs as
    rank 0 of 1. Calling it again while running is a no-op.

    Args:
      comm: An mpi4py communicator (or a list of MPI_COMM_WORLD ranks): the job is that
          communicator's processes, with their rank and size in it, and MPI carries negotiation
          and data. Several sub-communicators run independent jobs. None: the launcher's job.
      process_sets: Process sets to register right after start-up, in list order: ProcessSet
          objects (or lists of ranks, or mpi4py communicators), the same list on every rank
          (otherwise a ValueError on every rank naming the first rank whose list differs). None
          or "dynamic": none now; `add_process_set` may add them at any time.
      cycle_duration_ms: Cycle time of the runtime's negotiation loop in milliseconds
          (default: ``DADT_CYCLE_TIME`` or 1 ms).
      broad_cast_executor: Backend for broadcasts: 'gloo', 'mpi', 'nccl', 'mpicuda' or None
          (the launcher's choice). One this build or machine lacks is refused (ValueError).
      all_reduce_executor: Backend for reductions, the same names.
      all_reduce_buffer_size: Tensor fusion threshold in bytes (default:
          ``DADT_FUSION_THRESHOLD`` or 128 MiB).
      group_buffer_size: Same threshold, under its grouped-allreduce name; the larger wins.
      timeline_path: File for the Chrome-trace timeline (sets ``DADT_TIMELINE``).
    """
    if comm is None and not is_initialized():
        slurm.join_step()  # srun without dadtrun: this task's place in the step (dadt/common/slurm.py)
        torchrun.join_job()  # torchrun or a PyTorchJob's pods: meet through torch's store (torchrun.py)
    mpi_comm = 0
    backend = _pick_backend(broad_cast_executor, all_reduce_executor,
                            comm is not None and not is_initialized())
    if comm is not None and not is_initialized():
        mpi_comm = _mpi_comm_handle(comm)
    fusion = _fusion_threshold(all_reduce_buffer_size, group_buffer_size)
    cycle = -1.0 if cycle_duration_ms is None else float(cycle_duration_ms)
    if cycle_duration_ms is not None and cycle < 0:
        raise ValueError("cycle_duration_ms must be >= 0, got %r" % cycle_duration_ms)
    if timeline_path is not None:
        os.environ["DADT_TIMELINE"] = str(timeline_path)
    starting = not is_initialized()
    if starting:
        for reset in _incarnation_resets:
            reset()
        if comm is None:
            global _job_comm
            _job_comm = None
    try:
        call(_core.init, fusion, cycle, -1, backend, mpi_comm)
    except WorkerRemovedError as e:
        print("dadt: %s; exiting with status 0" % e.message, file=sys.stderr, flush=True)
        raise
    if starting:
        process_sets_module.register_at_init(process_sets)
    elif process_sets is not None:
        process_sets_module.fill_in_running(process_sets)


def job_comm() -> Any:
    """The mpi4py communicator init(comm=...) was given (None when the launcher's job runs)."""
    return _job_comm


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Starts writing a Chrome-trace timeline of every collective to ``file_path`` (rank 0 writes;
    on other ranks this does nothing). Open it in chrome://tracing or Perfetto, or summarise it with
    ``python -m dadt.timeline summary FILE``. ``mark_cycles`` adds a CYCLE_START mark each time the
    coordinator releases a batch of tensors."""
    call(_core.start_timeline, str(file_path), bool(mark_cycles))


def stop_timeline() -> None:
    """Stops the timeline started by `start_timeline` (or by ``DADT_TIMELINE``) and closes the
    file, leaving it as a complete JSON array."""
    call(_core.stop_timeline)


def set_fusion_params(fusion_threshold_bytes: Optional[int] = None,
                      cycle_time_ms: Optional[float] = None) -> None:
    """Changes the fusion threshold (bytes) and/or the cycle time (ms) of the running job; None
    keeps a knob as it is. Rank 0's coordinator switches before its next negotiation round and the
    whole job follows (other ranks only check the values), so every rank may call it alike. A
    running autotuner stops: a knob set by hand is never tuned (docs/autotune.md)."""
    fusion = -1 if fusion_threshold_bytes is None else int(fusion_threshold_bytes)
    cycle = -1.0 if cycle_time_ms is None else float(cycle_time_ms)
    if fusion_threshold_bytes is not None and fusion < 0:
        raise ValueError("fusion_threshold_bytes must be >= 0, got %r" % fusion_threshold_bytes)
    if cycle_time_ms is not None and not cycle >= 0:
        raise ValueError("cycle_time_ms must be >= 0, got %r" % cycle_time_ms)
    call(_core.set_fusion_params, fusion, cycle)


def shutdown() -> None:
    """A function that shuts dadt down. Pending collectives fail with DadtInternalError. Every
    process set but the global one is dropped (its ProcessSet objects' ids become None)."""
    try:
        call(_core.shutdown)
    finally:
        process_sets_module.forget_all()


def is_initialized() -> bool:
    """Returns True if dadt is initialized."""
    return _core.is_initialized()


def _geometry(fn: Callable[[], int]) -> int:
    value = fn()
    if value < 0:
        raise ValueError(NOT_INITIALIZED)
    return value


def rank() -> int:
    """A function that returns the dadt rank of the calling process.

    Returns:
      An integer scalar with the dadt rank of the calling process.
    """
    return _geometry(_core.rank)


def size() -> int:
    """A function that returns the number of dadt processes.

    Returns:
      An integer scalar containing the number of dadt processes.
    """
    return _geometry(_core.size)


def local_rank() -> int:
    """A function that returns the local dadt rank of the calling process, within the node that
    it is running on. For example, if there are seven processes running on a node, their local
    ranks will be zero through six, inclusive.

    Returns:
      An integer scalar with the local dadt rank of the calling process.
    """
    return _geometry(_core.local_rank)


def local_size() -> int:
    """A function that returns the number of dadt processes within the node the current process
    is running on.

    Returns:
      An integer scalar containing the number of local dadt processes.
    """
    return _geometry(_core.local_size)


def cross_rank() -> int:
    """A function that returns the cross dadt rank of the calling process, across the nodes in
    the job. If the number of processes per node is the same on every node, it is the node's
    index.

    Returns:
      An integer scalar with the cross dadt rank of the calling process.
    """
    return _geometry(_core.cross_rank)


def cross_size() -> int:
    """A function that returns the number of nodes for the local rank of the current dadt
    process. For example, if there are 2 nodes in the job: one running 2 processes and one
    running 1, then ranks 0 and 2 have cross size 2 and rank 1 has cross size 1.

    Returns:
      An integer scalar containing the number of cross dadt processes.
    """
    return _geometry(_core.cross_size)


def backend_name() -> Optional[str]:
    """Returns the data-plane backend in use ('gloo' or 'mpi'), or None when not initialized."""
    return _core.backend_name()


def built_backends() -> List[str]:
    """Returns the names of the backends built into this dadt."""
    return _core.built_backends()


def mpi_threads_supported() -> bool:
    """A function that returns a flag indicating whether MPI multi-threading is supported.

    True when the job runs MPI as its controller and MPI granted ``MPI_THREAD_MULTIPLE`` (so the
    program may make MPI calls of its own, e.g. with mpi4py, while dadt runs); False otherwise.

    Returns:
      A boolean value indicating whether MPI multi-threading is supported.
    """
    value = _core.mpi_threads_supported()
    if value < 0:
        raise ValueError(NOT_INITIALIZED)
    return value == 1


def mpi_enabled() -> bool:
    """Returns True if MPI is the data plane of the running job."""
    return backend_name() == "mpi"


def mpi_built() -> bool:
    """Returns True if dadt was built with MPI support."""
    return "mpi" in built_backends()


def gloo_enabled() -> bool:
    """Returns True if Gloo is in use by the running job."""
    return backend_name() == "gloo"


def gloo_built() -> bool:
    """Returns True if dadt was built with Gloo support."""
    return "gloo" in built_backends()


def nccl_built() -> int:
    """Returns the version code of the NCCL dadt was built with (e.g. 22807 for 2.28.7; true in a
    condition), or 0 without NCCL, as Horovod's nccl_built() does."""
    return _core.nccl_version() if "nccl" in built_backends() else 0


def cuda_built() -> bool:
    """Returns True if dadt was built with CUDA support (the NCCL build; docs/backends.md)."""
    return "nccl" in built_backends()


def nccl_enabled() -> bool:
    """Returns True if NCCL moves the running job's GPU tensors (False: they are staged through
    host memory and the job's Gloo or MPI executor, or the job is not running)."""
    return _core.device_backend() == "nccl"


def rocm_built() -> bool:
    """Returns True if dadt was built with ROCm support (not in this build)."""
    return False


def ddl_built() -> bool:
    """Returns True if dadt was built with IBM DDL support (never)."""
    return False


def ccl_built() -> bool:
    """Returns True if dadt was built with oneCCL support (never)."""
    return False


def sycl_built() -> bool:
    """Returns True if dadt was built with SYCL (Intel GPU) support (never); Horovod's test files
    and scripts ask it beside ccl_built() to pick their code path."""
    return False


def _shutdown_at_exit() -> None:
    if _core.is_initialized():
        try:
            _core.shutdown()
        except Exception:  # noqa: BLE001 - the interpreter is going away; nothing to report to
            pass


atexit.register(_shutdown_at_exit)
