"""Elastic Digits under the real launcher: `dadtrun --gloo -np 3 --min-np 2` runs
examples/elastic/train_digits_elastic.py (TorchState + ElasticSampler) on 3 local slots; the
worker on slot 2 is SIGKILLed mid-epoch. The job goes on at size 2 from the last commit, ends 0,
reaches >= 0.90, commits every sample id exactly once per epoch, and leaves no worker behind.
About 30 s."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from elastic_digits_checks import (TORCH_SCRIPT, assert_each_sample_once, children,  # noqa: E402
                                   final_accuracy, reached, worker_id)

EPOCHS = 6


def _dadtrun():
    beside = os.path.join(os.path.dirname(sys.executable), "dadtrun")
    return beside if os.path.exists(beside) else shutil.which("dadtrun")


def test_dadtrun_digits_survives_a_killed_worker(tmp_path):
    dadtrun = _dadtrun()
    if dadtrun is None:
        pytest.skip("dadtrun is not installed beside %s" % sys.executable)
    progress = tmp_path / "progress"
    env = dict(os.environ, DADT_GLOO_TIMEOUT_SECONDS="10")
    launcher = subprocess.Popen(
        [dadtrun, "--gloo", "-np", "3", "--min-np", "2", sys.executable, TORCH_SCRIPT, "--epochs",
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
            if reached(progress, 3, 7):
                workers = [p for p in children(launcher.pid) if worker_id(p)]
                victim = next((p for p in workers if worker_id(p).split("/")[1] == "2"), None)
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
    assert final_accuracy(out) >= 0.90, out[-6000:]
    for pid in workers:
        assert not os.path.exists("/proc/%d" % pid) or worker_id(pid) is None, pid
    assert_each_sample_once(tmp_path, EPOCHS)
