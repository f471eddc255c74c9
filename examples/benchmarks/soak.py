"""A soak: a long training run across namespace hosts over a link that drops packets, with each
process's resident memory, open file descriptors and threads printed every minute, to show that
none of them grows (leaks) once the job is warm.

    sudo python3 examples/benchmarks/soak.py                       # 30 min, 4 ranks on h1, h2; 1% loss
    sudo python3 examples/benchmarks/soak.py --minutes 10 --loss 0.05 --launcher --mpi

It brings the namespace hosts up (tools/netns_hosts.sh) when they are missing, drops `--loss` of
the packets in and out of h2's link with iptables' statistic match (tc netem where the kernel has
it is not needed for that), and runs `dadtrun -np 4 -H h1:2,h2:2` on Digits in sync mode, epoch
after epoch, until `--minutes` have passed. Every minute each rank samples /proc/self (VmRSS,
entries of fd/, Threads), rank 0 gathers the samples and prints one row per rank, and the launcher
(dadtrun, sampled from here) gets its row too. At the end it prints, per process, each metric at
`--warm` minutes and at the last minute and their difference: "flat" is a difference within
`--rss-slack-mb` MiB for memory and 0 for descriptors and threads. Not part of `make test` (it
takes half an hour); docs/performance.md keeps its latest table.
"""
import argparse
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TAG = "dadt-soak"


def sample_self():
    """(RSS MiB, open fds, threads) of this process."""
    return sample(os.getpid())


def sample(pid):
    rss_kb = threads = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    fds = len(os.listdir("/proc/%d/fd" % pid))
    return rss_kb / 1024.0, fds, threads


def worker(args):
    import numpy as np
    import torch
    from sklearn.datasets import load_digits

    import dadt.torch as dadt

    torch.set_num_threads(1)
    if args.nice:
        os.nice(args.nice)  # the ranks start over ssh: the launcher's niceness does not reach them
    dadt.init()
    rank, size = dadt.rank(), dadt.size()
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    shard = np.arange(rank, len(x), size)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                    named_parameters=model.named_parameters())
    dadt.broadcast_parameters(model.state_dict(), root_rank=0)
    start = time.monotonic()
    next_sample, minute, epoch, steps = start, 0, 0, 0
    while True:
        order = torch.randperm(len(shard), generator=torch.Generator().manual_seed(epoch))
        for i in range(0, len(order), 32):
            idx = shard[order[i:i + 32].numpy()]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
            steps += 1
        epoch += 1
        # Every rank decides alike whether a minute passed (rank 0's clock), so that the gather
        # below is a collective every rank joins.
        now = torch.tensor([time.monotonic() - start])
        now = dadt.broadcast(now, root_rank=0, name="soak.clock.%d" % epoch).item()
        if now < minute * 60.0:
            continue
        mine = torch.tensor([list(sample_self())], dtype=torch.float64)
        rows = dadt.allgather(mine, name="soak.sample.%d" % minute)
        if rank == 0:
            for r in range(size):
                rss, fds, threads = rows[r].tolist()
                print("SAMPLE minute=%d rank=%d rss_mb=%.1f fds=%d threads=%d epoch=%d steps=%d"
                      % (minute, r, rss, fds, threads, epoch, steps), flush=True)
        if minute >= args.minutes:
            break
        minute += 1
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    if rank == 0:
        print("DONE accuracy=%.4f epochs=%d" % (acc, epoch), flush=True)
    dadt.shutdown()


def run(cmd, check=True):
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


def set_loss(host, probability, on):
    action = "-A" if on else "-D"
    for chain, flag in (("INPUT", "-i"), ("OUTPUT", "-o")):
        run(["ip", "netns", "exec", host, "iptables", action, chain, flag, "dadt0", "-m", "comment",
             "--comment", TAG, "-m", "statistic", "--mode", "random", "--probability",
             str(probability), "-j", "DROP"], check=on)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=int, default=30)
    p.add_argument("--warm", type=int, default=5, help="the minute from which nothing may grow")
    p.add_argument("--loss", type=float, default=0.01, help="fraction of h2's packets dropped")
    p.add_argument("--launcher", default="--gloo", choices=["--gloo", "--mpi"])
    p.add_argument("--rss-slack-mb", type=float, default=8.0)
    p.add_argument("--nice", type=int, default=0, help="niceness of the ranks (a shared machine)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    if os.geteuid() != 0:
        sys.exit("soak.py: run as root (namespace hosts, iptables)")
    netns = os.path.join(ROOT, "tools", "netns_hosts.sh")
    if "h2 " not in run(["bash", netns, "status"]).stdout or "sshd=running" not in run(["bash", netns, "status"]).stdout:
        run(["bash", netns, "up"])
    dadtrun = run(["bash", "-c", "command -v dadtrun"]).stdout.strip() or "dadtrun"
    cmd = [dadtrun, args.launcher, "-np", "4", "-H", "h1:2,h2:2", "--network-interface", "dadt0",
           sys.executable, os.path.abspath(__file__), "--worker", "--minutes", str(args.minutes),
           "--nice", str(args.nice)]
    print("+ " + " ".join(cmd), flush=True)
    if args.loss > 0:
        set_loss("h2", args.loss, True)
    launcher_rows, rank_rows = {}, {}
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        start = time.monotonic()
        for line in proc.stdout:
            m = re.search(r"SAMPLE minute=(\d+) rank=(\d+) rss_mb=([\d.]+) fds=(\d+) threads=(\d+)", line)
            if m:
                minute, rank = int(m.group(1)), int(m.group(2))
                rank_rows.setdefault(rank, {})[minute] = tuple(map(float, m.groups()[2:]))
                print(line.rstrip(), flush=True)
                if rank == 0:  # the launcher, sampled from here at the same minute
                    launcher_rows[minute] = sample(proc.pid)
                    print("SAMPLE minute=%d dadtrun rss_mb=%.1f fds=%d threads=%d"
                          % ((minute,) + launcher_rows[minute]), flush=True)
            elif "DONE" in line or "rror" in line or line.startswith("dadtrun"):
                print(line.rstrip(), flush=True)
        rc = proc.wait()
        took = time.monotonic() - start
    finally:
        if args.loss > 0:
            set_loss("h2", args.loss, False)
    print()
    print("soak: %d ranks on h1:2,h2:2 (%s), %.0f%% of h2's packets dropped, %.1f min, dadtrun exit %d"
          % (4, args.launcher, 100 * args.loss, took / 60, rc))
    print()
    print("| process | RSS MiB at min %d | at min %d | change | fds at %d / %d | threads at %d / %d | flat |"
          % (args.warm, args.minutes, args.warm, args.minutes, args.warm, args.minutes))
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    everything_flat = True
    rows = [("rank %d" % r, rank_rows[r]) for r in sorted(rank_rows)] + [("dadtrun", launcher_rows)]
    for name, series in rows:
        if args.warm not in series or args.minutes not in series:
            print("| %s | (no sample at minute %d or %d) | | | | | no |" % (name, args.warm, args.minutes))
            everything_flat = False
            continue
        (r0, f0, t0), (r1, f1, t1) = series[args.warm], series[args.minutes]
        flat = abs(r1 - r0) <= args.rss_slack_mb and f1 == f0 and t1 == t0
        everything_flat &= flat
        print("| %s | %.1f | %.1f | %+.1f | %d / %d | %d / %d | %s |"
              % (name, r0, r1, r1 - r0, f0, f1, t0, t1, "yes" if flat else "NO"))
    return 0 if rc == 0 and everything_flat else 1


if __name__ == "__main__":
    sys.exit(main())
