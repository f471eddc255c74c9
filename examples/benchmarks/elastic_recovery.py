"""Elastic recovery time: from a SIGKILLed worker to the first training step completed at the new size.

    python3 examples/benchmarks/elastic_recovery.py --hosts h1:1,h2:1,h3:1 --network-interface dadt0
    python3 examples/benchmarks/elastic_recovery.py --hosts localhost:3 --repeats 5

Each repeat launches `dadtrun --gloo -np N --min-np N-1 -H HOSTS` running
examples/elastic/train_digits_elastic.py (TorchState + ElasticSampler) with --step-log, waits until the
victim (the worker of --victim-rank in the first round; by default the last) has completed --kill-step steps,
SIGKILLs it (by pid: namespace hosts share this machine's pid space; a real remote host does not, so
run this on one machine or on network namespaces such as tools/netns_hosts.sh's), and times, from the kill:

  failed   the first survivor's collective raised DadtInternalError (the failure seen)
  round    dadtrun printed the new round (the driver published it)
  reset    the last survivor finished init() into the new round (re-init done)
  resumed  the last survivor has the state synced and goes on training
  step     the last survivor completed its first step at the new size (the recovery time)

then stops the job (SIGTERM to dadtrun, which forwards it). Prints one row per repeat, the median and the
min..max; exit status 1 when a repeat did not recover. The issue's target (docs/performance.md,
"Elastic recovery"): under 10 s plus one Gloo time-out (DADT_GLOO_TIMEOUT_SECONDS, --gloo-timeout).
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "elastic", "train_digits_elastic.py")
PHASES = ["failed", "round", "reset", "resumed", "step"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", default="localhost:3", help="dadtrun -H (default localhost:3)")
    p.add_argument("--network-interface", default=None, help="dadtrun --network-interface")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--kill-step", type=int, default=40, help="steps the victim completes before the kill")
    p.add_argument("--victim-rank", type=int, default=None, help="rank in the first round (default: the last)")
    p.add_argument("--gloo-timeout", type=int, default=10, help="DADT_GLOO_TIMEOUT_SECONDS of the workers")
    p.add_argument("--step-delay", type=float, default=0.01, help="the example's --step-delay")
    p.add_argument("--timeout", type=float, default=180, help="seconds one repeat may take")
    p.add_argument("--dadtrun", default=None, help="default: beside this python, else on PATH")
    return p.parse_args()


def read_log(path):
    """[(time, worker id, pid, rank, size, event words)] of the example's --step-log."""
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                w = line.split()
                if len(w) >= 6:
                    rows.append((float(w[0]), w[1], int(w[2]), int(w[3]), int(w[4]), w[5:]))
    return rows


def one_repeat(args, dadtrun, np_, workdir):
    log = os.path.join(workdir, "steps.log")
    cmd = [dadtrun, "--gloo", "-np", str(np_), "--min-np", str(np_ - 1), "-H", args.hosts]
    if args.network_interface:
        cmd += ["--network-interface", args.network_interface]
    cmd += [sys.executable, SCRIPT, "--epochs", "50", "--step-log", log, "--step-delay", str(args.step_delay)]
    env = dict(os.environ, DADT_GLOO_TIMEOUT_SECONDS=str(args.gloo_timeout), OMP_NUM_THREADS="1",
               PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    driver_lines = []  # (time read, line)

    def pump():
        for line in proc.stderr:
            driver_lines.append((time.time(), line.rstrip("\n")))

    threading.Thread(target=pump, daemon=True).start()
    victim_rank = np_ - 1 if args.victim_rank is None else args.victim_rank
    deadline = time.monotonic() + args.timeout
    try:
        victim = None
        while victim is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("no kill: the job ended or stalled before the victim's step %d:\n%s"
                                   % (args.kill_step, "\n".join(l for _, l in driver_lines[-20:])))
            steps = [r for r in read_log(log) if r[3] == victim_rank and r[4] == np_ and r[5][0] == "step"]
            if len(steps) >= args.kill_step:
                victim = steps[-1][2]
            time.sleep(0.01)
        killed_at = time.time()
        os.kill(victim, signal.SIGKILL)
        got = {}
        while "step" not in got:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("no step at size %d after the kill:\n%s"
                                   % (np_ - 1, "\n".join(l for _, l in driver_lines[-20:])))
            time.sleep(0.05)
            rows = [r for r in read_log(log) if r[0] >= killed_at and r[2] != victim]
            survivors = {r[2] for r in read_log(log) if r[2] != victim and r[0] < killed_at}
            got = {}
            failed = [r[0] for r in rows if r[5][0] == "failed"]
            if failed:
                got["failed"] = min(failed)
            rounds = [t for t, line in driver_lines if t >= killed_at and "dadtrun: elastic: round " in line]
            if rounds:
                got["round"] = rounds[0]
            for event in ("reset", "resumed"):
                firsts = {}
                for r in rows:
                    if r[5][0] == event and r[4] == np_ - 1:
                        firsts.setdefault(r[2], r[0])
                if survivors and set(firsts) >= survivors:
                    got[event] = max(firsts.values())
            firsts = {}
            for r in rows:
                if r[5][0] == "step" and r[4] == np_ - 1:
                    firsts.setdefault(r[2], r[0])
            if survivors and set(firsts) >= survivors and "resumed" in got:
                got["step"] = max(firsts.values())
        return {k: v - killed_at for k, v in got.items()}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # dadtrun forwards it to every worker, SIGKILL after 5 s
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def main():
    args = parse_args()
    beside = os.path.join(os.path.dirname(sys.executable), "dadtrun")
    dadtrun = args.dadtrun or (beside if os.path.exists(beside) else shutil.which("dadtrun"))
    if not dadtrun:
        sys.exit("elastic_recovery.py: dadtrun not found (give --dadtrun or install dadt)")
    np_ = sum(int(h.split(":")[1]) if ":" in h else 1 for h in args.hosts.split(","))
    if np_ < 2:
        sys.exit("elastic_recovery.py: --hosts must give at least 2 slots (one is killed)")
    print("elastic recovery: %d workers on %s, Gloo time-out %d s, kill after the victim's step %d, load %s"
          % (np_, args.hosts, args.gloo_timeout, args.kill_step, " ".join("%.2f" % x for x in os.getloadavg())))
    results, failures = [], 0
    for i in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="dadt-elastic-recovery-") as workdir:
            try:
                results.append(one_repeat(args, dadtrun, np_, workdir))
            except RuntimeError as e:
                failures += 1
                print("repeat %d: %s" % (i + 1, e), file=sys.stderr)
    header = "| run | " + " | ".join(PHASES) + " |"
    print(header)
    print("|" + " --- |" * (len(PHASES) + 1))

    for i, r in enumerate(results):
        print("| %d | " % (i + 1) + " | ".join("%.2f" % r[p] if p in r else "-" for p in PHASES) + " |")
    if results:
        cols = [[r[p] for r in results if p in r] for p in PHASES]
        print("| median | " + " | ".join("%.2f" % statistics.median(c) if c else "-" for c in cols) + " |")
        print("| min..max | " + " | ".join("%.2f..%.2f" % (min(c), max(c)) if c else "-" for c in cols) + " |")
    print("seconds after the SIGKILL; step = the recovery time (target: under 10 s + %d s Gloo time-out)"
          % args.gloo_timeout)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
