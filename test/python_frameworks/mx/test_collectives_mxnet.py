"""dadt.mxnet's collectives against NumPy expectations (../values.py): every op and every dtype
MXNet's NDArray has, the in-place forms, Horovod's `average=` flag, and the error paths."""
import numpy as np
import pytest

mx = pytest.importorskip("mxnet", reason="dadt.mxnet runs in the virtualenv of tools/mxnet_venv.sh")

from values import OPS, assert_same, expected, make  # noqa: E402

DTYPES = ["uint8", "int8", "int32", "int64", "float16", "float32", "float64", "bool"]
SHAPES = [(1,), (17,), (3, 5)]  # MXNet 1.x NDArrays have no 0-d or empty shapes
REDUCTIONS = [(d, op) for d in DTYPES for op in OPS if not (d == "bool" and op == "Average")]


def nd(array):
    return mx.nd.array(array, dtype=array.dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype,op", REDUCTIONS, ids=[f"{d}-{o}" for d, o in REDUCTIONS])
def test_allreduce(fw, world, nm, dtype, op, shape):
    x = nd(make(shape, dtype, world.rank, world.size, op))
    before = x.asnumpy().copy()
    out = fw.dadt.allreduce(x, name=nm(), op=getattr(fw.dadt, op))
    assert isinstance(out, mx.nd.NDArray)
    assert_same(out.asnumpy(), expected(shape, dtype, world.size, op), f"{dtype} {op} {shape}")
    assert_same(x.asnumpy(), before, "the input is unchanged")


@pytest.mark.parametrize("dtype", ["int32", "float32", "float64", "bool"])
def test_allreduce_in_place(fw, world, nm, dtype):
    op = "Sum" if dtype == "bool" else "Average"
    x = nd(make((3, 5), dtype, world.rank, world.size, op))
    out = fw.dadt.allreduce_(x, name=nm(), op=getattr(fw.dadt, op))
    assert out is x
    assert_same(x.asnumpy(), expected((3, 5), dtype, world.size, op))


def test_average_flag_as_horovod(fw, world, nm):
    """Horovod's mxnet API: average=True (the default) averages, average=False sums."""
    x = nd(make((6,), "float32", world.rank, world.size, "Average"))
    assert_same(fw.dadt.allreduce(x, name=nm("default")).asnumpy(),
                expected((6,), "float32", world.size, "Average"))
    assert_same(fw.dadt.allreduce(x, average=True, name=nm("avg")).asnumpy(),
                expected((6,), "float32", world.size, "Average"))
    s = nd(make((6,), "float32", world.rank, world.size, "Sum"))
    assert_same(fw.dadt.allreduce(s, average=False, name=nm("sum")).asnumpy(),
                expected((6,), "float32", world.size, "Sum"))
    with pytest.raises(ValueError, match="either op= or average="):
        fw.dadt.allreduce(x, average=True, op=fw.dadt.Sum, name=nm("both"))


def test_allreduce_scaled(fw, world, nm):
    x = nd(make((9,), "float32", world.rank, world.size))
    out = fw.dadt.allreduce(x, average=False, name=nm(), prescale_factor=0.5, postscale_factor=3.0)
    want = (expected((9,), "float64", world.size, "Sum") * 1.5).astype(np.float32)
    assert_same(out.asnumpy(), want)


def test_grouped_allreduce(fw, world, nm):
    specs = [((1,), "float32"), ((7,), "float16"), ((2, 3), "int32"), ((5,), "bool"), ((4,), "float64")]
    xs = [nd(make(s, d, world.rank, world.size)) for s, d in specs]
    outs = fw.dadt.grouped_allreduce(xs, name=nm("copy"), op=fw.dadt.Sum)
    assert len(outs) == len(specs) and all(o is not x for o, x in zip(outs, xs))
    for out, (s, d) in zip(outs, specs):
        assert_same(out.asnumpy(), expected(s, d, world.size, "Sum"), f"member {d} {s}")
    back = fw.dadt.grouped_allreduce_(xs, name=nm("inplace"), average=False)
    assert all(b is x for b, x in zip(back, xs))
    for x, (s, d) in zip(xs, specs):
        assert_same(x.asnumpy(), expected(s, d, world.size, "Sum"), f"in place {d} {s}")
    assert fw.dadt.grouped_allreduce([], name=nm("empty")) == []


@pytest.mark.parametrize("dtype", DTYPES)
def test_allgather_ragged(fw, world, nm, dtype):
    rows = world.rank + 1  # a different first dimension on each rank
    x = nd(make((rows, 3), dtype, world.rank, world.size))
    out = fw.dadt.allgather(x, name=nm())
    want = np.concatenate([make((r + 1, 3), dtype, r, world.size) for r in range(world.size)])
    assert_same(out.asnumpy(), want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast(fw, world, nm, dtype):
    for root in range(world.size):
        x = nd(make((4, 3), dtype, world.rank, world.size, salt=root))
        out = fw.dadt.broadcast(x, root, name=nm(f"copy{root}"))
        want = make((4, 3), dtype, root, world.size, salt=root)
        assert_same(out.asnumpy(), want)
        assert_same(x.asnumpy(), make((4, 3), dtype, world.rank, world.size, salt=root),
                    "the input is unchanged")
        assert fw.dadt.broadcast_(x, root, name=nm(f"inplace{root}")) is x
        assert_same(x.asnumpy(), want)


def test_alltoall(fw, world, nm):
    n = world.size
    splits = [(world.rank + i) % 2 + 1 for i in range(n)]  # rows this rank sends to rank i
    x = nd(np.arange(sum(splits) * 2, dtype=np.float32).reshape(-1, 2) + 100 * world.rank)
    out, received = fw.dadt.alltoall(x, splits=splits, name=nm("splits"))
    want_splits = [(r + world.rank) % 2 + 1 for r in range(n)]
    assert_same(received.asnumpy(), np.array(want_splits, np.int32))
    parts = []
    for r in range(n):
        theirs = [(r + i) % 2 + 1 for i in range(n)]
        start = sum(theirs[:world.rank])
        parts.append(np.arange(sum(theirs) * 2, dtype=np.float32).reshape(-1, 2)[start:start + theirs[world.rank]]
                     + 100 * r)
    assert_same(out.asnumpy(), np.concatenate(parts))
    equal = fw.dadt.alltoall(nd(np.full((2 * n,), world.rank, np.int64)), name=nm("equal"),
                             splits=mx.nd.array([2] * n, dtype="int32"))[0]
    assert_same(equal.asnumpy(), np.repeat(np.arange(n, dtype=np.int64), 2))
    plain = fw.dadt.alltoall(nd(np.full((n,), world.rank, np.int32)), name=nm("plain"))
    assert isinstance(plain, mx.nd.NDArray)
    assert_same(plain.asnumpy(), np.arange(n, dtype=np.int32))


def test_reducescatter(fw, world, nm):
    rows = 2 * world.size + 1
    x = nd(make((rows, 3), "float32", world.rank, world.size))
    out = fw.dadt.reducescatter(x, name=nm(), op=fw.dadt.Sum)
    full = expected((rows, 3), "float32", world.size, "Sum")
    counts = [rows // world.size + (1 if r < rows % world.size else 0) for r in range(world.size)]
    start = sum(counts[:world.rank])
    assert_same(out.asnumpy(), full[start:start + counts[world.rank]])


def test_objects_barrier_join(fw, world, nm):
    got = fw.dadt.broadcast_object({"rank": world.rank, "x": [1, 2]}, root_rank=0, name=nm("b"))
    assert got == {"rank": 0, "x": [1, 2]}
    assert fw.dadt.allgather_object(world.rank * 10, name=nm("g")) == [r * 10 for r in range(world.size)]
    fw.dadt.barrier()
    assert fw.dadt.join() in range(world.size)


def test_process_set(fw, world, nm, halves):
    members = halves.ranks
    x = nd(make((4,), "float32", world.rank, world.size, "Sum"))
    got = fw.dadt.allreduce(x, name=nm("sum"), op=fw.dadt.Sum, process_set=halves).asnumpy()
    want = np.sum([make((4,), "float32", r, world.size, "Sum") for r in members], axis=0)
    assert_same(got, want.astype(np.float32))
    got = fw.dadt.broadcast(x, members[-1], name=nm("bcast"), process_set=halves).asnumpy()
    assert_same(got, make((4,), "float32", members[-1], world.size, "Sum"))
    got = fw.dadt.allgather(x, name=nm("gather"), process_set=halves).asnumpy()
    assert_same(got, np.concatenate([make((4,), "float32", r, world.size, "Sum") for r in members]))


def test_shape_mismatch_fails_on_every_rank(fw, world, nm, multi_rank):
    x = mx.nd.ones((world.rank + 2,))
    with pytest.raises(fw.dadt.TensorMismatchError, match="shape"):
        fw.dadt.allreduce(x, name=nm())


def test_bad_inputs_are_refused_before_submission(fw, world, nm):
    with pytest.raises(TypeError, match="must be an mxnet.nd.NDArray"):
        fw.dadt.allreduce(np.ones(3, np.float32), name=nm("numpy"))
    sparse = mx.nd.ones((4, 2)).tostype("row_sparse")
    with pytest.raises(ValueError, match="storage type row_sparse"):
        fw.dadt.allreduce(sparse, name=nm("sparse"))
    with pytest.raises(ValueError, match="bool"):
        fw.dadt.allreduce(mx.nd.array([1, 0], dtype="bool"), name=nm("bool_avg"))
    fw.dadt.barrier()  # every rank refused locally, none is left waiting


def test_basics(fw, world):
    assert fw.dadt.is_initialized()
    assert 0 <= fw.dadt.local_rank() < fw.dadt.local_size()
    assert fw.dadt.size() == world.size
