"""dadtrun itself SIGKILLed mid-training. Every remote rank is one ssh client here (started with
PR_SET_PDEATHSIG=SIGKILL) and a wrapper there that kills the rank's process group when the ssh session
ends (docs/running.md, "ssh set-up"): so every rank on every host must be gone within LIMIT_S, with no
orphan on h3 or h4. For an elastic job with --elastic-checkpoint, the last commit rank 0 reported is
the one on disk, whole.
"""
import os
import pickle
import random
import re
import signal
import time

import pytest

from conftest import HOSTS, REPO, host_processes, leftovers

LIMIT_S = 15.0

TRAINING = """
import time
import torch
import dadt.torch as dadt
dadt.init()
x = torch.ones(1000)
for step in range(100000):
    dadt.allreduce(x, name="step")
    if step == 3:
        print("READY", flush=True)
    time.sleep(0.02)
"""


def _kill_launcher_and_time_the_end(job):
    assert all(host_processes(h) for h in HOSTS), "every host should run a rank before the kill"
    os.kill(job.proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    job.proc.wait(10)
    left = leftovers(seconds=LIMIT_S)
    return time.monotonic() - killed, left


@pytest.mark.timeout(90)
def test_sigkilled_launcher_takes_every_rank_down(job, repeat):
    job.start(TRAINING)
    job.wait_line(r"^\[0\]<stdout>:READY", timeout=60)
    job.wait_line(r"^\[1\]<stdout>:READY", timeout=30)
    took, left = _kill_launcher_and_time_the_end(job)
    print(f"every rank gone {took:.2f} s after dadtrun's SIGKILL")
    assert not left, f"ranks still running {LIMIT_S:.0f} s after dadtrun was SIGKILLed: {left}"


COMMITTED = re.compile(r"^\[(h\d)/[^\]]*\]<stdout>:COMMITTED (\d+) ([0-9a-f]+)$")


def committed(job):
    return [(m.group(1), int(m.group(2)), m.group(3)) for _, ln in list(job.out_lines)
            for m in [COMMITTED.match(ln)] if m]


def discovery_flags(ckpt):
    return ("--min-np", "2", "--host-discovery-script", "printf 'h3\\nh4\\n'", "--elastic-checkpoint", str(ckpt))


def read_checkpoint(path):
    """(seq, step, weights digest) of a dadt elastic checkpoint written by elastic_committer.py."""
    import sys
    sys.path.insert(0, os.path.join(REPO, "test", "chaos"))
    from elastic_committer import weights_digest
    from dadt.common.elastic import OBJECTS
    with open(path, "rb") as f:
        data = pickle.load(f)
    assert data["format"] == "dadt.elastic.checkpoint/1", data.keys()
    return data["seq"], data["state"][OBJECTS]["step"], weights_digest(data["state"]["model"])


@pytest.mark.timeout(120)
def test_sigkilled_elastic_launcher_leaves_the_last_commit_on_disk(job, tmp_path, repeat):
    ckpt = tmp_path / "job.ckpt"
    script = os.path.join(REPO, "test", "chaos", "elastic_committer.py")
    job.start(script, args=("--steps", "100000", "--commit-every", "5"), flags=discovery_flags(ckpt),
              hosts_spec=None)
    job.wait_line(r"<stdout>:COMMITTED 15 ", timeout=90)
    time.sleep(random.uniform(0.0, 0.3))  # anywhere in the commit cycle (a step is about 20 ms)
    took, left = _kill_launcher_and_time_the_end(job)
    seen = committed(job)
    print(f"every worker gone {took:.2f} s after dadtrun's SIGKILL; last commit seen: {seen[-1]}")
    assert not left, f"workers still running {LIMIT_S:.0f} s after dadtrun was SIGKILLed: {left}"
    assert {h for h, _, _ in seen} == {"h3"}, f"rank 0 was expected on h3: {seen}"
    seq, step, digest = read_checkpoint(ckpt)
    last_step, last_digest = seen[-1][1], seen[-1][2]
    # The kill may land between rank 0's write of a commit and its print of it: then the file holds
    # the next commit (5 steps on), never an older one.
    assert step in (last_step, last_step + 5), f"checkpoint at step {step}, last commit printed: {last_step}"
    assert seq == step // 5, f"commit {seq} holds step {step}"
    if step == last_step:
        assert digest == last_digest, "the checkpoint's weights are not those of the last commit"
    # A write cut short leaves its temporary file (never the checkpoint torn): at most one.
    partial = [n for n in os.listdir(tmp_path) if n.startswith(".job.ckpt.")]
    assert len(partial) <= 1, partial
