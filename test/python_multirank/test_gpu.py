"""CUDA tensors through dadt.torch: every collective, fusion, fp16 compression, stream ordering.

With one GPU per rank on the host (e.g. -np 1 on a one-GPU machine) NCCL moves the tensors; with
fewer GPUs than ranks the runtime stages them through host memory and the job's Gloo or MPI
executor, so at -np 2..4 on one GPU the same assertions cover the staged path. Which one ran is
checked too. Every test skips, on every rank alike, where torch sees no GPU or dadt was built
without CUDA.
"""
import pytest
import torch

import dadt.torch as dadt
from dadt.common import basics
from collective_utils import DTYPES, OPS, assert_equal, dtype_id, inputs_for, reduce_expected


@pytest.fixture
def dev():
    if not torch.cuda.is_available():
        pytest.skip("torch.cuda is not available on this machine (no GPU): GPU tests need one")
    if not dadt.cuda_built():
        pytest.skip("dadt was built without CUDA/NCCL (tools/configure_cuda.py found no nvcc or NCCL)")
    return torch.device("cuda", dadt.local_rank() % torch.cuda.device_count())


def test_nccl_serves_gpu_tensors_exactly_when_each_rank_has_its_own_gpu(dev):
    one_each = torch.cuda.device_count() >= dadt.local_size()
    assert basics.nccl_enabled() == one_each


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op_name", list(OPS))
def test_allreduce_on_the_gpu(world, nm, dev, dtype, op_name):
    if dtype is torch.bool and op_name == "Average":
        pytest.skip("Average of bool is an error (test_errors.py)")
    shape = (5, 33)
    x = inputs_for(op_name, shape, dtype, world.rank, world.size).to(dev)
    if dtype in (torch.int16, torch.uint16) and basics.nccl_enabled():
        # NCCL has no 16-bit integers: the reduction fails on every rank, naming the type.
        with pytest.raises(ValueError, match="NCCL has no 16-bit integer type"):
            dadt.allreduce(x, name=nm(), op=OPS[op_name])
        return
    out = dadt.allreduce(x, name=nm(), op=OPS[op_name])
    assert out.device == dev
    assert_equal(out.cpu(), reduce_expected(op_name, shape, dtype, world.size), f"{op_name} {dtype}")


def test_many_small_gradients_are_fused_and_ordered_after_the_producing_stream(world, nm, dev):
    # The inputs are written by a kernel still queued on a side stream when dadt is called:
    # dadt must order its work after that stream, not read stale memory.
    side = torch.cuda.Stream(dev)
    tensors = [torch.zeros(97 + i, device=dev) for i in range(40)]
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)  # ~10 ms of GPU time ahead of the writes
        for i, t in enumerate(tensors):
            t.fill_(world.rank + i)
        handles = [dadt.allreduce_async(t, name=nm(i), op=dadt.Sum) for i, t in enumerate(tensors)]
    outs = [dadt.synchronize(h) for h in handles]
    base = world.size * (world.size - 1) / 2
    for i, o in enumerate(outs):
        assert torch.equal(o.cpu(), torch.full((97 + i,), base + world.size * i)), i


def test_fp16_compression(world, nm, dev):
    x = torch.arange(64, dtype=torch.float32, device=dev) + world.rank
    out = dadt.allreduce(x, name=nm(), op=dadt.Sum, compression=dadt.Compression.fp16)
    assert out.dtype == torch.float32 and out.device == dev
    expect = torch.arange(64, dtype=torch.float32) * world.size + world.size * (world.size - 1) / 2
    assert torch.equal(out.cpu(), expect)


def test_allgather_with_rank_dependent_rows(world, nm, dev):
    x = torch.full((world.rank + 1, 3), float(world.rank), device=dev)
    out = dadt.allgather(x, name=nm())
    assert out.device == dev
    expect = torch.cat([torch.full((r + 1, 3), float(r)) for r in range(world.size)])
    assert torch.equal(out.cpu(), expect)


def test_broadcast_in_place_from_the_last_rank(world, nm, dev):
    root = world.size - 1
    x = torch.full((7, 2), float(world.rank), device=dev, dtype=torch.float64)
    dadt.broadcast_(x, root_rank=root, name=nm())
    assert torch.equal(x.cpu(), torch.full((7, 2), float(root), dtype=torch.float64))


def test_alltoall_with_splits(world, nm, dev):
    splits = [r + 1 for r in range(world.size)]
    x = torch.cat([torch.full((s, 2), float(world.rank * 10 + j)) for j, s in enumerate(splits)]).to(dev)
    out, received = dadt.alltoall(x, splits=torch.tensor(splits), name=nm())
    assert out.device == dev
    expect = torch.cat([torch.full((world.rank + 1, 2), float(r * 10 + world.rank)) for r in range(world.size)])
    assert torch.equal(out.cpu(), expect)
    assert received.tolist() == [world.rank + 1] * world.size


def test_reducescatter_uneven_rows(world, nm, dev):
    rows = 2 * world.size + 1
    x = (torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3) + world.rank).to(dev)
    out = dadt.reducescatter(x, name=nm(), op=dadt.Sum)
    total = sum(torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3) + r for r in range(world.size))
    mine = torch.tensor_split(total, world.size)[world.rank]
    assert out.device == dev
    assert torch.equal(out.cpu(), mine)


def test_a_group_mixing_cpu_and_gpu_tensors_is_refused_before_anything_is_enqueued(world, nm, dev):
    tensors = [torch.ones(10, device=dev) if i % 2 == 0 else torch.ones(10) for i in range(5)]
    with pytest.raises(RuntimeError, match="every member of a group must be on the same device"):
        dadt.grouped_allreduce(tensors, name=nm(), op=dadt.Sum)
    # Nothing of the refused group is left in flight: the same names work at once.
    out = dadt.grouped_allreduce([t.to(dev) for t in tensors], name=nm(), op=dadt.Sum)
    assert all(torch.equal(o.cpu(), torch.full((10,), float(world.size))) for o in out)


def test_alltoall_splits_given_on_the_gpu_come_back_on_the_gpu(world, nm, dev):
    splits = torch.tensor([world.rank + 1] * world.size, dtype=torch.int32, device=dev)
    x = torch.full((world.size * (world.rank + 1), 2), float(world.rank), device=dev)
    out, received = dadt.alltoall(x, splits=splits, name=nm())
    assert received.device == dev and out.device == dev
    assert received.tolist() == [r + 1 for r in range(world.size)]
