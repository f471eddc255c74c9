"""`make demo`: examples/pytorch/train_digits.py at 2 ranks reaches a test accuracy >= 0.90."""
import os
import subprocess

from conftest import PY, REPO, assert_digits_run, worker_env


def test_train_digits_two_ranks(dadtrun):
    script = os.path.join(REPO, "examples", "pytorch", "train_digits.py")
    proc = subprocess.run([dadtrun, "--gloo", "-np", "2", PY, script], env=worker_env(), capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL, cwd=REPO)
    assert_digits_run(proc, epochs=30)
