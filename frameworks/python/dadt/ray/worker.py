"""What runs inside the Ray worker processes of a dadt job: the actor class of `RayExecutor`
(`DadtRayWorker`) and the functions that it and the Ray Train backend (`dadt.ray.DadtConfig`) call
in a worker: report where it runs, serve the job's rendezvous store, set the job's environment.

Nothing here imports Ray at module level, nor the runtime: a worker imports the runtime when the
user's function calls ``dadt.init()``, after `set_env` has put its place in the job into
``os.environ``.
"""
import fcntl
import os
import queue
import socket
import struct
import subprocess
import sys
import threading
from typing import Any, Callable, Dict, List, Optional

# This worker's `dadtrun --serve-store` (rank 0 only): kept referenced so that its stdin stays open,
# and with it the store, as long as this process lives. It exits when the process does (its stdin
# closes; dadtrun also sets PR_SET_PDEATHSIG), so killing the actor ends it too.
_server: Optional[subprocess.Popen] = None

_SIOCGIFADDR = 0x8915


def interface_of(address: str) -> Optional[str]:
    """The name of this machine's (this network namespace's) interface that holds the IPv4
    ``address``, or None."""
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # no IPv4 address
        if socket.inet_ntoa(packed[20:24]) == address:
            return name
    return None


def node_info() -> Dict[str, Any]:
    """Where this worker runs: Ray's node id and node IP (the address the other nodes reach it
    at), the interface holding that address, the host name, the pid, the GPUs Ray gave it, and which
    interface variables its environment already sets."""
    import ray
    ip = ray.util.get_node_ip_address()
    try:
        gpu_ids = [str(g) for g in ray.get_gpu_ids()]
    except Exception:  # no GPU resource on this node
        gpu_ids = []
    from dadt.ray._places import IFACE_VARS, SOCKET_IFNAME_VARS
    env_set = [n for n in IFACE_VARS + SOCKET_IFNAME_VARS if os.environ.get(n)]
    return {"node_id": ray.get_runtime_context().get_node_id(), "ip": ip, "iface": interface_of(ip),
            "hostname": socket.gethostname(), "pid": os.getpid(), "gpu_ids": gpu_ids, "env_set": env_set}


def serve_store(secret: str, env: Optional[Dict[str, str]] = None) -> Dict[str, int]:
    """Starts this job's rendezvous store in this worker (rank 0): ``dadtrun --serve-store``
    (dadtrun/store_task.h) with the job's secret, listening on every interface, or on DADT_IFACE's
    address when ``env`` or this process's environment names one, on DADT_RENDEZVOUS_PORT or a free
    port. Returns {"port", "pid"}. A store this process already serves is stopped first."""
    global _server
    from dadt.common import slurm
    from dadt.common.torchrun import read_store_port
    stop_store()
    dadtrun = slurm.find_dadtrun()
    if dadtrun is None:
        raise RuntimeError("rank 0 of a dadt job on Ray serves the job's rendezvous store with the dadtrun "
                           "program, which is not installed beside this Python (%s) nor on PATH on node %s; "
                           "install dadt on every node of the Ray cluster (pip install .)"
                           % (sys.executable, socket.gethostname()))
    child_env = dict(os.environ, **(env or {}), DADT_SECRET=secret)
    proc = _spawn_in_keeper_thread([dadtrun, "--serve-store"], child_env)
    port = read_store_port(proc, dadtrun, "rank 0 of a dadt job on Ray")
    _server = proc
    return {"port": port, "pid": proc.pid}


def _spawn_in_keeper_thread(argv: List[str], env: Dict[str, str]) -> subprocess.Popen:
    """Starts the store from a thread of its own that then waits for it to exit. dadtrun sets
    PR_SET_PDEATHSIG, which fires when the *thread* that forked it ends; the thread that runs a Ray
    call may be a pool's (threaded actors, Ray Train's workers), so it is not trusted to live as long
    as the process."""
    started: "queue.Queue" = queue.Queue()

    def keep():
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                    close_fds=True, env=env)
        except BaseException as e:  # reported to the caller
            started.put(e)
            return
        started.put(proc)
        proc.wait()

    threading.Thread(target=keep, name="dadt-store-keeper", daemon=True).start()
    got = started.get()
    if isinstance(got, BaseException):
        raise got
    return got


