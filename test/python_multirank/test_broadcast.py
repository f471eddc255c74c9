"""broadcast from every root, every dtype, in place and async."""
import pytest
import torch

import dadt.torch as dadt
from collective_utils import DTYPES, assert_equal, dtype_id, values


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_broadcast_every_root(world, nm, dtype):
    outs, inputs = [], []
    for root in range(world.size):
        x = values((3, 7), dtype, world.rank, salt=root)
        inputs.append(x.clone())
        outs.append(dadt.broadcast(x, root_rank=root, name=nm(f"root{root}")))
    for root, (out, x) in enumerate(zip(outs, inputs)):
        assert_equal(out, values((3, 7), dtype, root, salt=root), f"broadcast from root {root}")
    # Non-in-place broadcast leaves the input alone (checked on the last call).
    assert_equal(x, values((3, 7), dtype, world.rank, salt=world.size - 1), "broadcast input untouched")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8, torch.bool], ids=dtype_id)
def test_broadcast_in_place_every_root(world, nm, dtype):
    xs, outs = [], []
    for root in range(world.size):
        x = values((5,), dtype, world.rank, salt=root)
        xs.append(x)
        outs.append(dadt.broadcast_(x, root_rank=root, name=nm(f"root{root}")))
    for root, (x, out) in enumerate(zip(xs, outs)):
        assert out is x, "broadcast_ returns the tensor it was given"
        assert_equal(x, values((5,), dtype, root, salt=root), f"broadcast_ from root {root}")


@pytest.mark.parametrize("shape", [(), (0,), (1,), (1001,), (2, 0, 3), (2, 3, 4, 5)],
                         ids=lambda s: "x".join(map(str, s)) or "scalar")
def test_broadcast_shapes(world, nm, shape):
    root = world.size - 1
    out = dadt.broadcast(values(shape, torch.float64, world.rank), root_rank=root, name=nm())
    assert_equal(out, values(shape, torch.float64, root), f"broadcast shape {shape}")


def test_broadcast_async_forms_out_of_order(world, nm):
    handles, xs = [], []
    for root in range(world.size):
        x = values((4,), torch.int64, world.rank, salt=root)
        xs.append(x)
        handles.append(dadt.broadcast_async(x, root_rank=root, name=nm(f"async{root}")))
    y = values((6,), torch.float16, world.rank)
    h_inplace = dadt.broadcast_async_(y, root_rank=0, name=nm("async_"))
    out_inplace = dadt.synchronize(h_inplace)
    outs = {root: dadt.synchronize(handles[root]) for root in reversed(range(world.size))}
    assert out_inplace is y
    assert_equal(y, values((6,), torch.float16, 0), "broadcast_async_")
    for root in range(world.size):
        assert_equal(outs[root], values((4,), torch.int64, root, salt=root), f"broadcast_async root {root}")


def test_broadcast_large(world, nm):
    n = 1 << 20
    x = torch.arange(n, dtype=torch.float32) + world.rank
    dadt.broadcast_(x, root_rank=0, name=nm())
    assert_equal(x, torch.arange(n, dtype=torch.float32), "broadcast of 4 MiB from rank 0")
