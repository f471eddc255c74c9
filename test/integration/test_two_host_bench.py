"""examples/benchmarks/two_host_bench.sh: the collectives table and the training-modes table over a
tbf-shaped link between two network-namespace hosts, with a tiny model; collectives_bench.py and
real_models.py on one host (what is checked is the scripts, not the speed)."""
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import PY, REPO, worker_env
from test_multihost import _why_no_namespaces

SCRIPT = os.path.join(REPO, "examples", "benchmarks", "two_host_bench.sh")
TINY = ["--layers", "2", "--width", "64", "--batch-size", "8", "--rounds", "1", "--chunks", "1",
        "--steps", "1", "--warmup-steps", "1"]


def _qdiscs(dev):
    return subprocess.run(["tc", "qdisc", "show", "dev", dev], capture_output=True, text=True).stdout


def test_table_of_every_mode_and_the_shaping_removed(dadtrun):
    why = _why_no_namespaces() or (None if shutil.which("tc") else "tc(8) not found (iproute2)")
    if why:
        pytest.skip(why)
    env = worker_env()
    env.update(PYTHON=PY, DADTRUN=dadtrun)
    proc = subprocess.run(["bash", SCRIPT] + TINY, env=env, capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(r"^shaping: qdisc tbf .*rate 1Gbit", out, re.M), out
    assert re.search(r"^link h1 -> h2: \d+\.\d MB/s", out, re.M), out
    # collectives_bench.py's table: every tensor size, a time and a rate for each collective
    for size in ("44 x 1 MB", "11 x 4 MB", "4 x 11 MB", "1 x 44 MB"):
        assert re.search(r"^\| %s( \| \d+){6} \|$" % size, out, re.M), out
    for mode in ("sync", "async", "dear", "ddp"):
        assert re.search(r"^\| %s \| 2 \| \d+\.\d \| .* \| \d+\.\d\dx \| \d+%% \|$" % mode, out, re.M), out
    assert re.search(r"^sync vs ddp: \d+\.\d\dx", out, re.M), out
    for dev in ("dadt-h1", "dadt-h2"):
        assert "tbf" not in _qdiscs(dev), "the shaping on %s outlived the script" % dev


@pytest.mark.parametrize("submit,busy", [("together", False), ("pipelined", False),
                                         ("one-by-one", False), ("one-by-one", True)])
def test_collectives_bench_one_host(dadtrun, submit, busy):
    """Each submit order of collectives_bench.py, and a busy compute thread beside each rank,
    completes and prints one row per tensor size (2 MB as 2 x 1 MB and 1 x 2 MB; one host)."""
    env = worker_env()
    env.update(DADTRUN=dadtrun)
    script = os.path.join(REPO, "examples", "benchmarks", "collectives_bench.py")
    proc = subprocess.run([PY, script, "--np", "2", "--total-mb", "2", "--sizes-mb", "1,2",
                           "--repeats", "1", "--submit", submit] + (["--busy-thread"] if busy else []),
                          env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "tensors submitted %s" % submit in proc.stdout, proc.stdout
    assert ("a busy compute thread beside each rank" in proc.stdout) == busy, proc.stdout
    for size in ("2 x 1 MB", "1 x 2 MB"):
        assert re.search(r"^\| %s( \| \d+){6} \|$" % size, proc.stdout, re.M), proc.stdout


def test_real_models_one_host_prints_the_floors_and_every_mode(dadtrun, tmp_path):
    """real_models.py end to end on one host with the many-tensor model: DDP and dadt's three modes
    run, each dadt launch measures C and P (peers.py's overlapped_step), the header states the
    overlap floor and the table bounds every mode by it (dear's reduce-scatters and all-gathers
    go through shared memory here)."""
    env = worker_env()
    env.update(DADTRUN=dadtrun)
    script = os.path.join(REPO, "examples", "benchmarks", "real_models.py")
    saved = tmp_path / "run.json"
    proc = subprocess.run([PY, script, "--np", "2", "--models", "many-tensor", "--contenders",
                           "ddp,sync,async,dear", "--batch", "4", "--rounds", "1", "--chunks", "1",
                           "--steps", "2", "--warmup-steps", "1", "--phase-reps", "1", "--json", str(saved)],
                          env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    m = re.search(r"^C \(forward, backward and the optimizer's update, alone\) ([\d.]+) ms; P \(the same "
                  r"while one allreduce of all gradients is in flight\) ([\d.]+) ms", out, re.M)
    assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0, out
    assert re.search(r"^DDP's step [\d.]+ ms: a synchronous step could lead it by [\d.]+x at most "
                     r"\([\d.]+x over the overlap floor\)$", out, re.M), out
    for mode in ("sync", "async", "dear"):
        assert re.search(r"^\| %s \|.* \| [\d.]+x \| [\d.]+x \|$" % mode, out, re.M), out
    runs = json.loads(saved.read_text())["runs"]["many-tensor"][0]
    for mode in ("sync", "async", "dear"):
        assert runs[mode]["overlap_step_s"] > 0 and runs[mode]["compute_s"] > 0, runs[mode]
