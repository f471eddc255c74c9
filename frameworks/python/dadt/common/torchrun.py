"""Joining the ranks that torchrun started, or the pods of a Kubeflow PyTorchJob, without dadtrun.

``init()`` calls `join_job` after `slurm.join_step`. A process with torch's env:// contract (RANK,
WORLD_SIZE > 1, MASTER_ADDR, MASTER_PORT) that no dadt launcher prepared (no DADT_RANK, no
DADT_CONTROLLER) and that mpirun did not start (no OMPI_COMM_WORLD_SIZE) meets the other ranks in
five steps (docs/running.md, "torchrun and Kubernetes"):

1. Its place: rank RANK of WORLD_SIZE, local rank LOCAL_RANK of LOCAL_WORLD_SIZE, cross rank
   GROUP_RANK (torchrun's node rank) of GROUP_WORLD_SIZE. A pod that runs one process without
   torchrun (a PyTorchJob sets RANK to the pod's index) is local rank 0 of 1, cross rank RANK.
2. torch's store at MASTER_ADDR:MASTER_PORT: under torchrun the agent's TCPStore, which every
   worker reaches as a client (TORCHELASTIC_USE_AGENT_STORE=True); after
   torch.distributed.init_process_group, the default group's store; otherwise a TCPStore that
   rank 0 hosts on MASTER_PORT (multi-tenant, so that a later init_process_group of env:// or
   tcp:// on the same port in this process shares it, as torch's own stores do).
3. Rank 0 draws a secret (32 random bytes; DADT_SECRET instead when the user exported one on every
   node, and then it is not published), starts ``dadtrun --serve-store`` (dadtrun/store_task.h),
   which serves dadt's rendezvous store on a free port (or DADT_RENDEZVOUS_PORT) of every interface
   (or DADT_IFACE's) until this process exits, and publishes "ADDR PORT [SECRET]" in torch's store
   under ``dadt/<TORCHELASTIC_RUN_ID>/rendezvous``. ADDR is DADT_RENDEZVOUS_ADDR, else MASTER_ADDR:
   rank 0 runs on the node that hosts torch's store.
4. The others read the entry; one whose server refuses connections is stale (below): they read it
   again until rank 0 has replaced it, for up to DADT_START_TIMEOUT seconds. Rank 0 deletes the
   last attempt's entry before it starts its server, so only a rank that read just before that can
   hold a stale one. (With a fixed DADT_RENDEZVOUS_PORT such a rank may find the new server on the
   old port and fail to authenticate with the old secret; with an exported DADT_SECRET, the same
   in every attempt, it just connects.)
5. DADT_RANK, DADT_SIZE, DADT_LOCAL_*, DADT_CROSS_*, DADT_CONTROLLER=gloo,
   DADT_RENDEZVOUS_ADDR/PORT and DADT_SECRET are set in os.environ; the runtime meets as under
   dadtrun.

A restart (torchrun --max-restarts) starts fresh processes that meet in the same agent store, which
still holds the last attempt's entry. TORCHELASTIC_RESTART_COUNT cannot scope the key: torchrun counts
restarts per node (the node whose worker failed counts one; the others, restarted because a node
waits in the rendezvous, do not), so the ranks of one attempt may disagree on it. An entry whose
server refuses connections is stale instead: its rank 0 has exited, and with it the store it served
(PR_SET_PDEATHSIG), before any agent joined the next round. A probe that connects and closes without
a request is not logged by the server.

torch's store is not authenticated: whoever reaches MASTER_PORT can read a published secret, as they
can already join or disrupt torch.distributed's own process groups there. The secret keeps dadt's
store to this job's ranks; it does not make a job safe on a network shared with untrusted hosts.
"""
import datetime
import os
import secrets
import socket
import subprocess
import time
from typing import Optional

from dadt.common import slurm

# Rank 0's `dadtrun --serve-store` and the TCPStore it hosts itself: kept referenced so that they
# live (the server's stdin stays open) as long as this process.
_server = None
_store = None

_DEFAULT_START_TIMEOUT_S = 30  # runtime/common/env.h kDefaultStartTimeoutSeconds


