"""examples/benchmarks/real_models.py and bench_models.py: the models' shapes (parameter and tensor
counts of torchvision's ResNet-50/101 and the reference BERT-Base pre-training model, built here
without training), and the table re-printed from a saved run (--from-json): ratios within each
round, the spread, the synchronous floor, the overlap bounds, the CPU floor and how far a synchronous step could
lead DDP and Horovod. Plain pytest: nothing is launched."""

import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BENCH = os.path.join(REPO, "examples", "benchmarks")
REAL = os.path.join(BENCH, "real_models.py")
sys.path.insert(0, BENCH)

import bench_models  # noqa: E402

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name, params, tensors", [
    ("resnet50", 25_557_032, 161),
    ("resnet101", 44_549_160, 314),
    ("bert-base", 110_106_428, 206),
    ("many-tensor", 5_265_930, 162),
])
def test_model_shapes(name, params, tensors):
    model, make_batch, loss_fn = bench_models.build(torch, name)
    assert bench_models.counts(model) == (params, tensors)
    if name.startswith("resnet"):
        # torchvision's layout: v1.5 puts the stride on the 3x3 convolution of a bottleneck.
        block = model.layer2[0]
        assert block.conv1.stride == (1, 1) and block.conv2.stride == (2, 2)
        assert tuple(model.fc.weight.shape) == (1000, 2048)
        assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules()) == (tensors - 2) // 3  # conv + 2 per BN, fc
    if name == "bert-base":
        # The masked-LM decoder is the word embedding, with its own bias; separate q, k, v.
        assert model.decoder.weight is model.embeddings.word_embeddings.weight
        assert tuple(model.decoder.bias.shape) == (30522,)
        assert len(model.layers) == 12 and model.layers[0].query.weight.shape == (768, 768)
        assert model.layers[0].attention_LayerNorm.eps == 1e-12
    del model


def test_small_batches_run_forward_and_backward():
    for name, options in (("many-tensor", {}), ("resnet50", {"image_size": 32})):
        model, make_batch, loss_fn = bench_models.build(torch, name, **options)
        inputs, targets = make_batch(2, torch.Generator().manual_seed(0))
        loss_fn(model(*inputs), targets).backward()
        assert all(p.grad is not None for p in model.parameters())


def test_bert_batch_labels_fifteen_percent_of_positions():
    # A small BERT of the same code (the shapes above are the real one's), to keep the test cheap.
    model, make_batch, loss_fn = bench_models.build(torch, "bert-base", seq_len=40, vocab=100, hidden=32,
                                                    layers=2, heads=4, intermediate=64)
    (ids, types), (labels, nsp) = make_batch(3, torch.Generator().manual_seed(0))
    assert ids.shape == types.shape == labels.shape == (3, 40)
    assert ((labels != -100).sum(dim=1) == 6).all()  # 15% of 40
    loss = loss_fn(model(ids, types), (labels, nsp))
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is not None for p in model.parameters())


# A saved run: 2 ranks x batch 2 = 4 samples a step.
F, B, W, C = 0.100, 0.200, 0.400, 0.050
# Backward makes 10 bytes at 10 ms and 390 at 150 ms: the last byte is through at 150 ms +
# 390/400 of W = 540 ms at the earliest, so the synchronous floor is F + 540 ms = 640 ms.
READY, FLOOR = [[0.010, 10], [0.150, 390]], 0.640
# W's CPU time on a rank: with it, no step is shorter than F + B + 350 ms = 650 ms (the CPU floor).
WC, CPU_FLOOR = 0.350, 0.650
# The step's computation with the optimizer's update, alone (COMPUTE) and with W in flight (P).
COMPUTE, P = 0.380, 0.700


def _launch(rates, phases=False, cpu=False, overlap=False, p=P):
    result = {"samples_per_sec": rates, "size": 2, "params": 25_557_032, "tensors": 161, "batch": 2}
    if phases:
        result.update(forward_s=F, backward_s=B, allreduce_s=W, grad_ready=READY, dear_chain_s=C)
        if cpu:
            result["allreduce_cpu_s"] = WC
        if overlap:
            result.update(compute_s=COMPUTE, overlap_step_s=p)
    return result


