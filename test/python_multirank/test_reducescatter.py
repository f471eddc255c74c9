"""reducescatter: first dimension split across ranks (earlier ranks get the extra rows)."""
import pytest
import torch

import dadt.torch as dadt
from collective_utils import DTYPES, FLOAT_DTYPES, OPS, assert_equal, dtype_id, inputs_for, reduce_expected


def my_slice(rows, rank, size):
    base, extra = divmod(rows, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def expected_part(op_name, shape, dtype, world, salt=0, prescale=1.0, postscale=1.0):
    full = reduce_expected(op_name, shape, dtype, world.size, salt=salt, prescale=prescale, postscale=postscale)
    lo, hi = my_slice(shape[0], world.rank, world.size)
    return full[lo:hi]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_reducescatter_sum_dtypes(world, nm, dtype):
    shape = (2 * world.size + 1, 3)  # never divisible by size (> 1)
    x = inputs_for("Sum", shape, dtype, world.rank, world.size)
    out = dadt.reducescatter(x, name=nm(), op=dadt.Sum)
    assert_equal(out, expected_part("Sum", shape, dtype, world), f"reducescatter Sum {dtype}")


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d is not torch.bool], ids=dtype_id)
def test_reducescatter_average_dtypes(world, nm, dtype):
    shape = (world.size + 2, 2)
    x = inputs_for("Average", shape, dtype, world.rank, world.size)
    out = dadt.reducescatter(x, name=nm(), op=dadt.Average)
    assert_equal(out, expected_part("Average", shape, dtype, world), f"reducescatter Average {dtype}")


def test_reducescatter_default_op_is_average(world, nm):
    shape = (world.size * 2, 5)
    out = dadt.reducescatter(inputs_for("Average", shape, torch.float32, world.rank, world.size), name=nm())
    assert_equal(out, expected_part("Average", shape, torch.float32, world), "default op")


@pytest.mark.parametrize("rows_fn", [
    pytest.param(lambda n: 1, id="1row"),
    pytest.param(lambda n: n - 1, id="size-1rows"),
    pytest.param(lambda n: 0, id="0rows"),
    pytest.param(lambda n: 1001, id="1001rows"),
    pytest.param(lambda n: 3 * n + 2, id="3size+2rows"),
])
def test_reducescatter_uneven_rows(world, nm, rows_fn):
    shape = (rows_fn(world.size), 3, 2)
    x = inputs_for("Sum", shape, torch.float32, world.rank, world.size, salt=5)
    out = dadt.reducescatter(x, name=nm(), op=dadt.Sum)
    lo, hi = my_slice(shape[0], world.rank, world.size)
    assert tuple(out.shape) == (hi - lo, 3, 2), f"rank {world.rank} got shape {tuple(out.shape)}"
    assert_equal(out, expected_part("Sum", shape, torch.float32, world, salt=5), f"rows {shape[0]}")


def test_reducescatter_1d(world, nm):
    shape = (4 * world.size + 3,)
    out = dadt.reducescatter(inputs_for("Sum", shape, torch.int64, world.rank, world.size), name=nm(), op=dadt.Sum)
    assert_equal(out, expected_part("Sum", shape, torch.int64, world), "1-d reducescatter")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_reducescatter_scaling(world, nm, dtype):
    shape = (world.size + 1, 4)
    x = inputs_for("Sum", shape, dtype, world.rank, world.size, salt=3)
    out = dadt.reducescatter(x, name=nm(), op=dadt.Sum, prescale_factor=0.5, postscale_factor=4.0)
    assert_equal(out, expected_part("Sum", shape, dtype, world, salt=3, prescale=0.5, postscale=4.0), "scaled")


@pytest.mark.parametrize("op_name", ["Max", "Product"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int32], ids=dtype_id)
def test_reducescatter_prescale_applies_to_each_input(world, nm, dtype, op_name):
    # A negative prescale makes Max give -min, and Product carries (-1)^size: scaling the reduced
    # result instead of each rank's input (Horovod's order) would give other values.
    shape = (world.size + 1, 3)
    x = inputs_for(op_name, shape, dtype, world.rank, world.size, salt=5)
    out = dadt.reducescatter(x, name=nm(), op=OPS[op_name], prescale_factor=-1.0, postscale_factor=2.0)
    assert_equal(out, expected_part(op_name, shape, dtype, world, salt=5, prescale=-1.0, postscale=2.0),
                 f"reducescatter {op_name} {dtype} prescale -1 postscale 2")


def test_reducescatter_async_out_of_order(world, nm):
    shapes = [(world.size * k + k % 3, 2) for k in range(1, 6)]
    handles = [dadt.reducescatter_async(inputs_for("Sum", s, torch.float32, world.rank, world.size, salt=i),
                                        name=nm(str(i)), op=dadt.Sum) for i, s in enumerate(shapes)]
    outs = {i: dadt.synchronize(handles[i]) for i in reversed(range(len(shapes)))}
    for i, s in enumerate(shapes):
        assert_equal(outs[i], expected_part("Sum", s, torch.float32, world, salt=i), f"reducescatter_async {i}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32], ids=dtype_id)
def test_reducescatter_async_into_out(world, nm, dtype):
    # out=: this rank's rows land in the caller's tensor, a view into a larger buffer, and
    # synchronize() returns that very tensor; the rest of the buffer is left alone.
    shape = (2 * world.size + 1, 3)
    lo, hi = my_slice(shape[0], world.rank, world.size)
    backing = torch.full((hi - lo + 2, 3), 7, dtype=dtype)
    out = backing[1:1 + hi - lo]
    x = inputs_for("Average", shape, dtype, world.rank, world.size, salt=6)
    result = dadt.synchronize(dadt.reducescatter_async(x, name=nm(), out=out))
    assert result is out
    assert_equal(out, expected_part("Average", shape, dtype, world, salt=6), "reducescatter into out")
    assert (backing[0] == 7).all() and (backing[-1] == 7).all(), "wrote outside out"


@pytest.mark.parametrize("op_name", ["Sum", "Average"])
def test_reducescatter_in_place_into_own_rows(world, nm, op_name):
    # out= may be this rank's own rows of the input (how mode="dear" avoids a copy): the result
    # lands there, and every other row of the input is left as it was.
    shape = (2 * world.size + 1, 3)
    lo, hi = my_slice(shape[0], world.rank, world.size)
    x = inputs_for("Sum", shape, torch.float32, world.rank, world.size, salt=9)
    before = x.clone()
    op = dadt.Sum if op_name == "Sum" else dadt.Average
    result = dadt.synchronize(dadt.reducescatter_async(x, name=nm(), op=op, out=x[lo:hi]))
    expected = expected_part("Sum", shape, torch.float32, world, salt=9)
    if op_name == "Average":
        expected = expected / world.size
    assert_equal(result, expected, "reducescatter in place")
    assert_equal(x[lo:hi], expected, "reducescatter in place: the input's own rows")
    assert torch.equal(x[:lo], before[:lo]) and torch.equal(x[hi:], before[hi:]), "other rows changed"


def test_reducescatter_out_of_the_wrong_size_is_refused(world, nm):
    # Every rank refuses at enqueue (its share is known), naming the tensor and the rows needed.
    shape = (2 * world.size + 1, 3)
    lo, hi = my_slice(shape[0], world.rank, world.size)
    with pytest.raises(ValueError, match=r"reducescatter output holds .* needs %d rows" % (hi - lo)):
        dadt.reducescatter_async(torch.ones(shape), name=nm(), out=torch.zeros(hi - lo + 1, 3))
