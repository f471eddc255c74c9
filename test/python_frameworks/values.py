"""Deterministic per-rank inputs and their exact reductions, in NumPy, for both framework suites.

Every input depends only on (shape, dtype, rank, salt), so each rank computes what all ranks sent.
Values are small integers, exact in float16 and bfloat16.
"""
from types import SimpleNamespace

import numpy as np

from dadt.common.dlpack import numpy_dtype

DTYPE_NAMES = ["uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool"]
NUMERIC = [d for d in DTYPE_NAMES if d != "bool"]
SHAPES = [(), (0,), (1,), (17,), (3, 5)]  # scalar, empty, one element, odd, 2-D odd
OPS = ["Average", "Sum", "Min", "Max", "Product"]


def shape_id(shape):
    return "x".join(map(str, shape)) or "scalar"


def make(shape, dtype, rank, size, op="Sum", salt=0):
    """This rank's input for `op`."""
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.int64) + salt
    if dtype == "bool":
        bits = (i >> rank) & 1
    elif op == "Product":
        bits = (i + rank) % 2 + 1                    # 1 or 2: products over 3 ranks stay <= 8
    elif op == "Average":
        bits = 3 + i % 5 + 2 * rank - (size - 1)     # sums to size * (3 + i % 5): exact average
    else:
        bits = (i + 3 * rank) % 7
    return bits.astype(numpy_dtype(dtype)).reshape(shape)


def expected(shape, dtype, size, op, salt=0):
    """The exact allreduce of make(shape, dtype, r, size, op, salt) over r < size."""
    if op == "Average":
        n = int(np.prod(shape))
        return (3 + (np.arange(n) + salt) % 5).astype(numpy_dtype(dtype)).reshape(shape)
    xs = np.stack([make(shape, dtype, r, size, op, salt).astype(np.float64) for r in range(size)])
    acc = {"Sum": xs.sum, "Min": xs.min, "Max": xs.max, "Product": xs.prod}[op](axis=0)
    if dtype == "bool":
        acc = acc != 0 if op in ("Sum", "Max") else acc == 1
    return acc.astype(numpy_dtype(dtype)).reshape(shape)


def assert_same(actual, want, what=""):
    """Same dtype, shape and bytes."""
    actual = np.asarray(actual)
    assert actual.dtype == want.dtype, f"{what}: dtype {actual.dtype} != {want.dtype}"
    assert actual.shape == want.shape, f"{what}: shape {actual.shape} != {want.shape}"
    if actual.tobytes() != want.tobytes():
        bad = np.flatnonzero(actual.reshape(-1).view(np.uint8 if actual.itemsize == 1 else f"u{actual.itemsize}")
                             != want.reshape(-1).view(np.uint8 if want.itemsize == 1 else f"u{want.itemsize}"))
        k = int(bad[0])
        raise AssertionError(f"{what}: {bad.size} of {actual.size} elements differ; first at {k}: "
                             f"got {actual.reshape(-1)[k]!r} expected {want.reshape(-1)[k]!r}")


def world(dadt):
    return SimpleNamespace(rank=dadt.rank(), size=dadt.size())
