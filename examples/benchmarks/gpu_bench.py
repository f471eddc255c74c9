"""GPU benchmark of dadt's CUDA build (needs a GPU; prints why and exits 0 without one).

    python examples/benchmarks/gpu_bench.py            # every part, a few minutes on one GPU
    python examples/benchmarks/gpu_bench.py --quick    # fewer rounds
    python examples/benchmarks/gpu_bench.py --parts fusion,step

Parts (--parts picks some; all by default):
  fusion  The runtime's batched fusion copy (the kernel the executor packs and unpacks its fusion
          buffer with, through dadt._core.cuda_copy_batch) against one cudaMemcpy device-to-device
          copy of the same total bytes (torch's `dst.copy_(src)`), both timed with CUDA events on
          one stream; pack and unpack separately, as a fraction of the memcpy's time (target
          >= 0.9). Span lists: equal sizes, odd float32 lengths (4-byte aligned slots), and
          ResNet-50's 161 gradients.
  step    1 rank, ResNet-50 (torchvision; about 25.6M float32 parameters in 161 tensors): the same
          training loop plain and with dadt.DistributedOptimizer (NCCL), alternated over rounds;
          median step time of each and the overhead (target <= 1%).
  staged  2 ranks on one GPU (dadtrun --gloo -np 2; the staged path through host memory): the
          same allreduce of CUDA tensors and of CPU tensors, alternated; the staging cost.
  sync    No host synchronisation on the NCCL path, from a CUDA trace (torch.profiler): a 20 ms
          kernel is queued on the framework stream, then the tensor is written, then
          allreduce_async is called. It must return while the stream is still busy, and dadt's
          first GPU work must start right after the write on the device (an event wait, not a
          host round trip). Then the idle time of the framework stream per training step, plain
          and with DistributedOptimizer, from the same kind of trace.
Runs as one process (rank 0 of 1) except `staged`, which launches dadtrun itself.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch

PARTS = ("fusion", "step", "staged", "sync")


def spread(xs):
    return "%.3g-%.3g" % (min(xs), max(xs))


# ---------------------------------------------------------------------------------------- fusion

def resnet50_param_sizes():
    try:
        import torchvision
    except ImportError:
        return None
    return [p.numel() for p in torchvision.models.resnet50().parameters()]


def event_time(fn, reps, iters):
    """Median seconds of one fn() call, timed with CUDA events on the current stream. A spin
    kernel ahead of each batch keeps the host ahead of the GPU, so launch overhead is hidden as
    it is in a training step."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(5_000_000)  # ~2.5 ms
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / reps)
    return statistics.median(times), times


