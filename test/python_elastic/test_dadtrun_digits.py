"""Elastic Digits under the real launcher: `dadtrun --gloo -np 3 --min-np 2` runs
examples/elastic/train_digits_elastic.py (TorchState + ElasticSampler) on 3 local slots; the
worker on slot 2 is SIGKILLed mid-epoch. The job goes on at size 2 from the last commit, ends 0,
reaches >= 0.90, commits every sample id exactly once per epoch, and leaves no worker behind.
About 30 s."""
import collections
import math
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "elastic", "train_digits_elastic.py")
EPOCHS = 6


def _dadtrun():
    beside = os.path.join(os.path.dirname(sys.executable), "dadtrun")
    return beside if os.path.exists(beside) else shutil.which("dadtrun")


def _children(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _worker_id(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        return None
    value = env.get(b"DADT_ELASTIC_WORKER_ID")
    return value.decode() if value else None


def test_dadtrun_digits_survives_a_killed_worker(tmp_path):
    dadtrun = _dadtrun()
    if dadtrun is None:
        pytest.skip("dadtrun is not installed beside %s" % sys.executable)
    progress = tmp_path / "progress"
    env = dict(os.environ, DADT_GLOO_TIMEOUT_SECONDS="10")
    launcher = subprocess.Popen(
        [dadtrun, "--gloo", "-np", "3", "--min-np", "2", sys.executable, SCRIPT, "--epochs",
         str(EPOCHS), "--ids-dir", str(tmp_path), "--progress-file", str(progress),
         "--step-delay", "0.01"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    workers = []
    try:
        deadline = time.monotonic() + 120
        victim = None
        while victim is None:
            assert time.monotonic() < deadline, "no worker reached epoch 3"
            assert launcher.poll() is None, launcher.communicate()[0][-4000:]
            lines = progress.read_text().split("\n") if progress.exists() else []
            if any(line.startswith("3 ") and int(line.split()[1]) >= 7 for line in lines):
                workers = [p for p in _children(launcher.pid) if _worker_id(p)]
                victim = next((p for p in workers if _worker_id(p).split("/")[1] == "2"), None)
            time.sleep(0.02)
        os.kill(victim, signal.SIGKILL)
        out, _ = launcher.communicate(timeout=240)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    print("\n".join(line for line in out.splitlines()
                    if "dadtrun: elastic:" in line or "accuracy" in line))
    assert launcher.returncode == 0, out[-6000:]
    assert "killed by SIGKILL" in out and "round 2: 2 workers" in out, out[-6000:]
    final = [line for line in out.splitlines() if "final test accuracy" in line]
    assert final and float(final[0].split()[-1]) >= 0.90, out[-6000:]
    for pid in workers:
        assert not os.path.exists("/proc/%d" % pid) or _worker_id(pid) is None, pid
    n_all = 1797
    n_train = n_all - math.ceil(0.2 * n_all)
    per_epoch = collections.defaultdict(collections.Counter)
    with open(tmp_path / "ids.txt") as f:
        for line in f:
            epoch, *sample_ids = map(int, line.split())
            per_epoch[epoch].update(sample_ids)
    assert sorted(per_epoch) == list(range(1, EPOCHS + 1))
    for epoch, counts in per_epoch.items():
        assert sorted(counts) == list(range(n_train)), "epoch %d lost samples" % epoch
        assert set(counts.values()) == {1}, "epoch %d repeated samples" % epoch
