"""Elastic Digits (examples/elastic/train_digits_elastic.py) with TorchState + ElasticSampler at 3
workers, one SIGKILLed mid-epoch: the two survivors go on at size 2 from the last commit, reach
>= 0.90 test accuracy, and every training sample is committed exactly once per epoch (sample ids
counted across ranks). FakeDriver plays the launcher (fake_driver.py). About 30 s."""
import collections
import math
import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fake_driver import FakeDriver  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "elastic", "train_digits_elastic.py")
EPOCHS = 6


def _progress(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [tuple(map(int, line.split())) for line in f.read().splitlines() if line]


def test_digits_survives_a_killed_worker_mid_epoch(tmp_path):
    from sklearn.datasets import load_digits
    n_all = len(load_digits().target)
    n_train = n_all - math.ceil(0.2 * n_all)  # train_test_split's rounding of test_size=0.2
    driver = FakeDriver()
    ids = ["h1/0/1", "h2/0/2", "h3/0/3"]
    procs, progress = [], []
    try:
        for wid in ids:
            prog = str(tmp_path / ("progress_" + wid.replace("/", "_")))
            env = dict(os.environ, **driver.env(), DADT_ELASTIC_WORKER_ID=wid,
                       DADT_GLOO_TIMEOUT_SECONDS="10", DADT_ELASTIC_TIMEOUT="60", OMP_NUM_THREADS="1")
            procs.append(subprocess.Popen(
                [sys.executable, SCRIPT, "--epochs", str(EPOCHS), "--ids-dir", str(tmp_path),
                 "--progress-file", prog, "--step-delay", "0.01"],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            progress.append(prog)
        driver.publish_round(ids)
        deadline = time.monotonic() + 120
        while not any(e == 3 and s >= 7 for e, s in _progress(progress[2])):
            assert time.monotonic() < deadline, "worker 3 never reached epoch 3"
            dead = [p for p in procs if p.poll() is not None]
            assert not dead, dead[0].communicate()[0][-4000:]
            time.sleep(0.02)
        procs[2].send_signal(signal.SIGKILL)
        procs[2].wait()
        driver.publish_round(ids[:2])
        outputs = []
        for p in procs[:2]:
            out, _ = p.communicate(timeout=240)
            outputs.append(out)
            assert p.returncode == 0, out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        driver.close()
    final = [line for line in outputs[0].splitlines() if line.startswith("final test accuracy")]
    assert final and float(final[0].split()[-1]) >= 0.90, outputs[0]
    assert any(" size 2 " in line for line in outputs[0].splitlines()), outputs[0]
    per_epoch = collections.defaultdict(collections.Counter)
    with open(tmp_path / "ids.txt") as f:
        for line in f:
            epoch, *sample_ids = map(int, line.split())
            per_epoch[epoch].update(sample_ids)
    assert sorted(per_epoch) == list(range(1, EPOCHS + 1))
    for epoch, counts in per_epoch.items():
        assert sorted(counts) == list(range(n_train)), "epoch %d lost samples" % epoch
        repeated = [i for i, c in counts.items() if c != 1]
        assert not repeated, "epoch %d repeated samples %s" % (epoch, repeated[:10])