def stop_store() -> None:
    """Stops the store `serve_store` started in this process, if any (closing its stdin ends it)."""
    global _server
    proc, _server = _server, None
    if proc is None:
        return
    try:
        proc.stdin.close()
        proc.wait(timeout=5)
    except Exception:
        proc.kill()
        proc.wait()


def set_env(env: Dict[str, str]) -> None:
    """Puts ``env`` into this process's environment (the runtime reads it at ``dadt.init()``)."""
    os.environ.update({k: str(v) for k, v in env.items()})


def shutdown_dadt() -> None:
    """Shuts the runtime down if the user's code left it running, so that a later job in this
    process meets afresh."""
    try:
        from dadt.common import basics
    except ImportError:
        return
    if basics.is_initialized():
        basics.shutdown()


class DadtRayWorker:
    """One rank of a `RayExecutor` job: a Ray actor (one process) that keeps the executable object
    of ``start(executable_cls=...)`` and runs the driver's functions."""

    def __init__(self):
        self.executable = None

    def info(self) -> Dict[str, Any]:
        return node_info()

    def set_env(self, env: Dict[str, str]) -> None:
        set_env(env)

    def env(self) -> Dict[str, str]:
        return dict(os.environ)

    def serve_store(self, secret: str, env: Optional[Dict[str, str]] = None) -> Dict[str, int]:
        return serve_store(secret, env)

    def start_executable(self, executable_cls: Optional[type] = None, executable_args: Optional[List] = None,
                         executable_kwargs: Optional[Dict] = None) -> None:
        if executable_cls is not None:
            self.executable = executable_cls(*(executable_args or []), **(executable_kwargs or {}))

    def execute(self, fn: Callable[[Any], Any]) -> Any:
        """fn(executable): Horovod's `execute`."""
        return fn(self.executable)

    def run(self, fn: Callable[..., Any], args: Optional[List] = None, kwargs: Optional[Dict] = None) -> Any:
        return fn(*(args or []), **(kwargs or {}))

    def run_elastic(self, env: Dict[str, str], job: tuple) -> Dict[str, Any]:
        """One worker of an elastic job (dadt/ray/elastic.py): ``job`` is (fn, args, kwargs); fn's
        ``dadt.init()`` joins the driver's rounds. {"value": fn's result}, or {"removed": True} when
        a round removed this worker (WorkerRemovedError, a SystemExit that would end the actor)."""
        from dadt.common.exceptions import WorkerRemovedError
        from dadt.ray._places import ELASTIC_UNSET
        for name in ELASTIC_UNSET:
            os.environ.pop(name, None)
        set_env(env)
        fn, args, kwargs = job
        try:
            value = fn(*(args or []), **(kwargs or {}))
        except WorkerRemovedError:
            shutdown_dadt()
            return {"removed": True}
        shutdown_dadt()
        return {"value": value}

    def publish(self, addr: str, port: int, secret: str, items: List) -> None:
        """The store's actor of an elastic job: writes the driver's keys (rounds, notices) into the
        store it serves, so that the driver needs no route to it."""
        from dadt.ray._elastic_plan import store_set
        store_set(addr, port, secret, items)

    def peek(self, addr: str, port: int, secret: str, keys: List[str]) -> Dict[str, str]:
        """The store's actor of an elastic job: those of ``keys`` that the store holds (the
        survivors' reports of a silent rank)."""
        from dadt.ray._elastic_plan import store_get
        return store_get(addr, port, secret, keys)

    def stop(self) -> None:
        shutdown_dadt()
        stop_store()
