"""A failing, killed or interrupted job ends quickly and loudly, and leaves no process behind."""
import re
import signal
import threading
import time

import pytest

from conftest import pids_matching, rank_lines, wait_no_process

LIMIT_S = 10.0

# argv: MARKER MODE. Rank 1 fails (after init); rank 0 blocks in an allreduce rank 1 never joins, or sleeps.
FAILING_RANK = """
import os, signal, sys, time
import torch
import dadt.torch as dadt
mode, how = sys.argv[2], sys.argv[3]
dadt.init()
if dadt.rank() == 1:
    time.sleep(0.5)
    print("FAILING_AT %.6f" % time.time(), flush=True)
    if how == "exit3":
        raise SystemExit(3)
    if how == "exception":
        raise RuntimeError("deliberate failure on rank 1")
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "allreduce":
    dadt.allreduce(torch.ones(4), name="never.completes")
else:
    time.sleep(300)
print("NOT_REACHED", flush=True)
"""


def _failure_time(stdout):
    for line in rank_lines(stdout, rank=1):
        if line.startswith("FAILING_AT "):
            return float(line.split()[1])
    return None


@pytest.mark.parametrize("rank0", ["allreduce", "sleep"])
@pytest.mark.parametrize("how", ["exit3", "exception", "sigkill"])
def test_failing_rank_stops_the_job(job, rank0, how):
    proc, _ = job.run(FAILING_RANK, np=2, args=(rank0, how), timeout=120)
    ended = time.time()
    leftovers = wait_no_process(job.marker)
    failed_at = _failure_time(proc.stdout)

    assert failed_at is not None, f"rank 1 never reached its failure point\n{proc.stdout}\n{proc.stderr}"
    assert ended - failed_at < LIMIT_S, f"dadtrun took {ended - failed_at:.1f} s to stop after rank 1 failed"
    assert proc.returncode != 0, "dadtrun must exit non-zero when a rank fails"
    assert "NOT_REACHED" not in proc.stdout, "rank 0 went on although rank 1 was gone"
    launcher_lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("dadtrun:")]
    report = "\n".join(launcher_lines)
    assert re.search(r"\brank 1\b", report), f"dadtrun does not name rank 1:\n{proc.stderr}"
    if how == "exit3":
        assert re.search(r"\bcode 3\b", report), f"dadtrun does not give the exit code 3:\n{proc.stderr}"
    elif how == "exception":
        assert re.search(r"\bcode 1\b", report), f"dadtrun does not give the exit code 1:\n{proc.stderr}"
        assert "deliberate failure on rank 1" in proc.stderr, "the rank's traceback must reach stderr"
    else:
        assert re.search(r"SIGKILL|signal 9\b", report), f"dadtrun does not name the signal:\n{proc.stderr}"
    assert leftovers == [], f"processes of the job still alive: {leftovers}"


def test_failing_rank_among_three(job):
    proc, _ = job.run(FAILING_RANK, np=3, args=("allreduce", "exit3"), timeout=120)
    leftovers = wait_no_process(job.marker)
    assert proc.returncode != 0, proc.stderr
    assert re.search(r"\brank 1\b.*\bcode 3\b", proc.stderr), proc.stderr
    assert leftovers == [], f"processes of the job still alive: {leftovers}"


# Every rank prints READY and then waits: in an allreduce that cannot complete (rank 0), asleep
# (the others), or asleep ignoring SIGINT and SIGTERM ("stubborn").
WAITING_JOB = """
import signal, sys, time
mode = sys.argv[2]
if mode == "stubborn":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode in ("dadt", "stubborn"):
    import torch
    import dadt.torch as dadt
    dadt.init()
    rank = dadt.rank()
else:
    import os
    rank = int(os.environ["DADT_RANK"])
print("READY", flush=True)
if mode == "dadt" and rank == 0:
    dadt.allreduce(torch.ones(2), name="waits.for.everyone")  # the others never call it
while True:
    time.sleep(0.1)
"""


def _wait_ready(proc, np, seconds=90):
    """Reads stdout until every rank printed READY; returns the lines read (the reader thread goes on)."""
    lines, ready = [], set()
    done = threading.Event()

    def reader():
        for line in proc.stdout:
            lines.append(line)
            m = re.match(r"^\[(\d+)\]<stdout>:READY", line)
            if m:
                ready.add(int(m.group(1)))
                if len(ready) == np:
                    done.set()
        done.set()

    threading.Thread(target=reader, daemon=True).start()
    done.wait(seconds)
    return ready, lines


@pytest.mark.parametrize("mode,limit", [("plain", LIMIT_S), ("dadt", LIMIT_S), ("stubborn", 30.0)])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_signal_to_dadtrun_ends_every_rank(job, sig, mode, limit):
    np = 3
    proc = job.start(WAITING_JOB, np=np, args=(mode,))
    ready, lines = _wait_ready(proc, np)
    assert ready == set(range(np)), f"not every rank got ready: {ready}\n{''.join(lines)}"
    assert len(pids_matching(job.marker)) >= np, "the ranks should be running"
    sent = time.monotonic()
    proc.send_signal(sig)
    try:
        rc = proc.wait(timeout=limit + 5)
    except Exception:  # noqa: BLE001
        rc = None
    took = time.monotonic() - sent
    leftovers = wait_no_process(job.marker)
    assert rc is not None, f"dadtrun still running {limit + 5:.0f} s after {sig.name}"
    assert took < limit, f"dadtrun took {took:.1f} s to stop after {sig.name}"
    assert rc != 0, f"dadtrun exited 0 after {sig.name}"
    assert leftovers == [], f"processes of the job still alive after {sig.name}: {leftovers}"


def test_start_timeout_when_a_rank_never_initialises(job):
    script = """
import os, sys, time
import torch
import dadt.torch as dadt
if os.environ["DADT_RANK"] == "1":
    time.sleep(300)
dadt.init()
print("NOT_REACHED", flush=True)
"""
    proc, took = job.run(script, np=2, flags=("--start-timeout", "3"), timeout=60)
    leftovers = wait_no_process(job.marker)
    assert proc.returncode != 0
    assert "NOT_REACHED" not in proc.stdout
    assert took < 3 + 20, f"a 3 s start timeout took {took:.1f} s to end the job"
    assert leftovers == [], f"processes of the job still alive: {leftovers}"
