"""The timeline of a real run: every phase of every gradient tensor, valid JSON even after SIGKILL,
and `python -m dadt.timeline summary/--plot` on it."""
import collections
import json
import os
import signal
import subprocess
import time

import pytest

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


@pytest.mark.parametrize("shm", ["1", "0"])
def test_every_gradient_tensor_has_every_phase(dadtrun, tmp_path, shm):
    # Eager allreduce off, so gradients go through the Gloo collective. Gloo reduces a fused
    # response's tensors where they lie, through shared memory on one host and over its ring
    # (DADT_SHM_ALLREDUCE=0, as across hosts): no fusion-buffer copies either way.
    rows, events = run_digits(dadtrun, tmp_path / "tl.json", {"DADT_EAGER_THRESHOLD": "0",
                                                              "DADT_SHM_ALLREDUCE": shm})
    copies = {"MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER"}
    # Rows carry Horovod's names, "allreduce.<tensor>"; rank-ready marks are the rank, as Horovod's.
    grads = [t for t in rows if t.startswith("allreduce.grad.")]
    assert sorted(grads) == ["allreduce.grad.0.bias", "allreduce.grad.0.weight", "allreduce.grad.2.bias",
                             "allreduce.grad.2.weight"], rows.keys()
    for t in grads:
        for phase in ("QUEUE", "NEGOTIATE_ALLREDUCE", "0", "1", "ALLREDUCE", "GLOO_ALLREDUCE"):
            assert phase in rows[t], f"{t} lacks {phase}: {sorted(rows[t])}"
        assert not copies & set(rows[t]), f"{t} was copied through a fusion buffer: {sorted(rows[t])}"
    pid_of = {e["args"]["name"]: e["pid"] for e in events
              if e.get("ph") == "M" and e.get("name") == "process_name"}
    grad_pids = {pid_of[t] for t in grads}
    ends = [e for e in events if e.get("ph") == "E" and e["name"] == "ALLREDUCE" and e["pid"] in grad_pids]
    assert ends and all(e["args"]["dtype"] == "float32" and e["args"]["shape"] for e in ends)
    weight_ends = [e for e in ends if e["pid"] == pid_of["allreduce.grad.0.weight"]]
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
    for t in (t for t in rows if t.startswith("allreduce.grad.")):
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
    for t in ("allreduce.grad.0.weight", "allreduce.grad.2.bias"):
        assert {"GLOO_ALLREDUCE", "NEGOTIATE_ALLREDUCE", "QUEUE", "ALLREDUCE"} <= rows[t], rows[t]


def test_summary_and_plot_on_a_real_timeline(dadtrun, tmp_path):
    timeline = tmp_path / "tl.json"
    run_digits(dadtrun, timeline, {"DADT_EAGER_THRESHOLD": "0"}, epochs=1)
    env = worker_env()
    out = subprocess.run([PY, "-m", "dadt.timeline", "summary", str(timeline), "--plot",
                          str(tmp_path / "step.png")], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "allreduce.grad.0.weight" in out.stdout and "GLOO_ALLREDUCE" in out.stdout, out.stdout
    png = (tmp_path / "step.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


# Horovod's own timeline test (test/parallel/test_timeline.py), as its body runs on each rank: the
# variables are set before init(), and rank 0 reads the live file 0.1 s after the allreduce.
HOROVOD_TIMELINE_TEST = r"""
import json, os, sys, time
import torch
import dadt.torch as hvd

path = sys.argv[1]
if len(sys.argv) > 2:  # in-process, as Horovod's test sets them
    os.environ.update(HOROVOD_TIMELINE=path, HOROVOD_TIMELINE_MARK_CYCLES="1")
hvd.init()
hvd.allreduce(torch.tensor([1, 2, 3], dtype=torch.float32), name="test_allreduce")
time.sleep(0.1)
if hvd.rank() == 0:
    with open(path) as tf:
        timeline_text = tf.read()
    assert "allreduce.test_allreduce" in timeline_text, timeline_text
    assert "NEGOTIATE_ALLREDUCE" in timeline_text, timeline_text
    assert "ALLREDUCE" in timeline_text, timeline_text
    assert "CYCLE_START" in timeline_text, timeline_text
    json.loads(timeline_text)
hvd.shutdown()
print("timeline-ok", flush=True)
"""


def test_horovod_timeline_variable_writes_horovods_rows(dadtrun, tmp_path):
    """HOROVOD_TIMELINE (no DADT_TIMELINE) turns the timeline on; the tensor named test_allreduce is
    the row allreduce.test_allreduce, with Horovod's phase names; init says which alias it took."""
    script = tmp_path / "horovod_timeline.py"
    script.write_text(HOROVOD_TIMELINE_TEST)
    timeline = tmp_path / "hvd.json"
    env = worker_env(HOROVOD_TIMELINE=str(timeline), HOROVOD_TIMELINE_MARK_CYCLES="1")
    proc = subprocess.run([dadtrun, "--gloo", "-np", "2", PY, str(script), str(timeline)], env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("timeline-ok") == 2, proc.stdout
    # One line per alias, from rank 0 only.
    notices = [line.split("dadt: ", 1)[1] for line in proc.stderr.splitlines() if "dadt: HOROVOD_" in line]
    assert notices == ["HOROVOD_TIMELINE=%s taken as DADT_TIMELINE" % timeline,
                       "HOROVOD_TIMELINE_MARK_CYCLES=1 taken as DADT_TIMELINE_MARK_CYCLES"], proc.stderr
    assert all(line.startswith("[0]") for line in proc.stderr.splitlines() if "dadt: HOROVOD_" in line)
    rows, events = load_rows(timeline)
    # A 12-byte tensor takes the eager path (EAGER_ALLREDUCE in place of GLOO_ALLREDUCE).
    assert {"QUEUE", "NEGOTIATE_ALLREDUCE", "0", "1", "ALLREDUCE"} <= rows["allreduce.test_allreduce"], rows
    assert "test_allreduce" not in rows, rows.keys()
    assert any(e["name"] == "CYCLE_START" for e in events)


def test_horovod_timeline_set_in_process_before_init(tmp_path):
    """One process without a launcher, the variables set in os.environ before init (Horovod's test)."""
    script = tmp_path / "horovod_timeline.py"
    script.write_text(HOROVOD_TIMELINE_TEST)
    timeline = tmp_path / "hvd.json"
    proc = subprocess.run([PY, str(script), str(timeline), "in-process"], env=worker_env(),
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "timeline-ok" in proc.stdout
    rows, _ = load_rows(timeline)
    assert {"NEGOTIATE_ALLREDUCE", "ALLREDUCE"} <= rows["allreduce.test_allreduce"], rows
