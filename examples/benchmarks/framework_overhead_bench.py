"""Framework overhead: 4 KiB allreduce latency through dadt.torch, dadt.tensorflow and dadt.jax.

    python examples/benchmarks/framework_overhead_bench.py --np 2            # starts itself under dadtrun
    dadtrun --gloo -np 2 python examples/benchmarks/framework_overhead_bench.py   # the same, by hand

Every rank imports the three front ends into one process, initialises dadt once, and then, for
--rounds rounds, times --iters synchronous allreduces (float32, Sum, the same name each time, as a
training step reuses its names) through each front end, interleaved: the front ends take turns
every --chunk calls (after one untimed call each turn), and each round rotates which goes first,
so that a change in the machine's load reaches every row alike. Rows:

  torch        dadt.torch.allreduce(torch.Tensor)
  tensorflow   dadt.tensorflow.allreduce(tf.Tensor), eager
  jax          dadt.jax.allreduce(jax.Array), eager
  tf.function  the TensorFlow call inside a tf.function (a tf.numpy_function op)
  jax.jit      the JAX call inside jax.jit (an ordered io_callback)

Rank 0 prints a markdown table: the median of every timed call, and its ratio to torch's median
(the issue's target: tensorflow and jax at most 1.5x torch). Only medians; compare rows of one run.
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from allreduce_bench import find_dadtrun, worker_environment  # noqa: E402 - same folder

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="ranks to launch (plain-script mode; default 2)")
    p.add_argument("--bytes", type=int, default=4096, help="allreduce size in bytes (default 4096)")
    p.add_argument("--iters", type=int, default=300, help="timed calls per front end per round (300)")
    p.add_argument("--warmup", type=int, default=50, help="untimed calls per front end per round (50)")
    p.add_argument("--rounds", type=int, default=5, help="rounds, rotating the order (5)")
    p.add_argument("--chunk", type=int, default=20,
                   help="timed calls per turn of a front end before the next one's turn (20)")
    p.add_argument("--dadtrun", default=None, help="launcher (default: $DADTRUN, dadtrun on PATH, bazel-bin)")
    p.add_argument("--json", default=None, help="also write the samples' medians to this file (rank 0)")
    args = p.parse_args(argv)
    if args.chunk < 1 or args.iters < 1 or args.rounds < 1:
        p.error("--chunk, --iters and --rounds must be at least 1")
    return args


def launch(args, argv):
    dadtrun = find_dadtrun(args.dadtrun)
    if dadtrun is None:
        sys.exit("framework_overhead_bench: dadtrun not found (use --dadtrun or install dadt)")
    forwarded = [a for i, a in enumerate(argv) if a != "--np" and not a.startswith("--np=")
                 and not (i > 0 and argv[i - 1] == "--np")]
    cmd = [dadtrun, "--gloo", "-np", str(args.np), sys.executable, os.path.abspath(__file__), *forwarded]
    print(f"+ {' '.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, env=worker_environment(), stdout=subprocess.PIPE, text=True, bufsize=1)
    prefix = re.compile(r"^\[0\]<stdout>:")
    for line in proc.stdout:
        if line.startswith("[0]<stdout>:") or not line.startswith("["):
            sys.stdout.write(prefix.sub("", line))
            sys.stdout.flush()
    return proc.wait()


def make_calls(n_floats):
    """name -> a function doing one synchronous allreduce through that front end."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import tensorflow as tf
    import torch

    import dadt.jax as djax
    import dadt.tensorflow as dtf
    import dadt.torch as dtorch

    data = np.arange(n_floats, dtype=np.float32)
    t_torch, t_tf, t_jax = torch.from_numpy(data.copy()), tf.constant(data), jnp.asarray(data)
    tf_graph = tf.function(lambda x: dtf.allreduce(x, name="bench.tf.function", op=dtf.Sum))
    jax_jit = jax.jit(lambda x: djax.allreduce(x, name="bench.jax.jit", op=djax.Sum))
    return {
        "torch": lambda: dtorch.allreduce(t_torch, name="bench.torch", op=dtorch.Sum),
        "tensorflow": lambda: dtf.allreduce(t_tf, name="bench.tensorflow", op=dtf.Sum),
        "jax": lambda: djax.allreduce(t_jax, name="bench.jax", op=djax.Sum).block_until_ready(),
        "tf.function": lambda: tf_graph(t_tf),
        "jax.jit": lambda: jax_jit(t_jax).block_until_ready(),
    }


def worker(args):
    import dadt.torch as dtorch
    torch_threads = 1
    import torch
    torch.set_num_threads(torch_threads)
    dtorch.init()
    calls = make_calls(max(1, args.bytes // 4))
    names = list(calls)
    samples = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]  # rotate who goes first
        for n in order:
            for _ in range(args.warmup):
                calls[n]()
        for done in range(0, args.iters, args.chunk):  # interleaved turns of --chunk calls
            for n in order:
                fn = calls[n]
                fn()  # untimed: the first call after another front end's turn
                for _ in range(min(args.chunk, args.iters - done)):
                    t0 = time.perf_counter_ns()
                    fn()
                    samples[n].append((time.perf_counter_ns() - t0) / 1e3)
    medians = {n: statistics.median(s) for n, s in samples.items()}
    if dtorch.rank() == 0:
        import jax
        import tensorflow as tf
        print(f"{dtorch.size()} ranks on one host, Gloo, {args.bytes} B float32 Sum allreduce, "
              f"{args.rounds} rounds x {args.iters} calls per front end, interleaved every "
              f"{args.chunk} calls; torch {torch.__version__}, "
              f"tensorflow {tf.__version__}, jax {jax.__version__}, Python {platform.python_version()}, "
              f"{time.strftime('%Y-%m-%d %H:%M:%S')}")
        print()
        print("| front end | median latency (us) | / torch |")
        print("|---|---:|---:|")
        for n in names:
            print(f"| {n} | {medians[n]:.1f} | {medians[n] / medians['torch']:.2f} |")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"bytes": args.bytes, "size": dtorch.size(), "median_us": medians}, f, indent=1)
    dtorch.shutdown()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if "DADT_RANK" not in os.environ and "DADT_SIZE" not in os.environ:
        return launch(args, argv)
    worker(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
