"""Elastic Keras model.fit (examples/elastic/keras_digits_elastic.py: KerasState, CommitState-,
UpdateBatchState- and UpdateEpochStateCallback) at 3 workers, one SIGKILLed mid-epoch: the
survivors go on at size 2 from the last commit and reach >= 0.90 test accuracy; in mode="sync"
and in streaming mode="local_sgd" (killed mid-window with an exchange in flight: the exchange
state rolls back with the model).
FakeDriver plays the launcher (fake_driver.py). About 60 s each (TensorFlow's start-up on each
worker)."""
import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fake_driver import FakeDriver  # noqa: E402

pytest.importorskip("keras")
pytest.importorskip("tensorflow")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "elastic", "keras_digits_elastic.py")


def _progress(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [tuple(map(int, line.split())) for line in f.read().splitlines() if line]


@pytest.mark.parametrize("mode", [[], ["--mode", "local_sgd", "--sync-every", "8", "--streaming"]],
                         ids=["sync", "local_sgd-streaming"])
def test_keras_fit_survives_a_killed_worker(tmp_path, mode):
    driver = FakeDriver()
    ids = ["h1/0/1", "h2/0/2", "h3/0/3"]
    procs, progress = [], []
    try:
        for wid in ids:
            prog = str(tmp_path / ("progress_" + wid.replace("/", "_")))
            env = dict(os.environ, **driver.env(), DADT_ELASTIC_WORKER_ID=wid,
                       DADT_GLOO_TIMEOUT_SECONDS="10", DADT_ELASTIC_TIMEOUT="120",
                       OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow")
            procs.append(subprocess.Popen(
                [sys.executable, SCRIPT, "--epochs", "10", "--progress-file", prog,
                 "--step-delay", "0.01"] + mode,
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            progress.append(prog)
        driver.publish_round(ids)
        deadline = time.monotonic() + 240
        while not any(e >= 2 and b >= 7 for e, b in _progress(progress[2])):
            assert time.monotonic() < deadline, "worker 3 never reached epoch 2"
            dead = [p for p in procs if p.poll() is not None]
            assert not dead, dead[0].communicate()[0][-4000:]
            time.sleep(0.02)
        procs[2].send_signal(signal.SIGKILL)
        procs[2].wait()
        driver.publish_round(ids[:2])
        outputs = []
        for p in procs[:2]:
            out, _ = p.communicate(timeout=300)
            outputs.append(out)
            assert p.returncode == 0, out[-4000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        driver.close()
    final = [line for line in outputs[0].splitlines() if line.startswith("final test accuracy")]
    assert final, outputs[0][-4000:]
    words = final[0].split()
    assert float(words[3]) >= 0.90 and words[-1] == "2)", final[0]
