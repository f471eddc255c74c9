"""examples/{tensorflow,keras,jax}/train_digits.py at 2 ranks each reach a test accuracy >= 0.90."""
import os
import subprocess

import pytest

from conftest import PY, REPO, assert_digits_run, worker_env


@pytest.mark.parametrize("framework", ["tensorflow", "keras", "jax"])
def test_train_digits_two_ranks(dadtrun, framework):
    script = os.path.join(REPO, "examples", framework, "train_digits.py")
    proc = subprocess.run([dadtrun, "--gloo", "-np", "2", PY, script], env=worker_env(TF_CPP_MIN_LOG_LEVEL="2"),
                          capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL, cwd=REPO)
    assert_digits_run(proc, epochs=20)