def _saved(tmp_path, contenders=None, cpu=False, overlap=False, p=P):
    rounds = []
    # Round k: horovod 4 / 5 / 3.2 (so sync / horovod is 1.25, 1.0, 1.5625); sync 5 (a 0.8 s step).
    for hvd in (4.0, 5.0, 3.2):
        launches = {
            "ddp": _launch([4.0, 3.0, 5.0]),
            "ddp-tuned": _launch([4.4] * 3),
            "horovod": _launch([hvd] * 3),
            "sync": _launch([5.0] * 3, phases=True, cpu=cpu, overlap=overlap, p=p),
            "async": _launch([6.0] * 3, phases=True, cpu=cpu, overlap=overlap, p=p),
            "dear": _launch([5.5] * 3, phases=True, cpu=cpu, overlap=overlap, p=p),
        }
        rounds.append({c: r for c, r in launches.items() if contenders is None or c in contenders})
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"args": {"np": 2, "link_mb_per_s": None, "ddp_tuned_bucket_mb": 4.0,
                                         "image_size": 64, "seq_len": 128},
                                "runs": {"resnet50": rounds}}))
    return path


def _run(*argv):
    proc = subprocess.run([sys.executable, REAL, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=120)
    return proc.returncode, proc.stdout


def _rows(out):
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0] not in ("contender", "---") and len(cells) == 9:
            rows[cells[0].split()[0]] = cells
    return rows


def test_from_json_reprints_the_table_with_ratios_and_bounds(tmp_path):
    rc, out = _run("--from-json", str(_saved(tmp_path)))
    assert rc == 0, out
    assert ("### resnet50: ResNet-50 v1.5, 3 x 64 x 64 images (--image-size 64; ImageNet's are 224), "
            "batch 2 per rank, 25,557,032 parameters in 161 tensors (102.2 MB of fp32 gradients), 2 ranks") in out
    assert "F (forward) 100.0 ms, B (backward) 200.0 ms, W (one allreduce of all gradients) 400.0 ms" in out
    assert "no synchronous step is shorter than 640.0 ms" in out
    assert "next step's first reduce-scatter: 50.0 ms" in out
    rows = _rows(out)
    assert list(rows) == ["ddp", "ddp-tuned", "horovod", "sync", "async", "dear"]
    assert rows["ddp"][0] == "ddp (bucket_cap_mb 25, default)"
    assert rows["ddp-tuned"][0] == "ddp-tuned (tuned: bucket_cap_mb 4)"
    # A launch's figure is the median of its chunks: ddp 4.0 (a 1 s step) in every round.
    assert rows["ddp"][1:4] == ["4.00", "4.00 .. 4.00", "1000.0"]
    assert rows["ddp-tuned"][4] == "1.10x (1.10 .. 1.10)"
    # sync / horovod per round: 1.25, 1.0, 1.5625 -> median 1.25, spread 1.00 .. 1.56.
    assert rows["sync"][4] == "1.25x (1.25 .. 1.25)"
    assert rows["sync"][5] == "1.25x (1.00 .. 1.56)"
    assert rows["horovod"][1:3] == ["4.00", "3.20 .. 5.00"]
    assert rows["async"][6] == "1.20x" and rows["dear"][6] == "1.10x"
    # Bounds over sync's 0.8 s step: floor 0.64 s; async max(F + B, W) = 0.4 s; dear
    # max(max(F, W/2) + max(B, W/2), W + C) = 0.45 s. Peers have none.
    assert rows["sync"][7] == "%.2fx" % (0.8 / FLOOR) == "1.25x"
    assert rows["async"][7] == "2.00x"
    assert rows["dear"][7] == "%.2fx" % (0.8 / (W + C))
    assert rows["ddp"][7] == rows["horovod"][7] == "-"
    # A run saved before W's CPU time was measured: no CPU floor, no CPU bounds.
    assert "CPU floor" not in out and "overlap floor" not in out
    assert all(row[8] == "-" for row in rows.values())
    # DDP's and Horovod's 1 s steps, DDP tuned's 4 / 4.4 s: how far a synchronous step could lead.
    for who, ms in (("DDP", 1000.0), ("DDP tuned", 4 / 4.4 * 1e3), ("Horovod", 1000.0)):
        m = re.search(r"^%s's step ([\d.]+) ms: a synchronous step could lead it by ([\d.]+)x at most$" % who,
                      out, re.M)
        assert m and m.groups() == ("%.1f" % ms, "%.2f" % (ms / 1e3 / FLOOR)), out


