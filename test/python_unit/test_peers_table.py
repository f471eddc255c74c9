"""examples/benchmarks/peers.py --from-json: the peer table re-printed from a saved run, with each
ratio taken within a round (an -fp16 row against the peers' -fp16 rows), the spread over rounds,
the overlap bounds and the line that says how far any synchronous step could lead Horovod.
Plain pytest on a synthetic run: nothing is launched."""

import json
import os
import re
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PEERS = os.path.join(REPO, "examples", "benchmarks", "peers.py")

# comm shape: 2 ranks x batch 64 = 128 samples a step.
F, B, W = 0.010, 0.020, 0.200
# Backward makes 10 bytes at 1 ms and 390 at 15 ms: the wire's last byte is through at
# 15 ms + 390/400 of W = 210 ms at the earliest (not 1 ms + W), so sync's floor is F + 210 ms.
READY, E, C = [[0.001, 10], [0.015, 390]], 0.210, 0.030


def _launch(rates, phases=False):
    result = {"samples_per_sec": rates, "size": 2}
    if phases:
        result.update(forward_s=F, backward_s=B, allreduce_s=W, grad_ready=READY, dear_chain_s=C)
    return result


def _saved(tmp_path):
    rounds = []
    # Round k: ddp 100, horovod 80 / 100 / 64 (so sync / horovod is 1.5, 1.2, 1.875), sync 120.
    for hvd, hvd16 in ((80.0, 40.0), (100.0, 50.0), (64.0, 60.0)):
        rounds.append({
            "ddp": _launch([100.0, 90.0, 110.0]),
            "horovod": _launch([hvd] * 3),
            "sync": _launch([120.0] * 3, phases=True),
            "async": _launch([150.0] * 3, phases=True),
            "dear": _launch([132.0] * 3, phases=True),
            "ddp-fp16": _launch([200.0] * 3),
            "horovod-fp16": _launch([hvd16] * 3),
            "sync-fp16": _launch([250.0] * 3, phases=True),
        })
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"args": {"np": 2, "link_mb_per_s": None}, "runs": {"comm": rounds}}))
    return path


def _rows(out):
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0] not in ("contender", "---") and len(cells) == 7:
            rows[cells[0]] = cells[1:]
    return rows


def test_from_json_reprints_the_table_with_ratios_within_each_round(tmp_path):
    proc = subprocess.run([sys.executable, PEERS, "--from-json", str(_saved(tmp_path))],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout
    out = proc.stdout
    assert "### comm: 4 x 1536 MLP, batch 64 per rank" in out
    assert "F (forward) 10.0 ms, B (backward) 20.0 ms, W (one allreduce of all gradients) 200.0 ms" in out
    rows = _rows(out)
    assert list(rows) == ["ddp", "horovod", "sync", "async", "dear", "ddp-fp16", "horovod-fp16",
                          "sync-fp16"]
    # A launch's figure is the median of its chunks: ddp 100 in every round.
    assert rows["ddp"][0] == "100.0"
    # sync / horovod per round: 1.5, 1.2, 1.875 -> median 1.50, spread 1.20 .. 1.88.
    assert rows["sync"][2] == "1.20x (1.20 .. 1.20)"
    assert rows["sync"][3] == "1.50x (1.20 .. 1.88)"
    # fp16 rows against the fp16 peers: 250 / 200 and 250 / (40, 50, 60).
    assert rows["sync-fp16"][2] == "1.25x (1.25 .. 1.25)"
    assert rows["sync-fp16"][3] == "5.00x (4.17 .. 6.25)"
    assert rows["ddp-fp16"][2] == "1.00x (1.00 .. 1.00)"
    # vs sync, and the bounds: sync's step 128 / 120 = 1.0667 s; async's bound max(F + B, W) = 0.2.
    assert rows["async"][4] == "1.25x"
    assert rows["async"][5] == "%.2fx" % ((128 / 120) / W)
    assert "no synchronous step is shorter than 220.0 ms" in out
    assert "dear's chain between a step's last all-gather and the next step's first reduce-scatter: 30.0 ms" in out
    assert rows["sync"][5] == "%.2fx" % ((128 / 120) / (F + E))
    # dear: the halves overlap (W / 2 + W / 2 = W) but not the chain: W + C.
    assert rows["dear"][5] == "%.2fx" % ((128 / 120) / (W + C))
    assert rows["ddp"][5] == "-"
    # Horovod's median rate 80 -> a 1.6 s step, 7.27x sync's floor.
    m = re.search(r"Horovod's step ([\d.]+) ms: a synchronous step can lead it by ([\d.]+)x at most", out)
    assert m and m.groups() == ("1600.0", "%.2f" % (1.6 / (F + E))), out


def test_from_json_names_an_unreadable_file(tmp_path):
    missing = tmp_path / "nope.json"
    proc = subprocess.run([sys.executable, PEERS, "--from-json", str(missing)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert proc.returncode != 0
    assert "peers: cannot read the run saved in %s" % missing in proc.stdout
    assert "Traceback" not in proc.stdout
