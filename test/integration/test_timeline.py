"""The timeline of a real run: every phase of every gradient tensor, valid JSON even after SIGKILL,
and `python -m dadt.timeline summary/--plot` on it."""
import collections
import json
import os
import signal
import subprocess
import time

from conftest import PY, REPO, worker_env

DIGITS = os.path.join(REPO, "examples", "pytorch", "train_digits.py")


def load_rows(path):
    """{tensor name: set of activity names} and the raw events, from a Chrome trace file."""
    with open(path) as f:
        events = json.load(f)  # must be strict JSON, not just "Chrome tolerates it"
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    rows = collections.defaultdict(set)
    for e in events:
        if e.get("ph") in ("B", "E", "i"):
            rows[names.get(e.get("pid"), "?")].add(e["name"])
    return rows, events


def run_digits(dadtrun, timeline, extra_env=None, epochs=2):
    env = worker_env(**(extra_env or {}))
    proc = subprocess.run([dadtrun, "--gloo", "-np", "2", "--timeline-filename", str(timeline),
                           "--timeline-mark-cycles", PY, DIGITS, "--epochs", str(epochs)],
                          env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return load_rows(timeline)


def test_every_gradient_tensor_has_every_phase(dadtrun, tmp_path):
    # Eager allreduce off, so gradients go through fusion buffers and the Gloo collective.
    rows, events = run_digits(dadtrun, tmp_path / "tl.json", {"DADT_EAGER_THRESHOLD": "0"})
    grads = [t for t in rows if t.startswith("grad.")]
    assert sorted(grads) == ["grad.0.bias", "grad.0.weight", "grad.2.bias", "grad.2.weight"], rows.keys()
    for t in grads:
        for phase in ("QUEUE", "NEGOTIATE_ALLREDUCE", "RANK_0_READY", "RANK_1_READY", "ALLREDUCE",
                      "GLOO_ALLREDUCE", "MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER"):
            assert phase in rows[t], f"{t} lacks {phase}: {sorted(rows[t])}"
    pid_of = {e["args"]["name"]: e["pid"] for e in events
              if e.get("ph") == "M" and e.get("name") == "process_name"}
    grad_pids = {pid_of[t] for t in grads}
    ends = [e for e in events if e.get("ph") == "E" and e["name"] == "ALLREDUCE" and e["pid"] in grad_pids]
    assert ends and all(e["args"]["dtype"] == "float32" and e["args"]["shape"] for e in ends)
    weight_ends = [e for e in ends if e["pid"] == pid_of["grad.0.weight"]]
    assert weight_ends and all(e["args"]["shape"] == [128, 64] for e in weight_ends)
    assert any(e["name"] == "CYCLE_START" for e in events)
    # Begin/end pairs balance per row (loadable as nested slices).
    depth = collections.Counter()
    for e in events:
        if e.get("ph") == "B":
            depth[(e["pid"], e["name"])] += 1
        elif e.get("ph") == "E":
            depth[(e["pid"], e["name"])] -= 1
    assert all(v == 0 for v in depth.values()), {k: v for k, v in depth.items() if v}


def test_small_gradients_show_the_eager_path(dadtrun, tmp_path):
    rows, _ = run_digits(dadtrun, tmp_path / "tl.json", epochs=1)
    for t in (t for t in rows if t.startswith("grad.")):
        assert {"QUEUE", "NEGOTIATE_ALLREDUCE", "ALLREDUCE", "EAGER_ALLREDUCE"} <= rows[t], rows[t]


def test_digits_timeline_is_valid_json_after_sigkill_halfway(dadtrun, tmp_path):
    timeline = tmp_path / "killed.json"
    proc = subprocess.Popen([dadtrun, "--gloo", "-np", "2", "--timeline-filename", str(timeline),
                             PY, DIGITS, "--epochs", "500"], env=worker_env(DADT_EAGER_THRESHOLD="0"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not timeline.exists() or timeline.stat().st_size < 300_000):
            assert proc.poll() is None, "the run ended before it could be killed halfway"
            time.sleep(0.1)
        assert timeline.exists() and timeline.stat().st_size >= 300_000, "the timeline did not grow"
        os.killpg(proc.pid, signal.SIGKILL)  # dadtrun; its ranks die with it (death signal)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    time.sleep(0.5)
    rows, _ = load_rows(timeline)
    for t in ("grad.0.weight", "grad.2.bias"):
        assert {"GLOO_ALLREDUCE", "NEGOTIATE_ALLREDUCE", "QUEUE", "MEMCPY_IN_FUSION_BUFFER"} <= rows[t], rows[t]


def test_summary_and_plot_on_a_real_timeline(dadtrun, tmp_path):
    timeline = tmp_path / "tl.json"
    run_digits(dadtrun, timeline, {"DADT_EAGER_THRESHOLD": "0"}, epochs=1)
    env = worker_env()
    out = subprocess.run([PY, "-m", "dadt.timeline", "summary", str(timeline), "--plot",
                          str(tmp_path / "step.png")], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "grad.0.weight" in out.stdout and "GLOO_ALLREDUCE" in out.stdout, out.stdout
    png = (tmp_path / "step.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
