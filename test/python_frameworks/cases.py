"""The collective suite shared by dadt.tensorflow (tf/) and dadt.jax (jax/): every op, every dtype
(float16 and bfloat16 included), sizes 0, 1 and odd, graph mode (tf.function / jax.jit), the error
paths, and byte equality with dadt.torch. A suite imports these tests with `from cases import *` and
its conftest.py provides the adapter `fw`:

    fw.dadt          the front end (dadt.tensorflow or dadt.jax)
    fw.tensor(a)     NumPy array -> framework tensor;   fw.numpy(t): back
    fw.compile(f)    tf.function / jax.jit
    fw.compiled_error  exception type(s) a collective failing inside compiled code raises
"""
import time

import numpy as np
import pytest

from values import DTYPE_NAMES, NUMERIC, OPS, SHAPES, assert_same, expected, make, shape_id

LIMIT_S = 10.0
REDUCTIONS = [(d, op) for d in DTYPE_NAMES for op in OPS if not (d == "bool" and op == "Average")]


def _op(fw, op):
    return getattr(fw.dadt, op)


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype,op", REDUCTIONS, ids=[f"{d}-{o}" for d, o in REDUCTIONS])
def test_allreduce(fw, world, nm, dtype, op, shape):
    x = fw.tensor(make(shape, dtype, world.rank, world.size, op))
    out = fw.dadt.allreduce(x, name=nm(), op=_op(fw, op))
    assert_same(fw.numpy(out), expected(shape, dtype, world.size, op), f"{dtype} {op} {shape}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_allreduce_scaled(fw, world, nm, dtype):
    x = fw.tensor(make((9,), dtype, world.rank, world.size))
    out = fw.dadt.allreduce(x, name=nm(), op=fw.dadt.Sum, prescale_factor=0.5, postscale_factor=3.0)
    want = (expected((9,), "float64", world.size, "Sum") * 1.5).astype(make((1,), dtype, 0, 1).dtype)
    assert_same(fw.numpy(out), want)


def test_allreduce_default_op_is_average(fw, world, nm):
    out = fw.dadt.allreduce(fw.tensor(make((5,), "float32", world.rank, world.size, "Average")), name=nm())
    assert_same(fw.numpy(out), expected((5,), "float32", world.size, "Average"))


def _adasum_tree(vectors):
    """Adasum's binary tree over the ranks (runtime/backends/adasum.h), in float64: rank r with
    r ^ L at level L, the lower rank's as a; ranks p.. folded into r - p first."""
    def pair(a, b):
        dot, aa, bb = a @ b, a @ a, b @ b
        return (1 - dot / (2 * aa) if aa else 1.0) * a + (1 - dot / (2 * bb) if bb else 1.0) * b
    v, p = list(vectors), 1
    while p * 2 <= len(v):
        p *= 2
    for i in range(len(v) - p):
        v[i] = pair(v[i], v[i + p])
    v, level = v[:p], 1
    while level < p:
        v, level = [pair(v[i & ~level], v[i | level]) for i in range(p)], level * 2
    return v[0]


def test_allreduce_adasum(fw, world, nm):
    """op=Adasum in this front end: the tree of the formula; integers refused on every rank."""
    inputs = [np.sin(np.arange(11) * 0.9 + r) * (r + 1) for r in range(world.size)]
    out = fw.dadt.allreduce(fw.tensor(inputs[world.rank]), name=nm(), op=fw.dadt.Adasum)
    np.testing.assert_allclose(fw.numpy(out), _adasum_tree(inputs), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="Adasum needs float16, bfloat16, float32 or float64"):
        fw.dadt.allreduce(fw.tensor(np.arange(3, dtype=np.int32)), name=nm("int"), op=fw.dadt.Adasum)


def test_grouped_allreduce(fw, world, nm):
    specs = [((0,), "float32"), ((1,), "bfloat16"), ((7,), "float16"), ((2, 3), "int32"), ((5,), "bool")]
    xs = [fw.tensor(make(s, d, world.rank, world.size)) for s, d in specs]
    outs = fw.dadt.grouped_allreduce(xs, name=nm(), op=fw.dadt.Sum)
    assert len(outs) == len(specs)
    for out, (s, d) in zip(outs, specs):
        assert_same(fw.numpy(out), expected(s, d, world.size, "Sum"), f"member {d} {s}")


@pytest.mark.parametrize("rows", [0, 1, 3])
@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_allgather_ragged(fw, world, nm, dtype, rows):
    x = fw.tensor(make((rows + world.rank, 2), dtype, world.rank, world.size))
    out = fw.dadt.allgather(x, name=nm())
    want = np.concatenate([make((rows + r, 2), dtype, r, world.size) for r in range(world.size)])
    assert_same(fw.numpy(out), want)


@pytest.mark.parametrize("root", ["first", "last"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_broadcast(fw, world, nm, dtype, shape, root):
    root_rank = 0 if root == "first" else world.size - 1
    out = fw.dadt.broadcast(fw.tensor(make(shape, dtype, world.rank, world.size)), root_rank, name=nm())
    assert_same(fw.numpy(out), make(shape, dtype, root_rank, world.size))


def _labelled(sender, receiver, count, dtype):
    return (sender * 100 + receiver * 10 + np.arange(count)).reshape(count, 1).repeat(2, 1).astype(
        make((1,), dtype, 0, 1).dtype)


@pytest.mark.parametrize("dtype", ["int32", "bfloat16", "float16", "float64"])
def test_alltoall_splits(fw, world, nm, dtype):
    r, n = world.rank, world.size
    splits = [(r + j) % 3 for j in range(n)]  # rows this rank sends to rank j (some 0)
    x = np.concatenate([_labelled(r, j, splits[j], dtype) for j in range(n)])
    out, received = fw.dadt.alltoall(fw.tensor(x), splits=splits, name=nm())
    want = np.concatenate([_labelled(i, r, (i + r) % 3, dtype) for i in range(n)])
    assert_same(fw.numpy(out), want)
    assert list(np.asarray(fw.numpy(received))) == [(i + r) % 3 for i in range(n)]


def test_alltoall_equal_parts(fw, world, nm):
    r, n = world.rank, world.size
    x = np.concatenate([_labelled(r, j, 2, "float32") for j in range(n)])
    out = fw.dadt.alltoall(fw.tensor(x), name=nm())
    assert_same(fw.numpy(out), np.concatenate([_labelled(i, r, 2, "float32") for i in range(n)]))


@pytest.mark.parametrize("rows", [0, 1, 7])
@pytest.mark.parametrize("dtype", NUMERIC)
def test_reducescatter(fw, world, nm, dtype, rows):
    r, n = world.rank, world.size
    out = fw.dadt.reducescatter(fw.tensor(make((rows, 3), dtype, r, n)), name=nm(), op=fw.dadt.Sum)
    counts = [rows // n + (1 if i < rows % n else 0) for i in range(n)]
    start = sum(counts[:r])
    assert_same(fw.numpy(out), expected((rows, 3), dtype, n, "Sum")[start:start + counts[r]])


def test_reducescatter_average(fw, world, nm):
    r, n = world.rank, world.size
    rows = 2 * n + 1
    out = fw.dadt.reducescatter(fw.tensor(make((rows, 2), "float32", r, n, "Average")), name=nm())
    counts = [rows // n + (1 if i < rows % n else 0) for i in range(n)]
    start = sum(counts[:r])
    assert_same(fw.numpy(out), expected((rows, 2), "float32", n, "Average")[start:start + counts[r]])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64"])
def test_compiled(fw, world, nm, dtype):
    """Inside tf.function / jax.jit, run twice (the names are fixed at trace time)."""
    def step(x):
        return (fw.dadt.allreduce(x, name=nm("ar"), op=fw.dadt.Sum),
                fw.dadt.broadcast(x, world.size - 1, name=nm("bc")),
                fw.dadt.allgather(x, name=nm("ag")),
                fw.dadt.grouped_allreduce([x, x], name=nm("gr"), op=fw.dadt.Max))
    compiled = fw.compile(step)
    results = [compiled(fw.tensor(make((5,), dtype, world.rank, world.size, salt=s))) for s in (0, 1)]
    for s, (ar, bc, ag, gr) in enumerate(results):
        assert_same(fw.numpy(ar), expected((5,), dtype, world.size, "Sum", salt=s))
        assert_same(fw.numpy(bc), make((5,), dtype, world.size - 1, world.size, salt=s))
        assert_same(fw.numpy(ag), np.concatenate([make((5,), dtype, r, world.size, salt=s)
                                                  for r in range(world.size)]))
        for g in gr:
            assert_same(fw.numpy(g), expected((5,), dtype, world.size, "Max", salt=s))


# ----------------------------------------------------------------------------------------------
# Error paths: the right type, the tensor's name in the message, back within LIMIT_S, job usable.
# ----------------------------------------------------------------------------------------------

def attempt(fn):
    start = time.monotonic()
    try:
        fn()
        err = None
    except Exception as e:  # noqa: BLE001 - inspected by the test
        err = e
    return err, time.monotonic() - start


def still_usable(fw, world, name):
    try:
        out = fw.numpy(fw.dadt.allreduce(fw.tensor(np.ones(5, np.float32)), name=name, op=fw.dadt.Sum))
        return None if np.array_equal(out, np.full(5, world.size, np.float32)) else f"got {out}"
    except Exception as e:  # noqa: BLE001
        return f"allreduce after the error raised {type(e).__name__}: {e}"


def check(err, elapsed, types, name, after):
    assert err is not None, f"expected {types} for {name!r}, nothing was raised"
    assert isinstance(err, types), f"expected {types}, got {type(err).__name__}: {err}"
    assert name in str(err), f"the message does not name {name!r}: {err}"
    assert elapsed < LIMIT_S, f"the error took {elapsed:.1f} s"
    assert after is None, after


@pytest.mark.usefixtures("multi_rank")
@pytest.mark.parametrize("kind", ["allreduce", "allgather", "broadcast", "reducescatter", "grouped_allreduce"])
def test_shape_mismatch(fw, world, nm, kind):
    name = nm("bad")
    x = fw.tensor(np.ones((4, world.rank + 1), np.float32))  # dim 1 differs (allgather: only dim 0 may)
    fn = {"allreduce": lambda: fw.dadt.allreduce(x, name=name, op=fw.dadt.Sum),
          "allgather": lambda: fw.dadt.allgather(x, name=name),
          "broadcast": lambda: fw.dadt.broadcast(x, 0, name=name),
          "reducescatter": lambda: fw.dadt.reducescatter(x, name=name, op=fw.dadt.Sum),
          "grouped_allreduce": lambda: fw.dadt.grouped_allreduce([x], name=name, op=fw.dadt.Sum)}[kind]
    err, elapsed = attempt(fn)
    check(err, elapsed, fw.dadt.TensorMismatchError, name, still_usable(fw, world, nm("after")))


@pytest.mark.usefixtures("multi_rank")
@pytest.mark.parametrize("kind", ["allreduce", "allgather", "broadcast"])
def test_dtype_mismatch(fw, world, nm, kind):
    name = nm("bad")
    x = fw.tensor(np.ones(4, np.float32 if world.rank == 0 else np.int32))
    fn = {"allreduce": lambda: fw.dadt.allreduce(x, name=name, op=fw.dadt.Sum),
          "allgather": lambda: fw.dadt.allgather(x, name=name),
          "broadcast": lambda: fw.dadt.broadcast(x, 0, name=name)}[kind]
    err, elapsed = attempt(fn)
    check(err, elapsed, fw.dadt.TensorMismatchError, name, still_usable(fw, world, nm("after")))


@pytest.mark.usefixtures("multi_rank")
def test_op_and_root_mismatch(fw, world, nm):
    x = fw.tensor(np.ones(4, np.float32))
    op = fw.dadt.Sum if world.rank == 0 else fw.dadt.Max
    err1, t1 = attempt(lambda: fw.dadt.allreduce(x, name=nm("op"), op=op))
    err2, t2 = attempt(lambda: fw.dadt.broadcast(x, world.rank, name=nm("root")))
    after = still_usable(fw, world, nm("after"))
    check(err1, t1, fw.dadt.TensorMismatchError, nm("op"), None)
    check(err2, t2, fw.dadt.TensorMismatchError, nm("root"), after)


def test_root_rank_out_of_range(fw, world, nm):
    name = nm("bad")
    err, elapsed = attempt(lambda: fw.dadt.broadcast(fw.tensor(np.ones(4, np.float32)), world.size, name=name))
    check(err, elapsed, (ValueError, RuntimeError), name, still_usable(fw, world, nm("after")))


def test_unsupported_dtype_and_bool_average(fw, world, nm):
    err1, _ = attempt(lambda: fw.dadt.allreduce(fw.tensor(np.ones(3, np.uint32)), name=nm("u32")))
    err2, _ = attempt(lambda: fw.dadt.allreduce(fw.tensor(np.ones(3, bool)), name=nm("bool"), op=fw.dadt.Average))
    after = still_usable(fw, world, nm("after"))
    check(err1, 0.0, (ValueError, TypeError), nm("u32"), None)
    assert "uint32" in str(err1)
    check(err2, 0.0, ValueError, nm("bool"), after)


@pytest.mark.parametrize("dtype", ["int16", "uint16"])
def test_16_bit_integers_reduce_and_gather(fw, world, nm, dtype):
    x = np.arange(4, dtype=dtype) + world.rank
    out = fw.dadt.allreduce(fw.tensor(x), name=nm("sum"), op=fw.dadt.Sum)
    want = sum(np.arange(4, dtype=np.int64) + r for r in range(world.size)).astype(dtype)
    assert_same(fw.numpy(out), want)
    gathered = fw.dadt.allgather(fw.tensor(x), name=nm("gather"))
    assert_same(fw.numpy(gathered), np.concatenate([np.arange(4, dtype=dtype) + r for r in range(world.size)]))


@pytest.mark.usefixtures("multi_rank")
def test_compiled_mismatch(fw, world, nm):
    name = nm("bad")
    compiled = fw.compile(lambda x: fw.dadt.allreduce(x, name=name, op=fw.dadt.Sum))
    err, elapsed = attempt(lambda: fw.numpy(compiled(fw.tensor(np.ones(world.rank + 2, np.float32)))))
    check(err, elapsed, fw.compiled_error, name, still_usable(fw, world, nm("after")))


# ----------------------------------------------------------------------------------------------
# The same bytes as dadt.torch for the same input.
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Average", "Sum"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_same_bytes_as_torch(fw, world, nm, dtype, op):
    import torch

    import dadt.torch as dadt_torch
    rng = np.random.default_rng(1000 + world.rank)
    data = rng.standard_normal(1001).astype(np.float32)  # not exact in the small types: rounding matters
    x = data.astype(make((1,), dtype, 0, 1).dtype)
    ours = np.asarray(fw.numpy(fw.dadt.allreduce(fw.tensor(x), name=nm("fw"), op=_op(fw, op))))
    t = torch.from_numpy(data).to(getattr(torch, dtype))
    theirs = dadt_torch.allreduce(t, name=nm("torch"), op=getattr(dadt_torch, op))
    theirs_bytes = theirs.view(torch.int16 if theirs.element_size() == 2 else theirs.dtype).numpy().tobytes()
    assert ours.tobytes() == theirs_bytes, f"{dtype} {op}: {fw.dadt.__name__} and dadt.torch differ"
