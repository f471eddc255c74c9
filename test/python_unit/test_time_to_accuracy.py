"""examples/benchmarks/time_to_accuracy.py, its pure parts: the split of the standard library by
module (no validation module is trained on, and the ranks' shards do not overlap), the budget's
rounding, the arguments, the time to the target loss and the table re-printed from a saved run.
Plain pytest: nothing is launched and nothing is trained."""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BENCH = os.path.join(REPO, "examples", "benchmarks")
sys.path.insert(0, BENCH)

import time_to_accuracy as tta  # noqa: E402


def _modules():
    return ["pkg%d/mod%d.py" % (i // 10, i) for i in range(500)] + ["os.py", "json/__init__.py"]


def test_validation_modules_are_never_trained_on():
    paths = _modules()
    train, val = tta.split_modules(paths, 0.1)
    assert not set(train) & set(val)
    assert sorted(train + val) == sorted(paths)
    assert 20 < len(val) < 90  # about a tenth
    # The split depends on the path alone: the same in any order and on every host.
    assert tta.split_modules(list(reversed(paths)), 0.1) == (train, val)
    assert tta.split_modules(paths, 0.0)[1] == []


def test_the_ranks_shards_cover_the_training_modules_once():
    train, _ = tta.split_modules(_modules(), 0.1)
    for size in (1, 2, 3, 4, 7):
        shards = [tta.rank_files(train, r, size) for r in range(size)]
        flat = [p for s in shards for p in s]
        assert sorted(flat) == sorted(train) and len(flat) == len(set(flat))


def test_the_real_stdlib_split_holds_out_whole_modules():
    import sysconfig
    paths = tta.stdlib_modules(sysconfig.get_paths()["stdlib"])
    assert paths and not any("site-packages" in p for p in paths)
    train, val = tta.split_modules(paths, 0.1)
    assert val and not set(train) & set(val)


def test_validation_windows_fit_the_stream():
    offs = tta.val_offsets(1000, 5, 65)
    assert offs[0] == 0 and offs[-1] == 1000 - 65 and offs == sorted(offs)
    with pytest.raises(ValueError):
        tta.val_offsets(10, 2, 65)


def test_budget_rounds_up_to_whole_periods_and_evaluation_intervals():
    # 2 ranks x 16 windows = 32 samples a step; 1000 samples between evaluations = 32 steps -> 40
    # (two periods of 20); 4000 samples = 125 steps -> 160 (four intervals of 40).
    assert tta.budget(4000, 1000, 16, 2, 20) == (160, 40)
    assert tta.budget(640, 640, 16, 2, 20) == (20, 20)
    assert tta.budget(1, 1, 16, 2, 20) == (20, 20)


def test_arguments():
    args = tta.parse_args([])
    assert args.names == list(tta.CONTENDERS) and args.np == 2 and args.rounds == 3
    assert args.tune_grid == [5e-4, 1e-3, 2e-3]
    assert tta.parse_args(["--hosts", "h1:2,h2:2"]).np == 4
    assert tta.parse_args(["--contenders", "ddp,local_sgd", "--sync-every", "5"]).names == ["ddp", "local_sgd"]
    with pytest.raises(SystemExit):
        tta.parse_args(["--contenders", "ddp,nope"])
    with pytest.raises(SystemExit):  # streaming: 4 fragments, delay 1 < H // 4
        tta.parse_args(["--sync-every", "4"])


def _pts(*pairs):
    """Evaluation points every 50 steps (1600 samples of a 3200-sample budget on two ranks)."""
    return [{"wall_s": w, "val_loss": l, "step": 50 * i, "samples": 1600 * i, "tag": "step"}
            for i, (w, l) in enumerate(pairs)]


def test_time_to_target_interpolates_between_evaluations():
    pts = _pts((0.0, 5.0), (10.0, 3.0), (20.0, 2.0))
    assert tta.time_to_target(pts, 2.5) == pytest.approx(15.0)
    assert tta.time_to_target(pts, 3.0) == pytest.approx(10.0)
    assert tta.time_to_target(pts, 1.9) is None
    assert tta.time_to_target(pts, 6.0) == 0.0


def test_computed_bytes():
    args = tta.parse_args(["--sync-every", "20", "--post-local-warmup", "0", "--hosts", "h1:1,h2:1"])
    p = 1000
    full = 4 * p  # two ranks: a ring allreduce sends 2(n-1)/n = 1x the payload
    assert tta.computed_bytes("ddp", p, [[p]], 2, 100, args) == full
    assert tta.computed_bytes("ddp-fp16", p, [[p]], 2, 100, args) == full / 2
    assert tta.computed_bytes("torchft-diloco", p, [[p]], 2, 100, args) == full / 20
    # post-local SGD, one rank per host: averages after steps 1, 21, 41, 61, 81 and once at the end.
    assert tta.computed_bytes("post-local-sgd", p, [[p]], 2, 100, args) == pytest.approx(6 * full / 100)
    # On one host its per-host gradient allreduce is DDP's, every step.
    one_host = tta.parse_args(["--sync-every", "20"])
    assert tta.computed_bytes("post-local-sgd", p, [[p]], 2, 100, one_host) == pytest.approx(full + 6 * full / 100)
    # PowerSGD rank 4 on a 100 x 100 matrix sends P and Q (4 x 200), a vector goes whole.
    assert tta.powersgd_payload([[100, 100], [100]]) == 800 + 100
    assert tta.powersgd_payload([[4, 4]]) == 16  # compression would not pay
    # dadt's PowerSGD row sends what torch's does: 10 plain steps, then rank 2's P and Q (2 x 200)
    psgd = tta.parse_args(["--powersgd-rank", "2", "--powersgd-start-iter", "10"])
    shapes = [[100, 100], [100]]
    expected = (10 * 4 * 10100 + 90 * 4 * (400 + 100)) / 100
    for name in ("ddp-powersgd", "sync-powersgd"):
        assert tta.computed_bytes(name, 10100, shapes, 2, 100, psgd) == pytest.approx(expected)


def test_powersgd_rows_share_their_rank_and_train_the_overrun():
    args = tta.parse_args(["--contenders", "ddp,ddp-powersgd,sync-powersgd"])
    assert args.powersgd_rank == 4 and args.powersgd_start_iter is None  # torch's start: 1000
    assert tta.parse_args(["--powersgd-rank", "2"]).powersgd_rank == 2
    assert tta.CONTENDERS["sync-powersgd"][0] == "dadt"
    assert {"ddp-powersgd", "sync-powersgd"} <= set(tta.OVERRUN)


def _result(name, points, final, params=1000, sent=None):
    return {"contender": name, "lr": 1e-3, "size": 2, "steps": 100, "samples": 3200, "points": points,
            "final_loss": final, "wall_s": points[-1]["wall_s"], "startup_s": 1.0, "params": params,
            "shapes": [[params]], "train_files": 10, "val_files": 2, "train_bytes_rank0": 1, "val_bytes": 2000,
            "payload_bytes_sent": sent}


def _saved(tmp_path):
    args = vars(tta.parse_args(["--contenders", "ddp,ddp-fp16,torchft-diloco,post-local-sgd,local_sgd,async",
                                "--rounds", "2"]))
    runs = []
    for k in (1.0, 2.0):  # round 2 runs twice as slow: the ratios within a round stay the same
        runs.append({
            "ddp": _result("ddp", _pts((0, 5.0), (50 * k, 3.0), (100 * k, 2.0)), 2.0),
            "torchft-diloco": _result("torchft-diloco", _pts((0, 5.0), (20 * k, 2.5), (40 * k, 2.0)), 2.0),
            "post-local-sgd": _result("post-local-sgd", _pts((0, 5.0), (25 * k, 3.0), (50 * k, 2.0)), 2.0),
            "local_sgd": _result("local_sgd", _pts((0, 5.0), (10 * k, 3.0), (20 * k, 1.9)), 1.9, sent=24000),
            "async": {"error": "exit 1: ValueError: boom"},
            # fp16's rounding: 1e-7 above DDP's loss is within the default tolerance of the target
            "ddp-fp16": _result("ddp-fp16", _pts((0, 5.0), (30 * k, 3.0), (60 * k, 2.0000001)), 2.0000001),
        })
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"args": args, "runs": runs, "eval_every": 20}))
    return path


