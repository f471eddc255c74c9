"""allgather: every dtype, rank-dependent first dimension (including ranks with 0 rows), shapes."""
import pytest
import torch

import dadt.torch as dadt
from collective_utils import DTYPES, assert_equal, dtype_id, values


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_allgather_dtypes_same_shape(world, nm, dtype):
    x = values((4, 3), dtype, world.rank)
    out = dadt.allgather(x, name=nm())
    assert_equal(out, torch.cat([values((4, 3), dtype, r) for r in range(world.size)]), "allgather")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_allgather_rank_dependent_rows_with_empty_rank(world, nm, dtype):
    # rank r contributes r rows: rank 0 has none.
    x = values((world.rank, 5), dtype, world.rank, salt=2)
    out = dadt.allgather(x, name=nm())
    expected = torch.cat([values((r, 5), dtype, r, salt=2) for r in range(world.size)])
    assert_equal(out, expected, "allgather with uneven rows")


@pytest.mark.parametrize(
    "tail", [(), (1,), (3, 2), (2, 1, 4), (0,)], ids=lambda t: "x".join(map(str, t)) or "1d"
)
def test_allgather_shapes(world, nm, tail):
    rows = lambda r: (r % 3) + 1  # noqa: E731
    x = values((rows(world.rank),) + tail, torch.float32, world.rank)
    out = dadt.allgather(x, name=nm())
    expected = torch.cat([values((rows(r),) + tail, torch.float32, r) for r in range(world.size)])
    assert_equal(out, expected, f"allgather tail {tail}")


def test_allgather_all_empty(world, nm):
    out = dadt.allgather(torch.zeros(0, 4, dtype=torch.int64), name=nm())
    assert_equal(out, torch.zeros(0, 4, dtype=torch.int64), "allgather of empty tensors")


def test_allgather_large_odd(world, nm):
    x = values((1001 + world.rank, 3), torch.float32, world.rank)
    out = dadt.allgather(x, name=nm())
    expected = torch.cat([values((1001 + r, 3), torch.float32, r) for r in range(world.size)])
    assert_equal(out, expected, "allgather 1001+r rows")


def test_allgather_async_out_of_order(world, nm):
    handles = [dadt.allgather_async(values((world.rank + i, 2), torch.int32, world.rank, salt=i), name=nm(str(i)))
               for i in range(6)]
    outs = {i: dadt.synchronize(handles[i]) for i in reversed(range(6))}
    for i in range(6):
        expected = torch.cat([values((r + i, 2), torch.int32, r, salt=i) for r in range(world.size)])
        assert_equal(outs[i], expected, f"allgather_async {i}")


def test_allgather_does_not_modify_input(world, nm):
    x = values((3,), torch.float64, world.rank)
    before = x.clone()
    dadt.allgather(x, name=nm())
    assert_equal(x, before, "allgather input")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=dtype_id)
def test_allgather_async_into_out(world, nm, dtype):
    # out=: the runtime writes into the caller's tensor (uneven rows, rank 0 empty) and
    # synchronize() returns that very tensor.
    x = values((world.rank, 3), dtype, world.rank, salt=4)
    out = torch.zeros(sum(range(world.size)), 3, dtype=dtype)
    result = dadt.synchronize(dadt.allgather_async(x, name=nm(), out=out))
    assert result is out
    expected = torch.cat([values((r, 3), dtype, r, salt=4) for r in range(world.size)])
    assert_equal(out, expected, "allgather into out")


def test_allgather_out_wrong_trailing_shape_is_refused(world, nm):
    with pytest.raises(ValueError, match="all dimensions but the first"):
        dadt.allgather_async(torch.zeros(2, 3), name=nm(), out=torch.zeros(2 * world.size, 4))


def test_sparse_allreduce_async_sums_or_averages_nonzeros(world, nm):
    # Rank r holds value r + 1 at column r % 3 of row 0, and 1 at (1, 2) everywhere.
    dense = torch.zeros(2, 3)
    dense[0, world.rank % 3] = world.rank + 1
    dense[1, 2] = 1
    for op in (dadt.Sum, dadt.Average):
        out = dadt.sparse_allreduce_async(dense.to_sparse(), name=nm(str(op)), op=op)()
        expect = torch.zeros(2, 3)
        for r in range(world.size):
            expect[0, r % 3] += r + 1
            expect[1, 2] += 1
        if op == dadt.Average:
            expect /= world.size
        assert out.layout == torch.sparse_coo
        assert torch.allclose(out.to_dense(), expect), (op, out.to_dense(), expect)
