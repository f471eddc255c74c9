"""alltoall: equal split, uneven splits including zeros, received splits, every dtype."""
import pytest
import torch

import dadt.torch as dadt
from collective_utils import DTYPES, assert_equal, dtype_id


def n_rows(src, dst):
    """Rows that rank src sends to rank dst: uneven, with zeros once size >= 2 (and 1 at size 1)."""
    return (src + 2 * dst + 1) % 3


def block(src, dst, rows, tail, dtype):
    """The rows src sends to dst: every element encodes (src, dst, position)."""
    n = rows
    for t in tail:
        n *= t
    pos = torch.arange(n, dtype=torch.int64) % 3
    v = src * 10 + dst + pos  # <= 35: exact in every dtype
    if dtype is torch.bool:
        v = (src + dst + pos) % 2
    return v.to(dtype).reshape((rows,) + tail)


def _as_list(splits):
    return [int(s) for s in (splits.tolist() if isinstance(splits, torch.Tensor) else splits)]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_alltoall_uneven_splits(world, nm, dtype):
    r, n, tail = world.rank, world.size, (2,)
    send = [n_rows(r, j) for j in range(n)]
    x = torch.cat([block(r, j, send[j], tail, dtype) for j in range(n)])
    out, received = dadt.alltoall(x, splits=torch.tensor(send, dtype=torch.int32), name=nm())
    expected = torch.cat([block(i, r, n_rows(i, r), tail, dtype) for i in range(n)])
    assert _as_list(received) == [n_rows(i, r) for i in range(n)], f"received splits {received}"
    assert_equal(out, expected, "alltoall output")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.bool], ids=dtype_id)
def test_alltoall_equal_split(world, nm, dtype):
    r, n, tail = world.rank, world.size, (3, 2)
    x = torch.cat([block(r, j, 2, tail, dtype) for j in range(n)])
    out = dadt.alltoall(x, name=nm())
    assert isinstance(out, torch.Tensor), "alltoall without splits returns only the output"
    assert_equal(out, torch.cat([block(i, r, 2, tail, dtype) for i in range(n)]), "alltoall equal split")


def test_alltoall_everything_to_one_rank(world, nm):
    # Every rank sends all its rows to the last rank; the others receive nothing.
    r, n = world.rank, world.size
    send = [0] * n
    send[n - 1] = r + 1
    x = block(r, n - 1, r + 1, (), torch.int64)
    out, received = dadt.alltoall(x, splits=torch.tensor(send, dtype=torch.int32), name=nm())
    if r == n - 1:
        expected = torch.cat([block(i, n - 1, i + 1, (), torch.int64) for i in range(n)])
        expected_splits = [i + 1 for i in range(n)]
    else:
        expected = torch.zeros(0, dtype=torch.int64)
        expected_splits = [0] * n
    assert _as_list(received) == expected_splits
    assert_equal(out, expected, "alltoall to the last rank")


def test_alltoall_empty(world, nm):
    x = torch.zeros(0, 4, dtype=torch.float32)
    out, received = dadt.alltoall(x, splits=torch.zeros(world.size, dtype=torch.int32), name=nm())
    assert _as_list(received) == [0] * world.size
    assert_equal(out, torch.zeros(0, 4), "alltoall of nothing")


def test_alltoall_larger(world, nm):
    r, n = world.rank, world.size
    send = [100 * (j + 1) + r for j in range(n)]
    x = torch.cat([block(r, j, send[j], (7,), torch.float32) for j in range(n)])
    out, received = dadt.alltoall(x, splits=torch.tensor(send, dtype=torch.int32), name=nm())
    expected_rows = [100 * (r + 1) + i for i in range(n)]
    assert _as_list(received) == expected_rows
    assert_equal(out, torch.cat([block(i, r, expected_rows[i], (7,), torch.float32) for i in range(n)]), "alltoall")
