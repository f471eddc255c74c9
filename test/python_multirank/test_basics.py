"""Job geometry, barrier, naming and the state before init()."""
import os
import subprocess
import sys
import time

import torch

import dadt.torch as dadt
from dadt.common import basics
from collective_utils import assert_equal


def test_geometry(world, nm):
    ranks = dadt.allgather(torch.tensor([world.rank], dtype=torch.int64), name=nm("rank"))
    local = dadt.allgather(
        torch.tensor([[dadt.local_rank(), dadt.local_size(), dadt.cross_rank(), dadt.cross_size()]]),
        name=nm("local"),
    )
    assert world.size >= 1
    assert 0 <= world.rank < world.size
    if "DADT_SIZE" in os.environ:
        assert world.size == int(os.environ["DADT_SIZE"])
        assert world.rank == int(os.environ["DADT_RANK"])
    assert_equal(ranks, torch.arange(world.size, dtype=torch.int64), "ranks gathered in rank order")
    if all(int(local[r, 3]) == 1 for r in range(world.size)):  # one host: every rank is local
        for r in range(world.size):
            lr, ls, cr, cs = local[r].tolist()
            assert (lr, ls, cr, cs) == (r, world.size, 0, 1), f"rank {r}: local/cross geometry {lr, ls, cr, cs}"
    else:  # several hosts: each (cross_rank, local_rank) pair names exactly one rank
        pairs = {(int(local[r, 2]), int(local[r, 0])) for r in range(world.size)}
        assert len(pairs) == world.size, f"local/cross ranks do not identify the ranks: {local.tolist()}"


def test_backend_queries():
    assert dadt.gloo_built() is True
    assert isinstance(dadt.mpi_built(), bool)
    # Horovod's contract: NCCL's version code (scripts compare it with 2700 and the like), or 0.
    version = dadt.nccl_built()
    assert type(version) is int and (version > 2700) == ("nccl" in basics.built_backends()), version
    assert isinstance(dadt.mpi_threads_supported(), bool)


def test_barrier_waits_for_every_rank(world, nm):
    # The last rank arrives late; nobody may leave the barrier before it arrived.
    time.sleep(0.3 if world.rank == world.size - 1 else 0.0)
    arrived = time.time()
    dadt.barrier()
    left = time.time()
    times = dadt.allgather(torch.tensor([[arrived, left]], dtype=torch.float64), name=nm("times"))
    last_arrival = times[:, 0].max().item()
    for r in range(world.size):
        assert times[r, 1].item() >= last_arrival - 1e-3, f"rank {r} left the barrier before the last rank arrived"


def test_repeated_barriers():
    for _ in range(20):
        dadt.barrier()


def test_auto_names(world):
    # name=None: ranks call in the same order, so generated names agree.
    outs = [dadt.allreduce(torch.full((3,), float(i + world.rank)), op=dadt.Sum) for i in range(5)]
    base = world.size * (world.size - 1) / 2
    for i, out in enumerate(outs):
        assert_equal(out, torch.full((3,), i * world.size + base), f"unnamed allreduce {i}")


def test_same_name_reused_with_new_shape_and_dtype(world, nm):
    # Sequential reuse of a name is legal; the response cache must notice the change.
    name = nm("reused")
    results = []
    specs = [((4,), torch.float32), ((4,), torch.float32), ((7, 2), torch.float32), ((7, 2), torch.int32),
             ((1,), torch.float64), ((4,), torch.float32)]
    for shape, dtype in specs:
        results.append(dadt.allreduce(torch.ones(shape, dtype=dtype), name=name, op=dadt.Sum))
    for (shape, dtype), out in zip(specs, results):
        assert_equal(out, torch.full(shape, world.size, dtype=dtype), f"reused name with {shape} {dtype}")


def test_collective_before_init_raises_value_error(world):
    # A fresh interpreter outside the job: no launcher environment, no init(). No collective here,
    # so one rank is enough (importing torch on every rank at once costs ~10 s on 2 cores).
    if world.rank != 0:
        return
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DADT_") and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                       "MASTER_ADDR", "MASTER_PORT")}
    code = (
        "import torch, dadt.torch as d\n"
        "for f in (lambda: d.allreduce(torch.ones(2), name='pre.init'),\n"
        "          lambda: d.broadcast(torch.ones(2), 0, name='pre.init'),\n"
        "          lambda: d.allgather(torch.ones(2), name='pre.init')):\n"
        "    try:\n"
        "        f()\n"
        "        print('NO-ERROR')\n"
        "    except Exception as e:\n"
        "        print(type(e).__name__ + ':' + str(e).replace(chr(10), ' '))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 3, proc.stdout
    for line in lines:
        assert line.startswith("ValueError:"), f"collective before init(): {line}"