def read_store_port(proc: subprocess.Popen, dadtrun: str, who: str) -> int:
    """The port that ``dadtrun --serve-store`` (dadtrun/store_task.h) started as ``proc`` serves on:
    its lines up to READY on stdout (then closed), or RuntimeError naming ``who`` with the store's
    ERROR line or exit code."""
    port = None
    for line in proc.stdout:
        line = line.rstrip("\n")
        if line == "READY":
            break
        if line.startswith("ERROR\t"):
            proc.wait()
            raise RuntimeError("%s: %s" % (who, line[len("ERROR\t"):]))
        name, _, value = line.partition("=")
        if name == "DADT_RENDEZVOUS_PORT":
            port = int(value)
    if port is None:
        code = proc.wait()
        raise RuntimeError("%s: %s --serve-store ended (exit code %s) before serving dadt's rendezvous store"
                           % (who, dadtrun, code))
    proc.stdout.close()
    return port


def _knob(name: str) -> str:
    """The variable that supplies the knob ``name``: itself, or its Horovod name
    (``HOROVOD_START_TIMEOUT``) when only that one is set, by the runtime's rule
    (runtime/common/env.h, kHorovodAliases)."""
    from dadt import _core  # imported by dadt.common.basics before init() calls join_job
    return _core.env_source(name)


def _int(env, name: str, default: Optional[int] = None) -> int:
    value = env.get(name)
    if value is None:
        if default is None:
            raise RuntimeError("%s is not set" % name)
        return default
    try:
        return int(value)
    except ValueError:
        raise RuntimeError("%s=%r is not an integer (torchrun's variables: docs/running.md, "
                           "\"torchrun and Kubernetes\")" % (name, value)) from None


