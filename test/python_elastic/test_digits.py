"""Elastic Digits (examples/elastic/train_digits_elastic.py) with TorchState + ElasticSampler:

- 3 workers, one SIGKILLed mid-epoch: the two survivors go on at size 2 from the last commit;
- 2 workers, a third added mid-epoch (a host-update notice, then a round of 3): it joins at the
  next commit and the world grows to 3;
- 3 workers, one removed gracefully (a "removed" notice, then a round without it): it exits 0 at
  the next commit, the others go on at size 2 (and agree to skip the sync).

Either way the job reaches >= 0.90 test accuracy and every training sample is committed exactly
once per epoch (sample ids counted across ranks). FakeDriver plays the launcher (fake_driver.py).
About 35 s for the three."""
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


def _n_train():
    from sklearn.datasets import load_digits
    n_all = len(load_digits().target)
    return n_all - math.ceil(0.2 * n_all)  # train_test_split's rounding of test_size=0.2


def _spawn(driver, wid, tmp_path):
    prog = str(tmp_path / ("progress_" + wid.replace("/", "_")))
    env = dict(os.environ, **driver.env(), DADT_ELASTIC_WORKER_ID=wid,
               DADT_GLOO_TIMEOUT_SECONDS="10", DADT_ELASTIC_TIMEOUT="60", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, SCRIPT, "--epochs", str(EPOCHS), "--ids-dir", str(tmp_path),
         "--progress-file", prog, "--step-delay", "0.01"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, prog


def _wait_for_progress(prog, epoch, step, procs):
    deadline = time.monotonic() + 120
    while not any(e == epoch and s >= step for e, s in _progress(prog)):
        assert time.monotonic() < deadline, "no progress to epoch %d step %d" % (epoch, step)
        dead = [p for p in procs if p.poll() is not None]
        assert not dead, dead[0].communicate()[0][-4000:]
        time.sleep(0.02)


def _finish(procs):
    outputs = []
    for p in procs:
        out, _ = p.communicate(timeout=240)
        outputs.append(out)
        assert p.returncode == 0, out[-4000:]
    return outputs


def _check(output, final_size, ids_path):
    final = [line for line in output.splitlines() if line.startswith("final test accuracy")]
    assert final and float(final[0].split()[-1]) >= 0.90, output
    sizes = [line.split()[3] for line in output.splitlines() if line.startswith("epoch ")]
    assert sizes[-1] == str(final_size), output
    per_epoch = collections.defaultdict(collections.Counter)
    with open(ids_path) as f:
        for line in f:
            epoch, *sample_ids = map(int, line.split())
            per_epoch[epoch].update(sample_ids)
    assert sorted(per_epoch) == list(range(1, EPOCHS + 1))
    n_train = _n_train()
    for epoch, counts in per_epoch.items():
        assert sorted(counts) == list(range(n_train)), "epoch %d lost samples" % epoch
        repeated = [i for i, c in counts.items() if c != 1]
        assert not repeated, "epoch %d repeated samples %s" % (epoch, repeated[:10])


def _kill_all(procs, driver):
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    driver.close()


def test_digits_survives_a_killed_worker_mid_epoch(tmp_path):
    driver = FakeDriver()
    ids = ["h1/0/1", "h2/0/2", "h3/0/3"]
    procs, progress = [], []
    try:
        for wid in ids:
            proc, prog = _spawn(driver, wid, tmp_path)
            procs.append(proc)
            progress.append(prog)
        driver.publish_round(ids)
        _wait_for_progress(progress[2], 3, 7, procs)
        procs[2].send_signal(signal.SIGKILL)
        procs[2].wait()
        driver.publish_round(ids[:2])
        outputs = _finish(procs[:2])
    finally:
        _kill_all(procs, driver)
    _check(outputs[0], 2, tmp_path / "ids.txt")


def test_digits_grows_when_a_host_is_added(tmp_path):
    driver = FakeDriver()
    ids = ["h1/0/1", "h2/0/2"]
    procs, progress = [], []
    try:
        for wid in ids:
            proc, prog = _spawn(driver, wid, tmp_path)
            procs.append(proc)
            progress.append(prog)
        driver.publish_round(ids)
        _wait_for_progress(progress[0], 2, 7, procs)
        proc, prog = _spawn(driver, "h3/0/3", tmp_path)
        procs.append(proc)
        driver.publish_notice("added")
        driver.publish_round(ids + ["h3/0/3"])
        outputs = _finish(procs)
    finally:
        _kill_all(procs, driver)
    _check(outputs[0], 3, tmp_path / "ids.txt")


def test_digits_shrinks_when_a_host_is_removed(tmp_path):
    driver = FakeDriver()
    ids = ["h1/0/1", "h2/0/2", "h3/0/3"]
    procs, progress = [], []
    try:
        for wid in ids:
            proc, prog = _spawn(driver, wid, tmp_path)
            procs.append(proc)
            progress.append(prog)
        driver.publish_round(ids)
        _wait_for_progress(progress[0], 2, 7, procs)
        driver.publish_notice("removed")
        driver.publish_round(ids[:2], removed=ids[2:])
        outputs = _finish(procs)  # every one exits 0, the removed one too
    finally:
        _kill_all(procs, driver)
    assert "was removed from the job" in outputs[2], outputs[2][-4000:]
    _check(outputs[0], 2, tmp_path / "ids.txt")
