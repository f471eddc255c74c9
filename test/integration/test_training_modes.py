"""Convergence of mode="async": on the digits data, with the same epochs and learning-rate schedule,
its final test accuracy is within 1.0 point of mode="sync"'s, at 2 and 4 ranks
(examples/pytorch/train_digits.py under dadtrun)."""
import os
import re
import subprocess

import pytest

from conftest import PY, REPO, rank_lines, worker_env

SCRIPT = os.path.join(REPO, "examples", "pytorch", "train_digits.py")
# Same for every mode: 40 epochs, base learning rate 0.0125 x size, halved every 15 epochs.
SCHEDULE = ["--epochs", "40", "--lr", "0.0125", "--lr-step-epochs", "15"]


def _final_accuracy(dadtrun, np, mode, options=SCHEDULE):
    """Rank 0's final test accuracy (percent) of train_digits.py with `options`."""
    cmd = [dadtrun, "--gloo", "-np", str(np), PY, SCRIPT, "--mode", mode] + list(options)
    proc = subprocess.run(cmd, env=worker_env(), capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL, cwd=REPO)
    assert proc.returncode == 0, "%s\n%s" % (" ".join(cmd), proc.stderr[-3000:])
    lines = rank_lines(proc.stdout, rank=0)
    m = re.fullmatch(r"final test accuracy: ([01]\.\d{4})", lines[-1] if lines else "")
    assert m, "last line of rank 0: %r" % (lines[-1:] or proc.stdout[-500:],)
    return 100.0 * float(m.group(1))


@pytest.mark.parametrize("np", [2, 4])
def test_async_accuracy_within_one_point_of_sync(dadtrun, np):
    sync = _final_accuracy(dadtrun, np, "sync")
    asynchronous = _final_accuracy(dadtrun, np, "async")
    assert sync >= 90.0, "sync did not train: %.2f%%" % sync
    assert abs(asynchronous - sync) <= 1.0, "async %.2f%% vs sync %.2f%%" % (asynchronous, sync)



@pytest.mark.parametrize("mode,extra", [("local_sgd", []), ("diloco", []),
                                        ("diloco", ["--compression", "int8"]), ("easgd", [])],
                         ids=["local_sgd", "diloco", "diloco-int8", "easgd"])
def test_modes_that_send_less_train_digits(dadtrun, mode, extra):
    """train_digits.py at its defaults (30 epochs, lr 0.05 x size, --sync-every 8): each rank steps
    alone and the model is exchanged every 8 steps; still >= 90% at 2 ranks."""
    accuracy = _final_accuracy(dadtrun, 2, mode, extra)
    assert accuracy >= 90.0, "%s %s: %.2f%%" % (mode, extra, accuracy)


def test_powersgd_trains_digits(dadtrun):
    """mode="sync" with Compression.powersgd (train_digits.py's defaults: rank 2, plain allreduces
    for the first 20 steps): both weight matrices travel as rank-2 factors, >= 90% at 2 ranks."""
    accuracy = _final_accuracy(dadtrun, 2, "sync", ["--compression", "powersgd"])
    assert accuracy >= 90.0, "powersgd: %.2f%%" % accuracy


def test_hogwild_trains_digits_and_refuses_two_hosts(dadtrun):
    """mode="hogwild" (train_digits.py's defaults, the learning rate of one rank: every rank steps
    the same weights): >= 90% at 2 ranks on one host. The same job placed on two host entries
    (local_size() 1 of size() 2) is refused on both ranks with an error naming them."""
    accuracy = _final_accuracy(dadtrun, 2, "hogwild", [])
    assert accuracy >= 90.0, "hogwild: %.2f%%" % accuracy
    cmd = [dadtrun, "--gloo", "-np", "2", "-H", "localhost:1,127.0.0.1:1", PY, SCRIPT,
           "--mode", "hogwild", "--epochs", "1"]
    proc = subprocess.run(cmd, env=worker_env(), capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, cwd=REPO)
    assert proc.returncode != 0, proc.stdout[-2000:]
    for rank in (0, 1):
        errors = "\n".join(rank_lines(proc.stdout + proc.stderr, rank=rank, stream="stderr"))
        assert "not all on one host: local_size() is 1 on rank(s) 0, 1, not size() = 2" in errors, \
            "rank %d:\n%s" % (rank, errors[-2000:])
