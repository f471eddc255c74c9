"""Liveness under the real launcher: a rank that stops answering (SIGSTOP: alive, sockets open,
nothing sent) is named as unresponsive, not as running different code.

Rank F stops itself (a) while the others wait in negotiation for an allreduce it never submits,
(b) just after submitting a big allreduce, so that the others wait in the data plane, and (c) as
rank 0, the coordinator. Every other rank warns within the warning time, naming the rank, its host
and what it waits for; the job ends within the shutdown time (plus the survivors' exit grace and
the launcher's teardown), dadtrun's last line names the rank, and no process is left. A rank that
is only slow gets the stall report and no liveness warning. Under `dadtrun --gloo` and
`dadtrun --mpi`, three ranks on this host.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest

from conftest import PY, pids_matching, rank_lines, wait_no_process, worker_env

WARN_S = 1.5
END_S = 4.5
# From the freeze until dadtrun has exited: the shutdown time, the survivors' 2 s exit grace, and
# the launcher's teardown of a stopped process (mpirun's is the slower).
LIMIT_S = END_S + 2 + 12

MPIRUN = shutil.which("mpirun")

# argv: MARKER MODE FROZEN [SLEEP]. The frozen rank prints FROZEN <time> just before SIGSTOP.
JOB = """
import os, signal, sys, time
import torch
import dadt.torch as dadt
mode, frozen = sys.argv[2], int(sys.argv[3])
dadt.init()
rank = dadt.rank()
dadt.allreduce(torch.ones(3), name="warmup")

def freeze():
    print("FROZEN %.6f" % time.time(), flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)

if mode in ("negotiation", "coordinator"):
    if rank == frozen:
        freeze()
    dadt.allreduce(torch.ones(3), name="never.submitted")
elif mode == "dataplane":
    h = dadt.allreduce_async(torch.ones((128 << 20) // 4), name="big.one")
    if rank == frozen:
        time.sleep(0.02)  # its request is on its way; the collective lasts far longer
        freeze()
    dadt.synchronize(h)
elif mode == "slow":
    for i in range(2):
        if rank == frozen:
            time.sleep(float(sys.argv[4]))
        dadt.allreduce(torch.ones(3), name="step.%d" % i)
    print("DONE", flush=True)
    sys.exit(0)
print("NOT_REACHED", flush=True)
"""


def _run(job, engine, mode, frozen, extra=(), flags=None, timeout=120):
    script = job.tmp_path / "liveness_job.py"
    script.write_text(JOB)
    if flags is None:
        flags = ("--liveness-timeout-seconds", str(WARN_S), "--liveness-shutdown-time-seconds", str(END_S))
    cmd = [job.dadtrun, "--" + engine, "-np", "3", *flags, PY, str(script), job.marker, mode, str(frozen),
           *map(str, extra)]
    try:
        proc = subprocess.run(cmd, env=worker_env(), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        pytest.fail(f"dadtrun still running after {timeout} s\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}",
                    pytrace=False)
    return proc, time.time()


@pytest.fixture
def thawing_job(job):
    """The `job` fixture, whose stopped processes get SIGCONT (then SIGKILL) at the end."""
    yield job
    for pid in pids_matching(job.marker):
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def _engines():
    return ["gloo", pytest.param("mpi", marks=pytest.mark.skipif(
        MPIRUN is None, reason="mpirun not found (apt-get install openmpi-bin)"))]


@pytest.mark.parametrize("engine", _engines())
@pytest.mark.parametrize("mode,frozen,waits", [
    ("negotiation", 1, "allreduce 'never.submitted' in negotiation"),
    ("dataplane", 1, "allreduce 'big.one' in a data-plane wait"),
    ("coordinator", 0, "allreduce 'never.submitted' in negotiation"),
])
def test_frozen_rank_is_named_and_ends_the_job(thawing_job, engine, mode, frozen, waits):
    job = thawing_job
    proc, ended = _run(job, engine, mode, frozen)
    leftovers = wait_no_process(job.marker, seconds=10)
    output = proc.stdout + proc.stderr
    froze = [float(ln.split()[1]) for ln in rank_lines(proc.stdout, rank=frozen) if ln.startswith("FROZEN ")]
    assert froze, f"rank {frozen} never froze\n{output[-4000:]}"
    assert proc.returncode != 0, output[-3000:]
    # (The frozen rank itself may go on for a moment: mpirun sends SIGCONT before SIGTERM.)
    for r in range(3):
        assert r == frozen or "NOT_REACHED" not in rank_lines(proc.stdout, rank=r), f"rank {r} went on"
    host = socket.gethostname()
    for r in range(3):
        if r == frozen:
            continue
        err = "\n".join(rank_lines(output, rank=r, stream="stderr"))
        warnings = [ln for ln in err.splitlines() if "liveness: no heartbeat from" in ln]
        assert warnings, f"rank {r} logged no liveness warning:\n{err[-3000:]}"
        assert f"rank {frozen} on host {host}" in warnings[0], warnings[0]
        assert waits in warnings[0], warnings[0]
        assert "stall:" not in err, f"a frozen rank is reported as a stall on rank {r}:\n{err[-3000:]}"
        assert re.search(rf"rank {frozen} on host \S+ stopped answering", err), err[-3000:]
        # Repeated while it lasts: the shutdown time is three warning times.
        assert len(warnings) >= 2, warnings
    launcher = [ln for ln in proc.stderr.splitlines() if ln.startswith("dadtrun:")]
    assert launcher, proc.stderr[-3000:]
    assert re.search(rf"\brank {frozen} on host \S+ stopped answering", launcher[-1]), launcher[-1]
    assert ended - froze[0] >= END_S, f"the job ended {ended - froze[0]:.1f} s after the freeze"
    assert ended - froze[0] < LIMIT_S, f"the job ended {ended - froze[0]:.1f} s after the freeze"
    assert leftovers == [], f"processes of the job still alive: {leftovers}"


def test_slow_rank_gets_the_stall_report_not_a_liveness_warning(thawing_job):
    job = thawing_job
    flags = ("--liveness-timeout-seconds", "1", "--liveness-shutdown-time-seconds", "3",
             "--stall-check-warning-time-seconds", "1")
    proc, _ = _run(job, "gloo", "slow", 1, extra=(3.5,), flags=flags)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert len([ln for ln in proc.stdout.splitlines() if ln.endswith("DONE")]) == 3, output[-3000:]
    assert "stall:" in output and "missing rank 1" in output, output[-3000:]
    assert "liveness:" not in output, output[-3000:]
    assert wait_no_process(job.marker) == []