def _rows(out):
    rows = {}
    for line in out.split("target B")[0].splitlines():  # the main table (target A)
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] not in ("contender", "---"):
            rows[cells[0]] = cells[1:]
    return rows


def test_from_json_prints_target_ratios_and_failures(tmp_path):
    png = tmp_path / "loss.png"
    saved = _saved(tmp_path)
    proc = subprocess.run([sys.executable, os.path.join(BENCH, "time_to_accuracy.py"), "--from-json",
                           str(saved), "--plot", str(png), "--target-tolerance", "0"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout
    assert "target A: 2.0000 + 0 " in proc.stdout
    assert "target B: 3.0000 + 0 " in proc.stdout  # DDP's loss after half of the budget
    rows = _rows(proc.stdout)
    # columns: lr, time to target, min..max, vs ddp, vs torchft-diloco, vs post-local-sgd, final, ...
    assert rows["ddp"][1] == "150.0" and rows["ddp"][2] == "100.0 .. 200.0"
    assert rows["ddp"][3].startswith("1.00x")
    # local_sgd reaches 2.0 at 10 + 10 * (3.0 - 2.0) / (3.0 - 1.9) = 19.09 s (round 1)
    assert rows["local_sgd"][2] == "19.1 .. 38.2"
    assert rows["local_sgd"][3] == "0.19x (0.19 .. 0.19)"
    assert rows["local_sgd"][4] == "0.48x (0.48 .. 0.48)"  # / 40 s of torchft's DiLoCo
    assert rows["local_sgd"][5] == "0.38x (0.38 .. 0.38)"  # / 50 s of post-local SGD
    # measured: 24000 payload bytes over 100 steps, x 2(n-1)/n = 1 on two ranks
    assert rows["local_sgd"][-1] == "0.00 (measured)" and rows["ddp"][-1].endswith("(computed)")
    assert rows["async"][0].startswith("n/a (exit 1: ValueError: boom")
    assert rows["ddp-fp16"][1] == "not reached"  # no tolerance: 1e-7 above is above
    assert png.stat().st_size > 0
    # With the default tolerance (1e-3 nats) fp16's rounding reaches the target.
    out = subprocess.run([sys.executable, os.path.join(BENCH, "time_to_accuracy.py"), "--from-json", str(saved)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120).stdout
    assert _rows(out)["ddp-fp16"][1] == "90.0"  # median of 59.97 and 119.94 s: 30 k + 30 k * 0.999


def test_chosen_learning_rates_skip_failed_trials():
    trials = {"ddp": [{"lr": 1e-3, "final_loss": 2.5}, {"lr": 2e-3, "final_loss": 2.4}],
              "diloco": [{"lr": 1e-3, "final_loss": None, "error": "x"}, {"lr": 2e-3, "final_loss": 2.9}],
              "async": [{"lr": 1e-3, "final_loss": None, "error": "x"}]}
    assert tta.chosen_lrs(trials) == {"ddp": 2e-3, "diloco": 2e-3}


def test_the_powersgd_rows_get_a_ratio_to_torchs(tmp_path):
    """A run with ddp-powersgd gets a 'vs ddp-powersgd' column; one without (above) does not."""
    args = vars(tta.parse_args(["--contenders", "ddp,ddp-powersgd,sync-powersgd", "--rounds", "1"]))
    runs = [{"ddp": _result("ddp", _pts((0, 5.0), (100, 3.0), (200, 2.0)), 2.0),
             "ddp-powersgd": _result("ddp-powersgd", _pts((0, 5.0), (60, 3.0), (120, 2.0)), 2.0),
             "sync-powersgd": _result("sync-powersgd", _pts((0, 5.0), (40, 3.0), (80, 2.0)), 2.0)}]
    path = tmp_path / "psgd.json"
    path.write_text(json.dumps({"args": args, "runs": runs, "eval_every": 20}))
    out = subprocess.run([sys.executable, os.path.join(BENCH, "time_to_accuracy.py"), "--from-json", str(path),
                          "--target-tolerance", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120).stdout
    assert "| vs ddp | vs ddp-powersgd | final val loss" in out and "vs torchft-diloco" not in out
    rows = _rows(out)
    # columns: lr, time to target, min..max, vs ddp, vs ddp-powersgd, final, ...
    assert rows["sync-powersgd"][1] == "80.0" and rows["sync-powersgd"][4] == "0.67x (0.67 .. 0.67)"
    assert rows["ddp-powersgd"][4].startswith("1.00x")
    assert "PowerSGD (rank 4) compresses from step 1000" in out
