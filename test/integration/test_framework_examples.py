"""examples/{tensorflow,keras,jax}/train_digits.py at 2 ranks each reach a test accuracy >= 0.90."""
import os
import re
import subprocess

import pytest

from conftest import PY, REPO, rank_lines, worker_env


@pytest.mark.parametrize("framework", ["tensorflow", "keras", "jax"])
def test_train_digits_two_ranks(dadtrun, framework):
    script = os.path.join(REPO, "examples", framework, "train_digits.py")
    proc = subprocess.run([dadtrun, "--gloo", "-np", "2", PY, script], env=worker_env(TF_CPP_MIN_LOG_LEVEL="2"),
                          capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = rank_lines(proc.stdout, rank=0)
    epochs = [ln for ln in lines if ln.startswith("epoch ")]
    assert len(epochs) == 20, f"expected 20 epoch lines, got {len(epochs)}: {proc.stdout[-2000:]}"
    for ln in epochs:
        assert re.fullmatch(r"epoch \d+ loss \d+\.\d{4} accuracy [01]\.\d{4}", ln), ln
    m = re.fullmatch(r"final test accuracy: ([01]\.\d{4})", lines[-1])
    assert m, f"last line of rank 0: {lines[-1]!r}"
    assert float(m.group(1)) >= 0.90, lines[-1]
    assert rank_lines(proc.stdout, rank=1) == [], "only rank 0 prints"
