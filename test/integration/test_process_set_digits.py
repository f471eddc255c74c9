"""examples/pytorch/train_digits_process_sets.py at 4 ranks: ranks 0 and 1 train with
DistributedOptimizer(process_set=...) to a test accuracy >= 0.90 while ranks 2 and 3 run and check
allreduces of their own set under the same collective name."""
import os
import re
import subprocess

from conftest import PY, REPO, rank_lines, worker_env


def test_digits_on_a_process_set_of_two_out_of_four(dadtrun):
    script = os.path.join(REPO, "examples", "pytorch", "train_digits_process_sets.py")
    proc = subprocess.run([dadtrun, "--gloo", "-np", "4", PY, script], env=worker_env(),
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = rank_lines(proc.stdout, rank=0)
    assert len([ln for ln in lines if ln.startswith("epoch ")]) == 30, proc.stdout[-2000:]
    m = re.fullmatch(r"final test accuracy: ([01]\.\d{4})", lines[-1] if lines else "")
    assert m, proc.stdout[-2000:]
    assert float(m.group(1)) >= 0.90, lines[-1]
    assert rank_lines(proc.stdout, rank=2) == ["others [2, 3]: 30 allreduces checked"], \
        proc.stdout[-2000:]
    assert rank_lines(proc.stdout, rank=1) == rank_lines(proc.stdout, rank=3) == []