def fusion(args):
    import dadt._core as core
    dev = torch.device("cuda", 0)
    stream = torch.cuda.current_stream(dev).cuda_stream
    cases = [("64 x 64 KiB", [16384] * 64), ("200 x 256 KiB", [65536] * 200),
             ("16 x 4 MiB", [1 << 20] * 16), ("200 x 1001 floats (odd)", [1001] * 200)]
    sizes = resnet50_param_sizes()
    if sizes:
        cases.append(("ResNet-50, %d tensors" % len(sizes), sizes))
    print("\n(a) device fusion copy, %s: the runtime's batched kernel vs one cudaMemcpy D2D of the "
          "same bytes (CUDA events, median of %d batches)" % (torch.cuda.get_device_name(0), args.iters))
    print("| spans | MB | memcpy us | pack us | unpack us | memcpy/pack | memcpy/unpack | per-tensor torch copies us |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, floats in cases:
        total = sum(floats)
        parts = [torch.randn(n, device=dev) for n in floats]
        outs = [torch.empty(n, device=dev) for n in floats]
        fused = torch.empty(total, device=dev)
        other = torch.empty(total, device=dev)
        slots = list(fused.split(floats))
        nbytes = [4 * n for n in floats]
        src_p, dst_p = [t.data_ptr() for t in parts], [s.data_ptr() for s in slots]
        out_p = [t.data_ptr() for t in outs]
        pack = lambda: core.cuda_copy_batch(src_p, dst_p, nbytes, stream)
        unpack = lambda: core.cuda_copy_batch(dst_p, out_p, nbytes, stream)
        reps = 20
        t_mem, _ = event_time(lambda: other.copy_(fused), reps, args.iters)
        t_pack, _ = event_time(pack, reps, args.iters)
        t_unpack, _ = event_time(unpack, reps, args.iters)

        def per_tensor():
            for s, p in zip(slots, parts):
                s.copy_(p)
        t_each, _ = event_time(per_tensor, 3, max(3, args.iters // 3))
        torch.cuda.synchronize()
        assert all(torch.equal(o, p) for o, p in zip(outs, parts)), "fusion copy moved wrong bytes"
        print("| %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.1f |" % (
            label, total * 4 / 1e6, t_mem * 1e6, t_pack * 1e6, t_unpack * 1e6, t_mem / t_pack,
            t_mem / t_unpack, t_each * 1e6))


# ------------------------------------------------------------------------------------------ step

def resnet_loop(dev, batch, use_dadt):
    import torchvision
    import dadt.torch as dadt
    torch.manual_seed(0)
    model = torchvision.models.resnet50().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if use_dadt:
        opt = dadt.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        dadt.broadcast_parameters(model.state_dict(), root_rank=0)
    x = torch.randn(batch, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    return model, step


def timed_steps(step, warmup, steps):
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def step_overhead(args):
    import dadt.torch as dadt
    from dadt.common import basics
    dev = torch.device("cuda", 0)
    plain, with_dadt = [], []
    for _ in range(args.rounds):  # alternated, so that clock and thermal drift hit both alike
        plain.append(timed_steps(resnet_loop(dev, args.batch, False)[1], args.warmup, args.steps))
        with_dadt.append(timed_steps(resnet_loop(dev, args.batch, True)[1], args.warmup, args.steps))
    ratios = [d / p for d, p in zip(with_dadt, plain)]
    p, d = statistics.median(plain), statistics.median(with_dadt)
    n_params = len(list(resnet_loop(dev, 1, False)[0].parameters()))
    print("\n(b) training step, 1 rank, ResNet-50 (%d gradient tensors), batch %d, fp32, %s"
          % (n_params, args.batch, torch.cuda.get_device_name(0)))
    print("| loop | ms per step, median of %d rounds of %d steps | spread |" % (args.rounds, args.steps))
    print("|---|---:|---|")
    print("| plain PyTorch | %.2f | %s |" % (p * 1e3, spread([t * 1e3 for t in plain])))
    print("| dadt DistributedOptimizer (%s) | %.2f | %s |" % (
        "NCCL" if basics.nccl_enabled() else "staged", d * 1e3, spread([t * 1e3 for t in with_dadt])))
    print("overhead = %+.2f%% (median of the per-round ratios; spread %s; target <= 1%%)"
          % ((statistics.median(ratios) - 1) * 100, spread([(r - 1) * 100 for r in ratios])))


# ---------------------------------------------------------------------------------------- staged

def staged_worker(args):
    import dadt.torch as dadt
    dadt.init()
    dev = torch.device("cuda", 0)
    rows = []
    for mb in (1, 16, 64):
        n = mb * (1 << 20) // 4
        gpu, cpu = torch.ones(n, device=dev), torch.ones(n)
        times = {"cuda": [], "cpu": []}
        for r in range(args.rounds * 2):
            for kind, x in (("cuda", gpu), ("cpu", cpu)):
                dadt.barrier()
                t0 = time.perf_counter()
                out = dadt.allreduce(x, name="staged.%s.%d.%d" % (kind, mb, r), op=dadt.Sum)
                if kind == "cuda":
                    torch.cuda.synchronize()
                times[kind].append(time.perf_counter() - t0)
                assert float(out[0]) == dadt.size()
        rows.append((mb, statistics.median(times["cpu"]), statistics.median(times["cuda"])))
    if dadt.rank() == 0:
        print("\n(c) staged path: 2 ranks on one %s (dadtrun --gloo -np 2), allreduce of CUDA "
              "tensors vs the same bytes on CPU tensors (median of %d)"
              % (torch.cuda.get_device_name(0), args.rounds * 2))
        print("| MB | CPU tensors ms | CUDA tensors (staged) ms | staging cost ms | CUDA / CPU |")
        print("|---:|---:|---:|---:|---:|")
        for mb, c, g in rows:
            print("| %d | %.2f | %.2f | %.2f | %.2f |" % (mb, c * 1e3, g * 1e3, (g - c) * 1e3, g / c))
    dadt.shutdown()


def staged(args):
    dadtrun = shutil.which("dadtrun")
    if dadtrun is None:
        print("\n(c) staged path: skipped, dadtrun is not on PATH")
        return
    cmd = [dadtrun, "--gloo", "-np", "2", sys.executable, os.path.abspath(__file__), "--staged-worker",
           "--rounds", str(args.rounds)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    for line in out.stdout.splitlines():
        print(line.split(">:", 1)[1] if line.startswith("[0]<stdout>:") else line)
    if out.returncode != 0:
        print("(c) staged path FAILED (exit %d):\n%s" % (out.returncode, out.stderr[-2000:]))


# ------------------------------------------------------------------------------------------ sync

def gpu_activity(prof):
    """(name, stream, start us, end us) of every kernel and memcpy/memset in a profiler trace."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    out = []
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e:
            out.append((e["name"], e.get("args", {}).get("stream"), e["ts"], e["ts"] + e["dur"]))
    return sorted(out, key=lambda a: a[2])


def idle_per_step(activity, steps):
    """Gaps between consecutive kernels of the framework stream (the one with the most GPU time),
    over the traced steps, per step (ms)."""
    busy = {}
    for _, st, s, e in activity:
        busy[st] = busy.get(st, 0) + e - s
    stream = max(busy, key=busy.get)
    mine = [a for a in activity if a[1] == stream]
    gaps, end = 0.0, None
    for _, _, s, e in mine:
        if end is not None and s > end:
            gaps += s - end
        end = max(end or e, e)
    return gaps / 1e3 / steps, (mine[-1][3] - mine[0][2]) / 1e3 / steps


def host_sync(args):
    from torch.profiler import ProfilerActivity, profile
    import dadt.torch as dadt
    dev = torch.device("cuda", 0)
    x = torch.zeros(16 << 20, device=dev)  # 64 MB
    dadt.allreduce(x, name="sync.warmup", op=dadt.Sum)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(40_000_000)  # ~20 ms of one SM
        x.fill_(1.0)                    # the tensor is written only after it
        t0 = time.perf_counter()
        h = dadt.allreduce_async(x, name="sync.probe", op=dadt.Sum)
        enqueue_ms = (time.perf_counter() - t0) * 1e3
        busy_at_return = not torch.cuda.current_stream(dev).query()
        out = dadt.synchronize(h)
        torch.cuda.synchronize()
    act = gpu_activity(prof)
    # The trace numbers streams itself: the framework stream is the one the spin kernel ran on.
    spin = next(a for a in act if "spin" in a[0].lower())
    framework = spin[1]
    fill = min((a for a in act if a[1] == framework and a[2] >= spin[3]), key=lambda a: a[2])
    # dadt's first work on its own stream after the spin kernel began; a negative gap would mean it
    # read the tensor before the framework wrote it.
    dadt_first = min((a for a in act if a[1] != framework and a[2] >= spin[2]), key=lambda a: a[2])
    correct = bool(torch.all(out == dadt.size()))
    print("\n(d) host synchronisation on the NCCL path (torch.profiler CUDA trace, %s)"
          % torch.cuda.get_device_name(0))
    print("| what | measured |")
    print("|---|---|")
    print("| allreduce_async returned after | %.3f ms (the stream had ~20 ms of work queued) |" % enqueue_ms)
    print("| framework stream still busy when it returned | %s |" % busy_at_return)
    print("| dadt's first GPU work (%s) starts after the write ends by | %.1f us (device-side event wait) |"
          % (dadt_first[0][:40], dadt_first[2] - fill[3]))
    print("| result correct (every element == size) | %s |" % correct)

    rows = []
    for use_dadt in (False, True):
        _, step = resnet_loop(dev, args.batch, use_dadt)
        for _ in range(args.warmup):
            step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.trace_steps):
                step()
            torch.cuda.synchronize()
        idle, span = idle_per_step(gpu_activity(prof), args.trace_steps)
        rows.append(("dadt DistributedOptimizer" if use_dadt else "plain PyTorch", idle, span))
    print("\nframework stream over %d traced ResNet-50 steps (batch %d): idle time between its kernels"
          % (args.trace_steps, args.batch))
    print("| loop | idle ms per step | step span ms | idle fraction |")
    print("|---|---:|---:|---:|")
    for name, idle, span in rows:
        print("| %s | %.3f | %.2f | %.2f%% |" % (name, idle, span, 100 * idle / span))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--parts", default=",".join(PARTS), help="comma-separated: " + ",".join(PARTS))
    ap.add_argument("--batch", type=int, default=64, help="ResNet-50 batch (224x224 images)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--staged-worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    a.iters, rounds, a.steps, a.warmup, a.trace_steps = (10, 3, 10, 5, 5) if a.quick else (30, 7, 20, 10, 10)
    a.rounds = a.rounds or rounds
    parts = [p for p in a.parts.split(",") if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        ap.error("unknown part(s) %s; choose from %s" % (",".join(unknown), ",".join(PARTS)))
    if a.staged_worker:
        staged_worker(a)
        return 0
    if not torch.cuda.is_available():
        print("gpu_bench: skipped, torch.cuda is not available on this machine (no GPU)")
        return 0
    import dadt.torch as dadt
    if not dadt.cuda_built():
        print("gpu_bench: skipped, dadt was built without CUDA/NCCL (see docs/backends.md)")
        return 0
    print("gpu_bench on %s, torch %s" % (torch.cuda.get_device_name(0), torch.__version__))
    if "fusion" in parts:
        fusion(a)
    if "staged" in parts:
        staged(a)
    if "step" in parts or "sync" in parts:
        dadt.init()
        if "step" in parts:
            step_overhead(a)
        if "sync" in parts:
            host_sync(a)
        dadt.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
