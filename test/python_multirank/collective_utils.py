"""Shared helpers of the collective suite: dtypes, deterministic per-rank inputs, expected results.

Every input is a pure function of (shape, dtype, rank, salt), so each rank can compute what every
other rank contributed and hence the exact expected result without communicating. Values are small
integers so that results are exact in float16 and bfloat16 too.
"""
import time

import torch

import dadt.torch as dadt

DTYPES = [
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.uint16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.bool,
]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
NUMERIC_DTYPES = [d for d in DTYPES if d is not torch.bool]


def dtype_id(dtype):
    return str(dtype).replace("torch.", "")


OPS = {
    "Average": dadt.Average,
    "Sum": dadt.Sum,
    "Min": dadt.Min,
    "Max": dadt.Max,
    "Product": dadt.Product,
}


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def values(shape, dtype, rank, salt=0):
    """Small non-negative integers (0..6); bool: a rank-dependent bit pattern."""
    n = numel(shape)
    base = torch.arange(n, dtype=torch.int64)
    if dtype is torch.bool:
        return (((base + salt) >> rank) & 1).bool().reshape(shape)
    return ((base + 3 * rank + salt) % 7).to(dtype).reshape(shape)


def product_values(shape, dtype, rank, salt=0):
    """1 or 2, so a product over <= 4 ranks stays <= 16."""
    n = numel(shape)
    base = torch.arange(n, dtype=torch.int64)
    return ((base + rank + salt) % 2 + 1).to(dtype).reshape(shape)


def average_values(shape, dtype, rank, size, salt=0):
    """Values whose sum over ranks is exactly size * a[i], so the average a[i] is exact in every dtype."""
    n = numel(shape)
    a = 3 + (torch.arange(n, dtype=torch.int64) + salt) % 5
    return (a + 2 * rank - (size - 1)).to(dtype).reshape(shape)


def average_expected(shape, dtype, salt=0):
    n = numel(shape)
    return (3 + (torch.arange(n, dtype=torch.int64) + salt) % 5).to(dtype).reshape(shape)


def inputs_for(op_name, shape, dtype, rank, size, salt=0):
    if op_name == "Product":
        return product_values(shape, dtype, rank, salt)
    if op_name == "Average":
        return average_values(shape, dtype, rank, size, salt)
    return values(shape, dtype, rank, salt)


def reduce_expected(op_name, shape, dtype, size, salt=0, prescale=1.0, postscale=1.0):
    """The exact result of allreducing inputs_for(op_name, ...) over `size` ranks."""
    if op_name == "Average":
        if prescale == 1.0 and postscale == 1.0:
            return average_expected(shape, dtype, salt)
        acc = average_expected(shape, torch.float64, salt) * prescale * postscale
        return acc.to(dtype)
    xs = [inputs_for(op_name, shape, dtype, r, size, salt) for r in range(size)]
    if dtype is torch.bool:
        stacked = torch.stack(xs)
        if op_name in ("Sum", "Max"):
            return stacked.any(dim=0)
        return stacked.all(dim=0)
    stacked = torch.stack([x.to(torch.float64) * prescale for x in xs])
    if op_name == "Sum":
        acc = stacked.sum(dim=0)
    elif op_name == "Min":
        acc = stacked.min(dim=0).values
    elif op_name == "Max":
        acc = stacked.max(dim=0).values
    elif op_name == "Product":
        acc = stacked.prod(dim=0)
    else:
        raise AssertionError(op_name)
    return (acc * postscale).to(dtype).reshape(shape)


def assert_equal(actual, expected, what=""):
    """Exact equality of dtype, shape and values, with a readable message."""
    assert isinstance(actual, torch.Tensor), f"{what}: not a tensor but {type(actual)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert tuple(actual.shape) == tuple(expected.shape), (
        f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    )
    if not torch.equal(actual, expected):
        diff = (actual != expected).reshape(-1).nonzero()
        first = int(diff[0]) if diff.numel() else -1
        a = actual.reshape(-1)
        e = expected.reshape(-1)
        raise AssertionError(
            f"{what}: {diff.numel()} of {actual.numel()} elements differ; first at flat index "
            f"{first}: got {a[first].item()} expected {e[first].item()}"
        )


def gather_rows(tensor, name):
    """Allgathers a flattened copy of `tensor` (one row per rank) -- every rank must call it."""
    flat = tensor.detach().reshape(1, -1).contiguous()
    return dadt.allgather(flat, name=name)


def assert_rows_identical(rows, what=""):
    for r in range(1, rows.shape[0]):
        assert torch.equal(rows[r], rows[0]), f"{what}: rank {r} differs from rank 0"


class Deadline:
    """Measures that a call comes back in time (errors must never hang)."""

    def __init__(self, seconds=10.0):
        self.seconds = seconds

    def __enter__(self):
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc):
        self.elapsed = time.monotonic() - self.start
        return False

    def check(self, what=""):
        assert self.elapsed < self.seconds, f"{what} took {self.elapsed:.1f} s (limit {self.seconds} s)"
