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


# Like WORKLOAD, but sets the knobs by hand after 10 steps, which ends tuning; bad values raise.
HAND_SET = (
    "import math, torch, dadt.torch as dadt\n"
    "dadt.init()\n"
    "ts = [torch.ones(20000 + 1000 * i) for i in range(20)]\n"
    "for bad in (dict(cycle_time_ms=-1), dict(cycle_time_ms=math.nan), dict(fusion_threshold_bytes=-5)):\n"
    "    try:\n"
    "        dadt.set_fusion_params(**bad)\n"
    "    except ValueError as e:\n"
    "        print('rejected', bad, e)\n"
    "for step in range(60):\n"
    "    if step == 10:\n"
    "        dadt.set_fusion_params(fusion_threshold_bytes=0, cycle_time_ms=2.5)\n"
    "    hs = [dadt.allreduce_async_(t, name='g%d' % i, op=dadt.Sum) for i, t in enumerate(ts)]\n"
    "    for h in hs: dadt.synchronize(h)\n"
    "    assert all(float(t[0]) == dadt.size() for t in ts)\n"
    "    for t in ts: t.fill_(1.0)\n"
    "print('done')\n")


def run(dadtrun, tmp_path, *flags, extra_env=None, workload=WORKLOAD):
    script = tmp_path / "work.py"
    script.write_text(workload)
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
    # The best row is a sampled setting (the one with the best posterior mean), with the model's
    # estimate of its score.
    chosen = (rows[-1]["fusion_threshold_bytes"], rows[-1]["cycle_time_ms"])
    assert chosen in {(r["fusion_threshold_bytes"], r["cycle_time_ms"]) for r in scored}, rows
    assert float(rows[-1]["score_bytes_per_sec"]) > 0
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


def test_setting_the_knobs_by_hand_ends_tuning(dadtrun, tmp_path):
    proc, rows = run(dadtrun, tmp_path, workload=HAND_SET)
    out = proc.stdout
    assert out.count("rejected") == 3 * 2 and out.count("done") == 2, out[-2000:]
    stopped = [ln for ln in proc.stderr.splitlines() if "autotune: stopped after" in ln]
    assert len(stopped) == 1 and "set by hand" in stopped[0], proc.stderr[-2000:]
    assert "autotune: chose" not in proc.stderr
    assert rows and rows[-1]["sample"] != "best" and len(rows) < 6, rows


def test_an_unopenable_log_file_fails_every_rank_naming_it(dadtrun, tmp_path):
    bad = tmp_path / "no-such-dir" / "tune.csv"
    script = tmp_path / "work.py"
    script.write_text("import torch, dadt.torch as dadt\n"
                      "dadt.init()\n"
                      "dadt.allreduce(torch.ones(4), name='x')\n"
                      "print('reached the end')\n")
    proc = subprocess.run([dadtrun, "--gloo", "-np", "2", "--autotune", "--autotune-log-file", str(bad),
                           PY, str(script)], env=worker_env(), capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode != 0
    assert "reached the end" not in proc.stdout
    for rank in (0, 1):
        lines = [ln for ln in proc.stderr.splitlines()
                 if ln.startswith(f"[{rank}]<stderr>:") and str(bad) in ln and "cannot open" in ln]
        assert lines, f"rank {rank} did not name the log file:\n" + proc.stderr[-3000:]
