"""Why dadt's MPI data plane starts large collectives with a barrier (runtime/backends/mpi/mpi_backend.h,
"Aligned start"), shown with mpi4py alone, no dadt:

    mpirun -np 2 python3 examples/benchmarks/mpi_aligned_start.py [--size BYTES] [--iters N]

Each way of entering MPI_Allreduce(IN_PLACE, float32, SUM) is timed on rank 0 (median, ms):
  together       both ranks leave a barrier and call it at once;
  late           rank 1 sleeps 100 us first;
  late + probe   rank 1 sleeps 100 us, then makes one MPI_Iprobe on another communicator (as dadt's
                 worker does while it looks for the coordinator's response) before calling it;
  late + probe + barrier   the same, with MPI_Barrier on the data communicator just before it.
With Open MPI's shared-memory transport (single-copy CMA), "late + probe" is the slow one: the probe
pulls in rank 0's rendezvous header, and rank 1's receive then copies the whole message before rank 1
has sent its own, so the two ranks' copies run one after the other.
"""
import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=64 << 20, help="bytes (default 64 MiB)")
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    probe_comm, data = world.Dup(), world.Dup()
    buf = np.zeros(args.size // 4, dtype=np.float32)
    late = world.rank == 1

    def prepare(probe, barrier):
        if late:
            time.sleep(100e-6)
            if probe:
                probe_comm.Iprobe(source=MPI.ANY_SOURCE, tag=7001)
        if barrier:
            data.Barrier()

    ways = {"together": (False, False, False), "late": (True, False, False),
            "late + probe": (True, True, False), "late + probe + barrier": (True, True, True)}
    times = {w: [] for w in ways}
    for i in range(args.iters + 2):
        for way, (sleep, probe, barrier) in ways.items():
            world.Barrier()
            start = time.perf_counter()
            if sleep:
                prepare(probe, barrier)
            data.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
            if i >= 2:  # warm-up
                times[way].append(time.perf_counter() - start)
    if world.rank == 0:
        print(f"MPI_Allreduce of {args.size} bytes at {world.size} ranks, median of {args.iters} (ms):")
        for way, t in times.items():
            print(f"  {way:24s} {statistics.median(t) * 1e3:8.2f}")


if __name__ == "__main__":
    main()
