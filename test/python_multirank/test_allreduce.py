"""allreduce in all its forms: every dtype x every reduce op, scaling, sizes, shapes, in place, grouped."""
import warnings

import pytest
import torch

import dadt.torch as dadt
from collective_utils import (
    DTYPES,
    FLOAT_DTYPES,
    OPS,
    assert_equal,
    dtype_id,
    inputs_for,
    reduce_expected,
)

OP_NAMES = list(OPS)


def _dtype_op_cases():
    for dtype in DTYPES:
        for op in OP_NAMES:
            if dtype is torch.bool and op == "Average":
                continue  # an error, see test_errors.py
            yield pytest.param(dtype, op, id=f"{dtype_id(dtype)}-{op}")


@pytest.mark.parametrize("dtype,op_name", list(_dtype_op_cases()))
def test_allreduce_dtype_op(world, nm, dtype, op_name):
    shape = (3, 17)
    x = inputs_for(op_name, shape, dtype, world.rank, world.size)
    before = x.clone()
    out = dadt.allreduce(x, name=nm(), op=OPS[op_name])
    assert_equal(out, reduce_expected(op_name, shape, dtype, world.size), f"allreduce {op_name} {dtype}")
    assert_equal(x, before, "allreduce must not modify its input")


@pytest.mark.parametrize("op_name", OP_NAMES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_allreduce_prescale_postscale(world, nm, dtype, op_name):
    shape = (2, 9)
    x = inputs_for(op_name, shape, dtype, world.rank, world.size, salt=1)
    out = dadt.allreduce(x, name=nm(), op=OPS[op_name], prescale_factor=0.5, postscale_factor=4.0)
    expected = reduce_expected(op_name, shape, dtype, world.size, salt=1, prescale=0.5, postscale=4.0)
    assert_equal(out, expected, f"allreduce {op_name} {dtype} prescale 0.5 postscale 4")


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32], ids=dtype_id)
def test_allreduce_integer_postscale_only(world, nm, dtype):
    # Sum then x2: exact for integer dtypes too.
    x = inputs_for("Sum", (11,), dtype, world.rank, world.size)
    out = dadt.allreduce(x, name=nm(), op=dadt.Sum, postscale_factor=2.0)
    assert_equal(out, reduce_expected("Sum", (11,), dtype, world.size, postscale=2.0), "postscale 2")


SHAPES = [(), (0,), (1,), (17,), (1001,), (65537,), (0, 3), (3, 0, 2), (2, 3, 4), (1, 1, 1, 5), (5, 1, 7, 3)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)) or "scalar")
def test_allreduce_sizes_and_shapes(world, nm, shape):
    x = inputs_for("Sum", shape, torch.float32, world.rank, world.size)
    out = dadt.allreduce(x, name=nm(), op=dadt.Sum)
    assert_equal(out, reduce_expected("Sum", shape, torch.float32, world.size), f"shape {shape}")


def test_allreduce_default_op_is_average(world, nm):
    x = inputs_for("Average", (6,), torch.float32, world.rank, world.size)
    out_default = dadt.allreduce(x, name=nm("default"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # `average` is Horovod's deprecated spelling
        out_avg_true = dadt.allreduce(x, name=nm("average-true"), average=True)
        out_avg_false = dadt.allreduce(x, name=nm("average-false"), average=False)
    assert_equal(out_default, reduce_expected("Average", (6,), torch.float32, world.size), "default op")
    assert_equal(out_avg_true, reduce_expected("Average", (6,), torch.float32, world.size), "average=True")
    sum_expected = torch.stack([inputs_for("Average", (6,), torch.float32, r, world.size)
                                for r in range(world.size)]).sum(0)
    assert_equal(out_avg_false, sum_expected, "average=False is Sum")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16, torch.bool], ids=dtype_id)