def test_the_cpu_floor_adds_what_the_allreduce_costs_a_rank_to_f_and_b(tmp_path):
    rc, out = _run("--from-json", str(_saved(tmp_path, cpu=True)))
    assert rc == 0, out
    assert ("W costs each rank 350.0 ms of CPU (every thread of the process); if a rank has one core, "
            "compute and communication share it and no step is shorter than F + B + that: 650.0 ms "
            "(the CPU floor)") in out
    rows = _rows(out)
    # Over sync's 0.8 s step, every mode's CPU bound is the CPU floor here (F + B + WC = 0.65 s is
    # above the synchronous floor, W and dear's chain); the wire-only bounds are unchanged.
    for mode in ("sync", "async", "dear"):
        assert rows[mode][8] == "%.2fx" % (0.8 / CPU_FLOOR) == "1.23x"
    assert rows["async"][7] == "2.00x"
    assert rows["ddp"][8] == rows["horovod"][8] == "-"
    m = re.search(r"^DDP's step 1000.0 ms: a synchronous step could lead it by ([\d.]+)x at most "
                  r"\(([\d.]+)x over the CPU floor\)$", out, re.M)
    assert m and m.groups() == ("%.2f" % (1 / FLOOR), "%.2f" % (1 / CPU_FLOOR)), out


def test_the_overlap_floor_is_the_step_computed_while_the_allreduce_is_in_flight(tmp_path):
    rc, out = _run("--from-json", str(_saved(tmp_path, cpu=True, overlap=True)))
    assert rc == 0, out
    assert ("C (forward, backward and the optimizer's update, alone) 380.0 ms; P (the same while one "
            "allreduce of all gradients is in flight) 700.0 ms: no step of any mode, however it "
            "overlaps, is shorter here (the overlap floor)") in out
    rows = _rows(out)
    # P (0.7 s) is above the CPU floor (0.65 s) and every wire bound: each mode's machine bound
    # over sync's 0.8 s step is P's; the wire-only bounds stay.
    for mode in ("sync", "async", "dear"):
        assert rows[mode][8] == "%.2fx" % (0.8 / P) == "1.14x"
    assert rows["sync"][7] == "1.25x" and rows["async"][7] == "2.00x"
    m = re.search(r"^Horovod's step 1000.0 ms: a synchronous step could lead it by ([\d.]+)x at most "
                  r"\(([\d.]+)x over the overlap floor\)$", out, re.M)
    assert m and m.groups() == ("%.2f" % (1 / FLOOR), "%.2f" % (1 / P)), out


def test_the_overlap_floor_holds_every_mode_the_wire_floor_only_sync(tmp_path):
    # P = 0.5 s, under the synchronous floor (0.64 s): sync keeps that floor, while async and dear,
    # which need not wait for backward to send, are held to P (above their wire bounds).
    rc, out = _run("--from-json", str(_saved(tmp_path, overlap=True, p=0.5)))
    assert rc == 0, out
    rows = _rows(out)
    assert rows["sync"][8] == "1.25x"
    assert rows["async"][8] == rows["dear"][8] == "%.2fx" % (0.8 / 0.5) == "1.60x"
    assert "could lead it by 1.56x at most (1.56x over the overlap floor)" in out


def test_from_json_without_the_peers_leaves_their_columns_empty(tmp_path):
    rc, out = _run("--from-json", str(_saved(tmp_path, contenders={"sync", "async"})))
    assert rc == 0, out
    rows = _rows(out)
    assert list(rows) == ["sync", "async"]
    assert rows["async"][4] == rows["async"][5] == "-"
    assert "could lead it" not in out


def test_from_json_names_an_unreadable_file(tmp_path):
    missing = tmp_path / "nope.json"
    rc, out = _run("--from-json", str(missing))
    assert rc != 0
    assert "real_models: cannot read the run saved in %s" % missing in out
    assert "Traceback" not in out


def test_horovod_needs_its_launcher():
    rc, out = _run("--contenders", "horovod,sync", "--models", "many-tensor")
    assert rc != 0 and "horovod needs --horovodrun" in out and "Traceback" not in out
