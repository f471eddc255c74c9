"""Every original worker replaced (docs/elastic.md, "When every host is replaced"): elastic Digits
with DADT_ELASTIC_CHECKPOINT, 2 workers SIGKILLed together mid-epoch, then 2 new workers in a new
round. The new rank 0 loads the checkpoint the old rank 0 wrote at the last commit: training
restarts at that commit's epoch, sampler progress and exact weights, and reaches >= 0.90 test
accuracy. FakeDriver plays the launcher (fake_driver.py). About 15 s."""
import hashlib
import os
import pickle
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fake_driver import FakeDriver  # noqa: E402
from test_digits import SCRIPT, _finish, _kill_all, _wait_for_progress  # noqa: E402

EPOCHS = 5


def _spawn(driver, wid, tmp_path):
    prog = str(tmp_path / ("progress_" + wid.replace("/", "_")))
    env = dict(os.environ, **driver.env(), DADT_ELASTIC_WORKER_ID=wid,
               DADT_ELASTIC_CHECKPOINT=str(tmp_path / "digits.ckpt"),
               DADT_GLOO_TIMEOUT_SECONDS="10", DADT_ELASTIC_TIMEOUT="60", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, SCRIPT, "--epochs", str(EPOCHS), "--progress-file", prog,
         "--state-log", str(tmp_path / "state.log"), "--step-delay", "0.01"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, prog


def _digest(state_dict):  # as train_digits_elastic.weights_digest
    digest = hashlib.sha256()
    for name, tensor in sorted(state_dict.items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _state_log(tmp_path):
    with open(tmp_path / "state.log") as f:
        return [line.split() for line in f.read().splitlines()]


def test_new_workers_resume_from_the_checkpoint_when_every_original_one_died(tmp_path):
    driver = FakeDriver()
    old_ids, new_ids = ["h1/0/1", "h2/0/2"], ["h3/0/3", "h4/0/4"]
    procs = []
    try:
        old = [_spawn(driver, wid, tmp_path) for wid in old_ids]
        procs += [p for p, _ in old]
        driver.publish_round(old_ids)
        _wait_for_progress(old[0][1], 3, 7, procs)
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait()
        with open(tmp_path / "digits.ckpt", "rb") as f:
            committed = pickle.load(f)
        new = [_spawn(driver, wid, tmp_path) for wid in new_ids]
        procs += [p for p, _ in new]
        driver.publish_round(new_ids)
        outputs = _finish(procs[2:])
    finally:
        _kill_all(procs, driver)
    state = committed["state"]
    epoch, processed = state["<objects>"]["epoch"], state["train_sampler"]["processed_num"]
    assert epoch == 3 and processed > 0, committed  # killed after a commit in epoch 3
    assert "resuming from commit %d in %s" % (committed["seq"], tmp_path / "digits.ckpt") in \
        outputs[0], outputs[0][-4000:]
    starts = _state_log(tmp_path)
    assert starts[0][:2] == ["1", "0"]  # the original workers started afresh
    assert starts[-1] == [str(epoch), str(processed), _digest(state["model"])], starts
    final = [line for line in outputs[0].splitlines() if line.startswith("final test accuracy")]
    assert final and float(final[0].split()[-1]) >= 0.90, outputs[0][-4000:]
    epochs_run = [int(line.split()[1]) for line in outputs[0].splitlines()
                  if line.startswith("epoch ")]
    assert epochs_run and epochs_run[0] == epoch and epochs_run[-1] == EPOCHS, outputs[0]