def test_allreduce_in_place_returns_same_tensor(world, nm, dtype):
    op_name = "Max" if dtype is torch.bool else "Sum"
    x = inputs_for(op_name, (4, 5), dtype, world.rank, world.size)
    ptr = x.data_ptr()
    out = dadt.allreduce_(x, name=nm(), op=OPS[op_name])
    assert out is x, "allreduce_ must return the tensor it was given"
    assert x.data_ptr() == ptr
    assert_equal(x, reduce_expected(op_name, (4, 5), dtype, world.size), "in-place result")


def test_allreduce_async_in_place(world, nm):
    xs = [inputs_for("Sum", (n,), torch.float32, world.rank, world.size, salt=n) for n in (1, 8, 300)]
    handles = [dadt.allreduce_async_(x, name=nm(str(i)), op=dadt.Sum) for i, x in enumerate(xs)]
    outs = [dadt.synchronize(h) for h in handles]
    for x, out, n in zip(xs, outs, (1, 8, 300)):
        assert out is x, "synchronize(allreduce_async_(t)) must return t"
        assert_equal(x, reduce_expected("Sum", (n,), torch.float32, world.size, salt=n), f"async in place n={n}")


def test_allreduce_64mib_float32(world, nm):
    n = 16 * 1024 * 1024  # 64 MiB of float32
    base = torch.arange(n, dtype=torch.int32) % 251
    x = (base + world.rank).to(torch.float32)
    dadt.allreduce_(x, name=nm(), op=dadt.Sum)
    expected = (base * world.size + world.size * (world.size - 1) // 2).to(torch.float32)
    assert_equal(x, expected, "64 MiB allreduce")


def test_compression_fp16(world, nm):
    x = inputs_for("Sum", (33,), torch.float32, world.rank, world.size)
    out = dadt.allreduce(x, name=nm("sum"), op=dadt.Sum, compression=dadt.Compression.fp16)
    avg = dadt.allreduce(torch.full((5,), 0.1 * (world.rank + 1)), name=nm("avg"),
                         compression=dadt.Compression.fp16)
    assert_equal(out, reduce_expected("Sum", (33,), torch.float32, world.size), "fp16-compressed sum")
    assert avg.dtype is torch.float32
    expected_avg = 0.1 * (world.size + 1) / 2
    assert torch.allclose(avg, torch.full((5,), expected_avg), rtol=2e-3, atol=1e-4), avg


GROUP_SHAPES = [(3,), (2, 2, 2), (4, 4), (1,), (1001,)]


def _group(world, salt, shapes=GROUP_SHAPES):
    return [inputs_for("Sum", shape, torch.float32, world.rank, world.size, salt=salt + i)
            for i, shape in enumerate(shapes)]


def _check_group(outs, world, salt, what, shapes=GROUP_SHAPES):
    assert len(outs) == len(shapes), what
    for i, (out, shape) in enumerate(zip(outs, shapes)):
        assert_equal(out, reduce_expected("Sum", shape, torch.float32, world.size, salt=salt + i), f"{what}[{i}]")


def test_grouped_allreduce_forms(world, nm):
    g1 = _group(world, 0)
    out1 = dadt.grouped_allreduce(g1, name=nm("plain"), op=dadt.Sum)

    g2 = _group(world, 10)
    out2 = dadt.grouped_allreduce_(g2, name=nm("inplace"), op=dadt.Sum)

    g3 = _group(world, 20)
    h3 = dadt.grouped_allreduce_async(g3, name=nm("async"), op=dadt.Sum)

    g4 = _group(world, 30)
    h4 = dadt.grouped_allreduce_async_(g4, name=nm("async-inplace"), op=dadt.Sum)
    out4 = dadt.synchronize(h4)
    out3 = dadt.synchronize(h3)

    _check_group(out1, world, 0, "grouped_allreduce")
    _check_group(out2, world, 10, "grouped_allreduce_")
    _check_group(out3, world, 20, "grouped_allreduce_async")
    _check_group(out4, world, 30, "grouped_allreduce_async_")
    assert all(o is t for o, t in zip(out2, g2)), "grouped_allreduce_ returns its tensors"
    assert all(o is t for o, t in zip(out4, g4)), "grouped_allreduce_async_ returns its tensors"
    for t, orig in zip(g1, _group(world, 0)):
        assert_equal(t, orig, "grouped_allreduce must not modify its inputs")


def test_grouped_allreduce_with_empty_members(world, nm):
    shapes = [(0,), (3,), (2, 0), (5,)]
    g = _group(world, 40, shapes)
    out = dadt.grouped_allreduce(g, name=nm(), op=dadt.Sum)
    _check_group(out, world, 40, "grouped_allreduce with empty members", shapes)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_grouped_allreduce_dtypes(world, nm, dtype):
    op_name = "Max" if dtype is torch.bool else "Sum"
    shapes = [(2,), (5, 3), (1,)]
    ts = [inputs_for(op_name, s, dtype, world.rank, world.size, salt=i) for i, s in enumerate(shapes)]
    outs = dadt.grouped_allreduce(ts, name=nm(), op=OPS[op_name])
    for i, (out, s) in enumerate(zip(outs, shapes)):
        assert_equal(out, reduce_expected(op_name, s, dtype, world.size, salt=i), f"group member {i}")


def test_grouped_allreduce_scaling(world, nm):
    ts = [inputs_for("Average", (7,), torch.float32, world.rank, world.size, salt=i) for i in range(3)]
    outs = dadt.grouped_allreduce(ts, name=nm(), prescale_factor=0.5, postscale_factor=4.0)
    for i, out in enumerate(outs):
        expected = reduce_expected("Average", (7,), torch.float32, world.size, salt=i, prescale=0.5, postscale=4.0)
        assert_equal(out, expected, f"grouped average with scaling [{i}]")


def test_many_tensors_at_once_fusion(world, nm):
    """200 tensors of mixed sizes/dtypes/ops in flight together: fused or not, every result exact."""
    dtypes = [torch.float32, torch.int32, torch.float64, torch.float16, torch.int64]
    specs = []
    for i in range(200):
        dtype = dtypes[i % len(dtypes)]
        n = (i * 37) % 1500 + 1  # 1 .. 1500 elements (empty tensors: test_allreduce_sizes_and_shapes)
        op_name = ("Sum", "Max", "Min", "Average")[i % 4]
        specs.append((dtype, n, op_name))
    handles, inputs = [], []
    for i, (dtype, n, op_name) in enumerate(specs):
        x = inputs_for(op_name, (n,), dtype, world.rank, world.size, salt=i)
        inputs.append(x)
        handles.append(dadt.allreduce_async(x, name=nm(str(i)), op=OPS[op_name]))
    outs = [dadt.synchronize(h) for h in handles]
    for i, ((dtype, n, op_name), out) in enumerate(zip(specs, outs)):
        assert_equal(out, reduce_expected(op_name, (n,), dtype, world.size, salt=i), f"tensor {i} ({op_name})")


def test_compression_bf16(world, nm):
    """bfloat16 on the wire, float32 back: float32's range (1e30 does not overflow, as it would in
    float16), 8 bits of mantissa."""
    avg = dadt.allreduce(torch.full((5,), 0.1 * (world.rank + 1)), name=nm("avg"),
                         compression=dadt.Compression.bf16)
    big = dadt.allreduce(torch.full((3,), 1e30), name=nm("big"), compression=dadt.Compression.bf16)
    ints = dadt.allreduce(torch.arange(4, dtype=torch.int32), name=nm("int"), op=dadt.Sum,
                          compression=dadt.Compression.bf16)
    assert avg.dtype is torch.float32 and big.dtype is torch.float32
    expected_avg = 0.1 * (world.size + 1) / 2
    assert torch.allclose(avg, torch.full((5,), expected_avg), rtol=1e-2), avg
    assert torch.allclose(big, torch.full((3,), 1e30), rtol=1e-2), big
    assert torch.equal(ints, torch.arange(4, dtype=torch.int32) * world.size)  # not compressed