def _geometry(env) -> dict:
    """Step 1: DADT_* geometry from torch's names."""
    rank = _int(env, "RANK")
    size = _int(env, "WORLD_SIZE")
    if "LOCAL_RANK" in env:
        local_rank, local_size = _int(env, "LOCAL_RANK"), _int(env, "LOCAL_WORLD_SIZE", 1)
        cross_rank = _int(env, "GROUP_RANK", rank // max(local_size, 1))
        cross_size = _int(env, "GROUP_WORLD_SIZE", max(size // max(local_size, 1), 1))
    else:  # one process per pod (PyTorchJob without torchrun)
        local_rank, local_size, cross_rank, cross_size = 0, 1, rank, size
    if not (0 <= rank < size and 0 <= local_rank < local_size and 0 <= cross_rank < cross_size):
        raise RuntimeError(
            "torchrun's variables describe no place in the job: RANK=%d WORLD_SIZE=%d LOCAL_RANK=%d "
            "LOCAL_WORLD_SIZE=%d GROUP_RANK=%d GROUP_WORLD_SIZE=%d"
            % (rank, size, local_rank, local_size, cross_rank, cross_size))
    return {"DADT_RANK": rank, "DADT_SIZE": size, "DADT_LOCAL_RANK": local_rank,
            "DADT_LOCAL_SIZE": local_size, "DADT_CROSS_RANK": cross_rank, "DADT_CROSS_SIZE": cross_size}


def _torch_store(env, rank: int, size: int, timeout: datetime.timedelta):
    """Step 2: the store every rank of this job reaches at MASTER_ADDR:MASTER_PORT."""
    global _store
    try:
        import torch.distributed as dist
    except ImportError:
        raise RuntimeError("RANK=%s and WORLD_SIZE=%s say that torchrun (or a PyTorchJob) started this "
                           "process, and dadt meets the other ranks through torch's TCPStore at "
                           "MASTER_ADDR:MASTER_PORT, but torch is not installed here; install torch or "
                           "start the job with dadtrun" % (rank, size)) from None
    if dist.is_available() and dist.is_initialized():
        return dist.distributed_c10d._get_default_store()
    host, port = env["MASTER_ADDR"], _int(env, "MASTER_PORT")
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return dist.TCPStore(host, port, is_master=False, timeout=timeout)
    _store = dist.TCPStore(host, port, size, is_master=(rank == 0), timeout=timeout,
                           wait_for_workers=False, multi_tenant=True)
    return _store


def _serve(env) -> tuple:
    """Step 3 on rank 0: starts `dadtrun --serve-store`; returns (port, secret, published secret)."""
    global _server
    given = env.get("DADT_SECRET")
    secret = given or secrets.token_hex(32)
    dadtrun = slurm.find_dadtrun()
    if dadtrun is None:
        raise RuntimeError("this is rank 0 of a job of %s ranks that torchrun started, and it serves dadt's "
                           "rendezvous store through the dadtrun program, which is not installed beside "
                           "this Python nor on PATH; reinstall dadt (pip install ., which installs dadtrun)"
                           % env.get("WORLD_SIZE"))
    proc = subprocess.Popen([dadtrun, "--serve-store"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, close_fds=True, env=dict(env, DADT_SECRET=secret))
    port = read_store_port(proc, dadtrun, "rank 0 of a torchrun job")
    _server = proc  # serves until this process exits
    return port, secret, None if given else secret


def _answers(addr: str, port: int) -> bool:
    try:
        with socket.create_connection((addr, port), timeout=5):
            return True
    except OSError:
        return False


def join_job() -> None:
    env = os.environ
    if "DADT_RANK" in env or "DADT_CONTROLLER" in env:
        return  # a launcher (dadtrun, or a Slurm step's task) set the job up
    if "OMPI_COMM_WORLD_SIZE" in env:
        return  # plain mpirun: MPI tells the runtime each rank's place (docs/backends.md)
    if not all(n in env for n in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return
    geometry = _geometry(env)
    rank, size = geometry["DADT_RANK"], geometry["DADT_SIZE"]
    if size == 1:
        return
    timeout_var = _knob("DADT_START_TIMEOUT")
    timeout_s = _int(env, timeout_var, _DEFAULT_START_TIMEOUT_S)
    timeout = datetime.timedelta(seconds=timeout_s)
    store = _torch_store(env, rank, size, timeout)
    key = "dadt/%s/rendezvous" % env.get("TORCHELASTIC_RUN_ID", "env")
    if rank == 0:
        addr = env.get("DADT_RENDEZVOUS_ADDR") or env["MASTER_ADDR"]
        store.delete_key(key)  # the last attempt's: from here on the others wait for this one's
        port, secret, published = _serve(env)
        store.set(key, " ".join([addr, str(port)] + ([published] if published else [])))
    else:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                store.wait([key], datetime.timedelta(seconds=max(deadline - time.monotonic(), 0.1)))
            except Exception as e:  # torch's DistStoreError / RuntimeError: its message says which
                raise RuntimeError("rank %d: rank 0 did not publish dadt's rendezvous store in torch's store "
                                   "at %s:%s within %d s (%s): %s"
                                   % (rank, env["MASTER_ADDR"], env["MASTER_PORT"], timeout_s, timeout_var,
                                      e)) from None
            fields = store.get(key).decode().split(" ")
            addr, port = fields[0], int(fields[1])
            if _answers(addr, port):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("rank %d: dadt's rendezvous store at %s:%d (published by rank 0 in torch's "
                                   "store at %s:%s) refuses connections after %d s (%s); set "
                                   "DADT_RENDEZVOUS_ADDR on rank 0's node to an address the others reach"
                                   % (rank, addr, port, env["MASTER_ADDR"], env["MASTER_PORT"], timeout_s,
                                      timeout_var))
            time.sleep(0.1)  # the last attempt's entry: rank 0 of this one replaces it
        secret = fields[2] if len(fields) > 2 else env.get("DADT_SECRET")
        if not secret:
            raise RuntimeError("rank %d: rank 0 did not publish a secret because DADT_SECRET is set on its node; "
                               "export the same DADT_SECRET on every node" % rank)
    for name, value in geometry.items():
        env[name] = str(value)
    env["DADT_CONTROLLER"] = "gloo"
    env["DADT_RENDEZVOUS_ADDR"] = addr
    env["DADT_RENDEZVOUS_PORT"] = str(port)
    env["DADT_SECRET"] = secret
