"""A rank much slower than the other, and a frozen one.

- One rank 10 times slower (a sleep in its step, longer than DADT_GLOO_TIMEOUT_SECONDS): no time-out
  fires, every allreduce is right, the job finishes; the stall inspector, set to a threshold below the
  slow rank's lateness, names that rank and no other.
- A SIGSTOPped rank needs liveness time-outs (issue 33 item 1): skipped until dadtrun has
  --liveness-timeout-seconds; then the job must end within the time-out with a warning naming the
  frozen rank and its host, and dadtrun's last line naming the rank.
- A SIGSTOPped worker of an elastic job (h3 and h4, --min-np 1): the survivor names it, dadtrun's
  elastic driver kills it and drops its host, and the job goes on and finishes on h3 with every step
  counted once; a SIGCONT sent after the kill finds nothing to resume.
"""
import os
import re
import signal
import time

import pytest

from conftest import (ENDLESS, check_went_on_without_rank_1, host_processes, launcher_lines, liveness_flags,
                      needs_liveness, start_elastic_committer, worker_env)

STEPS = 5
FAST_S, SLOW_S = 0.12, 1.2  # rank 1 sleeps 10x longer than rank 0 before each allreduce
GLOO_TIMEOUT_S = 1  # below SLOW_S: it bounds a collective's transfers, never the wait for a late rank
STALL_WARNING_S = 0.5

SLOW_RANK = f"""
import time
import torch
import dadt.torch as dadt
dadt.init()
rank = dadt.rank()
for step in range({STEPS}):
    time.sleep({SLOW_S} if rank == 1 else {FAST_S})
    # 20000 floats: above DADT_EAGER_THRESHOLD, so the data travel through Gloo's ring.
    out = dadt.allreduce(torch.full((20000,), float(rank + 1 + step)), name="slow.step", op=dadt.Sum)
    assert bool((out == float(3 + 2 * step)).all()), (step, out[:4])
print("DONE", flush=True)
"""


@pytest.mark.timeout(90)
def test_one_rank_ten_times_slower(job, repeat):
    env = worker_env(DADT_GLOO_TIMEOUT_SECONDS=str(GLOO_TIMEOUT_S))
    rc, took = job.run(SLOW_RANK, flags=("--stall-check-warning-time-seconds", str(STALL_WARNING_S)), env=env,
                       timeout=75)
    print(f"slow rank: {took:.1f} s")
    assert rc == 0, job.dump()
    done = sorted(ln for _, ln in job.out_lines if ln.endswith(":DONE"))
    assert done == ["[0]<stdout>:DONE", "[1]<stdout>:DONE"], job.dump()
    err = job.stderr
    assert not re.search(r"timed out|Timeout|aborted|DadtInternalError", err), f"a time-out fired:\n{job.dump()}"
    named = re.findall(r"tensor 'slow\.step' \(allreduce\) waiting [\d.]+ s: submitted by rank\(s\) (\S+), "
                       r"missing rank\(s\) (\S+)", err)
    assert named, f"the stall inspector did not name the slow rank:\n{job.dump()}"
    assert set(named) == {("0", "1")}, f"the stall warnings name other ranks than rank 1: {named}"


@needs_liveness
@pytest.mark.timeout(90)
def test_sigstopped_rank_ends_the_job(job, repeat):
    flags, end_s = liveness_flags()
    job.start(ENDLESS, flags=flags)
    job.wait_line(r"^\[1\]<stdout>:READY", timeout=60)
    ranks = [pid for pid, cmd in host_processes("h4") if job.marker in cmd and not cmd.startswith("/bin/sh")]
    assert len(ranks) == 1, host_processes("h4")
    os.kill(ranks[0], signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        rc = job.wait(end_s * 3 + 30)
        ended = time.monotonic()
    finally:
        try:
            os.kill(ranks[0], signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert rc != 0, job.dump()
    assert ended - stopped < end_s + 10, f"the job took {ended - stopped:.1f} s to end after the SIGSTOP"
    named = [ln for _, ln in job.err_lines if re.search(r"\brank 1\b", ln) and re.search(r"\bh4\b", ln)]
    assert named, f"no warning names rank 1 on h4:\n{job.dump()}"
    last = launcher_lines(job.stderr)
    assert last and re.search(r"\brank 1\b", last[-1]), f"dadtrun's last line does not name rank 1:\n{job.dump()}"


@needs_liveness
@pytest.mark.timeout(150)
def test_sigstopped_elastic_worker_is_dropped_and_the_job_goes_on(job, repeat):
    end_s = start_elastic_committer(job)
    workers = [pid for pid, cmd in host_processes("h4") if job.marker in cmd and not cmd.startswith("/bin/sh")]
    assert len(workers) == 1, host_processes("h4")
    os.kill(workers[0], signal.SIGSTOP)
    stopped = time.monotonic()
    job.wait_line(r"elastic: rank 1 \(worker h4/\S+\) on host h4 stopped answering.*; killing it",
                  timeout=end_s + 20, stream="err")
    killed = time.monotonic()
    try:
        os.kill(workers[0], signal.SIGCONT)  # too late: it is gone, or goes at once
    except ProcessLookupError:
        pass
    rc = job.wait(120)
    print(f"frozen worker killed {killed - stopped:.1f} s after its SIGSTOP")
    assert killed - stopped < end_s + 10, f"the driver killed the frozen worker {killed - stopped:.1f} s after it stopped"
    check_went_on_without_rank_1(job, rc)
    assert not [c for _, c in host_processes("h4") if job.marker in c], host_processes("h4")
