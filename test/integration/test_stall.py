"""Stall inspector under the real launcher: a rank that is late for, or skips, one allreduce.

With a short check time every rank's output carries a warning naming the tensor and the missing
rank; with a shutdown time the job ends with an error on every rank, a non-zero exit, and no
process left behind.
"""
import subprocess
import time

import pytest

from conftest import rank_lines, wait_no_process, worker_env

# Seconds from the shutdown time until dadtrun has exited.
LIMIT_S = 10.0
SHUTDOWN_S = 3

# argv: MARKER MODE CULPRIT [DELAY]. "late": the culprit sleeps DELAY s before the allreduce every
# rank makes. "skip": the culprit skips "stall.me" and goes on to the next allreduce.
STALL_JOB = """
import sys, time
import torch
import dadt.torch as dadt
mode, culprit = sys.argv[2], int(sys.argv[3])
dadt.init()
rank = dadt.rank()
print("READY %.6f" % time.time(), flush=True)
if mode == "late":
    if rank == culprit:
        time.sleep(float(sys.argv[4]))
    out = dadt.allreduce(torch.ones(3), name="stall.me", op=dadt.Sum)
    print("SUM %d" % int(out[0].item()), flush=True)
else:
    try:
        if rank != culprit:
            dadt.allreduce(torch.ones(3), name="stall.me")
        dadt.allreduce(torch.ones(3), name="after.skip")
    except Exception as e:
        print("RAISED %s: %s" % (type(e).__name__, " ".join(str(e).split())), flush=True)
        raise
    print("NOT_REACHED", flush=True)
"""


def _stderr_of(output, rank):
    return "\n".join(rank_lines(output, rank=rank, stream="stderr"))


def _ready_times(stdout):
    return [float(line.split()[1]) for line in rank_lines(stdout) if line.startswith("READY ")]


@pytest.mark.parametrize("np", [2, 3])
def test_late_rank_is_named_on_every_rank(job, np):
    culprit = np - 1
    proc, _ = job.run(STALL_JOB, np=np, flags=("--stall-check-warning-time-seconds", "1"),
                      args=("late", culprit, 3.5), timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for r in range(np):
        assert f"SUM {np}" in rank_lines(proc.stdout, rank=r), f"rank {r} did not finish the allreduce"
        err = _stderr_of(proc.stdout + proc.stderr, r)
        assert "stall:" in err, f"rank {r} logged no stall warning:\n{err}"
        assert f"missing rank {culprit}: [stall.me]" in err, f"rank {r}'s warning does not name the culprit:\n{err}"
        assert "tensor 'stall.me' (allreduce)" in err, err
        for other in range(np):
            if other != culprit:
                assert f"missing rank {other}:" not in err, f"rank {other} is wrongly blamed:\n{err}"
    assert wait_no_process(job.marker) == []


@pytest.mark.parametrize("np", [2, 3])
def test_skipped_allreduce_with_shutdown_time_ends_the_job(job, np):
    culprit = np - 1
    proc, _ = job.run(STALL_JOB, np=np,
                      flags=("--stall-check-warning-time-seconds", "1",
                             "--stall-check-shutdown-time-seconds", str(SHUTDOWN_S)),
                      args=("skip", culprit), timeout=180)
    ended = time.time()
    leftovers = wait_no_process(job.marker)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, "dadtrun must exit non-zero after a stall shutdown"
    assert "NOT_REACHED" not in proc.stdout
    ready = _ready_times(proc.stdout)
    assert len(ready) == np, f"not every rank started:\n{output[-3000:]}"
    assert ended - max(ready) < SHUTDOWN_S + LIMIT_S, \
        f"the job took {ended - max(ready):.1f} s to end after a {SHUTDOWN_S} s stall shutdown"
    raised = [r for r in range(np)
              if any(line.startswith("RAISED DadtInternalError") and "stall" in line
                     for line in rank_lines(proc.stdout, rank=r))]
    # Every rank was blocked in a collective, so every rank sees the error (unless dadtrun stopped
    # it first because another rank had already exited with it).
    assert raised, f"no rank raised the stall error:\n{output[-4000:]}"
    for r in raised:
        err = _stderr_of(output, r)
        assert f"missing rank {culprit}: [stall.me]" in err, f"rank {r}'s error does not name the culprit:\n{err}"
        assert "shutting down" in err, err
    assert leftovers == [], f"processes of the job still alive: {leftovers}"


def test_no_stall_check_flag_silences_the_warning(job):
    cmd = job.command(STALL_JOB, np=2, flags=("--no-stall-check",), args=("late", 1, 2.5))
    env = worker_env(DADT_STALL_CHECK_TIME_SECONDS="0.5")  # overridden by the flag
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "stall:" not in proc.stdout + proc.stderr
    # And the same job with the variable alone does warn, so the check above means something.
    cmd = job.command(STALL_JOB, np=2, args=("late", 1, 2.5))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "missing rank 1: [stall.me]" in proc.stdout + proc.stderr
