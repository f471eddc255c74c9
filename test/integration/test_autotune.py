"""`dadtrun --autotune`: the tuner samples fusion threshold and cycle time while a job trains,
logs a CSV (one row per sample, then the best) and one summary line, and fixed knobs stay fixed."""
import csv
import subprocess

from conftest import PY, worker_env

WORKLOAD = (
    "import torch, dadt.torch as dadt\n"
    "dadt.init()\n"
    "ts = [torch.ones(20000 + 1000 * i) for i in range(20)]\n"
    "for step in range(100):\n"
    "    hs = [dadt.allreduce_async_(t, name='g%d' % i, op=dadt.Sum) for i, t in enumerate(ts)]\n"
    "    for h in hs: dadt.synchronize(h)\n"
    "    for t in ts: t.fill_(1.0)\n")


def run(dadtrun, tmp_path, *flags, extra_env=None):
    script = tmp_path / "work.py"
    script.write_text(WORKLOAD)
    log = tmp_path / "tune.csv"
    proc = subprocess.run([dadtrun, "--gloo", "-np", "2", "--autotune", "--autotune-log-file", str(log),
                           "--autotune-warmup-samples", "1", "--autotune-steps-per-sample", "3",
                           "--autotune-bayes-opt-max-samples", "6", *flags, PY, str(script)],
                          env=worker_env(**(extra_env or {})), capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = list(csv.DictReader(open(log)))
    return proc, rows


def test_autotune_logs_every_sample_and_the_best(dadtrun, tmp_path):
    proc, rows = run(dadtrun, tmp_path)
    assert [r["sample"] for r in rows] == ["0", "1", "2", "3", "4", "5", "best"]
    assert {"fusion_threshold_bytes", "cycle_time_ms", "score_bytes_per_sec"} <= set(rows[0])
    scored = rows[:-1]
    best = max(scored, key=lambda r: float(r["score_bytes_per_sec"]))
    assert rows[-1]["fusion_threshold_bytes"] == best["fusion_threshold_bytes"]
    assert len({(r["fusion_threshold_bytes"], r["cycle_time_ms"]) for r in scored}) > 1, "nothing was explored"
    summary = [ln for ln in proc.stderr.splitlines() if "autotune: chose" in ln]
    assert len(summary) == 1 and summary[0].startswith("[0]<stderr>:"), proc.stderr[-2000:]


def test_a_knob_the_user_fixed_is_not_tuned(dadtrun, tmp_path):
    _, rows = run(dadtrun, tmp_path, "--cycle-time-ms", "2")
    assert {r["cycle_time_ms"] for r in rows} == {"2"}, rows
    assert len({r["fusion_threshold_bytes"] for r in rows}) > 1


def test_autotune_flags_need_autotune(dadtrun):
    proc = subprocess.run([dadtrun, "-np", "1", "--autotune-log-file", "x.csv", "true"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode >= 2 and "--autotune" in proc.stderr
