"""GPU benchmark of dadt's CUDA build (needs a GPU; prints why and exits 0 without one).

    python examples/benchmarks/gpu_bench.py            # both parts, ~1 minute on one GPU
    python examples/benchmarks/gpu_bench.py --quick

(a) Device fusion copy: N gradients of S bytes packed into one fusion buffer by the runtime's batched
    copy kernel (one launch for up to 80 tensors), against a plain torch device-to-device copy of
    the same total bytes (one large `dst.copy_(src)`) and against N separate torch copies (what a
    per-tensor cudaMemcpyAsync pack costs). Reported as bandwidth and as a fraction of the plain
    copy's bandwidth, median of repeated batches.
(b) Training step: the same PyTorch model and loop on the GPU, once plain and once with
    dadt.DistributedOptimizer at 1 rank (NCCL, gradients fused on the device), alternated in
    rounds; median steps/s of each and the ratio dadt / plain (target >= 0.97).
Runs as one process (rank 0 of 1); no launcher needed.
"""
import argparse
import statistics
import sys
import time

import torch


def fusion_copy(args):
    import dadt._core as core
    dev = torch.device("cuda", 0)
    rows = []
    for spans, span_bytes in [(64, 64 * 1024), (200, 256 * 1024), (16, 4 * 1024 * 1024)]:
        total = spans * span_bytes
        t_dadt = core.cuda_fusion_copy_seconds(0, span_bytes, spans, args.iters)
        src = torch.empty(total, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        parts = [torch.empty(span_bytes, dtype=torch.uint8, device=dev) for _ in range(spans)]
        views = list(dst.split(span_bytes))

        def timed(fn):
            fn()
            torch.cuda.synchronize()
            times = []
            for _ in range(args.iters):
                t0 = time.perf_counter()
                for _ in range(10):
                    fn()
                torch.cuda.synchronize()
                times.append((time.perf_counter() - t0) / 10)
            return statistics.median(times)

        t_plain = timed(lambda: dst.copy_(src))

        def per_tensor():
            for v, p in zip(views, parts):
                v.copy_(p)
        t_each = timed(per_tensor)
        gbps = lambda t: 2 * total / t / 1e9  # read + write
        rows.append((spans, span_bytes, gbps(t_dadt), gbps(t_plain), gbps(t_each), t_plain / t_dadt))
    print("\n(a) device fusion copy (bytes read + written per second)")
    print("| tensors x size | dadt batched pack GB/s | torch one copy GB/s | torch per-tensor GB/s | dadt / one copy |")
    print("|---|---|---|---|---|")
    for spans, size, d, p, e, ratio in rows:
        print("| %d x %d KiB | %.0f | %.0f | %.0f | %.2f |" % (spans, size // 1024, d, p, e, ratio))


def make_model(dev):
    torch.manual_seed(0)
    layers = []
    for _ in range(8):  # ~34M parameters in 16 tensors, and a few small ones
        layers += [torch.nn.Linear(2048, 2048), torch.nn.LayerNorm(2048), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(2048, 10)).to(dev)


def training(args):
    import dadt.torch as dadt
    from dadt.common import basics
    dadt.init()
    dev = torch.device("cuda", 0)
    x = torch.randn(args.batch, 2048, device=dev)
    y = torch.randint(0, 10, (args.batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()

    def loop(use_dadt):
        model = make_model(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        if use_dadt:
            opt = dadt.DistributedOptimizer(opt, named_parameters=model.named_parameters())
            dadt.broadcast_parameters(model.state_dict(), root_rank=0)

        def step():
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        for _ in range(args.warmup):
            step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
        return args.steps / (time.perf_counter() - t0)

    plain, with_dadt = [], []
    for _ in range(args.rounds):
        plain.append(loop(False))
        with_dadt.append(loop(True))
    p, d = statistics.median(plain), statistics.median(with_dadt)
    print("\n(b) training step, 1 rank, batch %d, %s" % (args.batch, torch.cuda.get_device_name(0)))
    print("| loop | steps/s (median of %d rounds) |" % args.rounds)
    print("|---|---|")
    print("| plain PyTorch | %.1f |" % p)
    print("| dadt (%s) | %.1f |" % ("NCCL" if basics.nccl_enabled() else "staged", d))
    print("dadt / plain = %.3f (target >= 0.97)" % (d / p))
    dadt.shutdown()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    # Large enough that a step takes tens of ms on an H100, as a real training step does.
    ap.add_argument("--batch", type=int, default=8192)
    a = ap.parse_args(argv)
    a.iters, a.rounds, a.steps, a.warmup = (10, 3, 20, 5) if a.quick else (30, 5, 50, 10)
    if not torch.cuda.is_available():
        print("gpu_bench: skipped, torch.cuda is not available on this machine (no GPU)")
        return 0
    import dadt.torch as dadt
    if not dadt.cuda_built():
        print("gpu_bench: skipped, dadt was built without CUDA/NCCL (see docs/backends.md)")
        return 0
    fusion_copy(a)
    training(a)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
