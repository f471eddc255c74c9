"""Delay, jitter and loss where the kernel has no netem (sch_netem): what iptables hands to NFQUEUE
queue QUEUE in this network namespace is dropped with probability LOSS, or else held for a delay
drawn uniformly from DELAY - JITTER .. DELAY + JITTER ms (never below 0; packets overtake each other,
as under netem with jitter) and then let through.

    ip netns exec h4 python3 test/chaos/userspace_netem.py --queue 7 --loss 0.05 --delay-ms 20 --jitter-ms 50
    ip netns exec h4 iptables -A OUTPUT -o dadt0 -j NFQUEUE --queue-num 7 --queue-bypass

It prints READY once the queue is bound (before that, --queue-bypass lets packets through
untouched). SIGTERM lets every held packet go and exits 0, printing how many packets it delayed and
dropped. One thread: it waits on the queue's descriptor until the next held packet is due.
conftest.lossy_link starts and stops it; netfilterqueue (requirements-test.txt) binds the queue.
"""
import argparse
import heapq
import itertools
import random
import select
import signal
import sys
import time

from netfilterqueue import NetfilterQueue


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--queue", type=int, required=True)
    p.add_argument("--loss", type=float, default=0.05)
    p.add_argument("--delay-ms", type=float, default=20.0)
    p.add_argument("--jitter-ms", type=float, default=50.0)
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args()
    rng = random.Random(args.seed)
    held = []  # (due, sequence, packet)
    sequence = itertools.count()
    counts = {"delayed": 0, "dropped": 0}

    def arrived(packet):
        if rng.random() < args.loss:
            packet.drop()
            counts["dropped"] += 1
            return
        delay = max(0.0, rng.uniform(args.delay_ms - args.jitter_ms, args.delay_ms + args.jitter_ms)) / 1e3
        heapq.heappush(held, (time.monotonic() + delay, next(sequence), packet))
        counts["delayed"] += 1

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    queue = NetfilterQueue()
    queue.bind(args.queue, arrived, max_len=65536)
    print("READY", flush=True)
    try:
        while not stopping:
            wait = max(0.0, held[0][0] - time.monotonic()) if held else 0.1
            try:
                readable, _, _ = select.select([queue.get_fd()], [], [], min(wait, 0.1))
            except InterruptedError:
                continue
            if readable:
                queue.run(block=False)
            now = time.monotonic()
            while held and held[0][0] <= now:
                heapq.heappop(held)[2].accept()
    finally:
        while held:
            heapq.heappop(held)[2].accept()
        queue.unbind()
    print("delayed %(delayed)d dropped %(dropped)d" % counts, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
