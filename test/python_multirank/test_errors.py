"""Error paths: the right exception type, a message naming the tensor, back within 10 s, job still usable.

Each test catches the error itself (no pytest.raises before collectives), then checks that the job
still works with an ordinary allreduce, and only then asserts: a rank whose expectation fails still
takes part in every collective the other ranks run.
"""
import time

import pytest
import torch

import dadt.torch as dadt
from collective_utils import assert_equal

LIMIT_S = 10.0
multi_rank = pytest.mark.usefixtures("require_two_ranks")


def attempt(fn):
    """Runs fn; returns (exception or None, seconds taken)."""
    start = time.monotonic()
    try:
        fn()
        err = None
    except Exception as e:  # noqa: BLE001 - the tests inspect it
        err = e
    return err, time.monotonic() - start


def still_usable(world, name):
    """An ordinary allreduce after the error (every rank calls it); returns an error string or None."""
    try:
        out = dadt.allreduce(torch.ones(5), name=name, op=dadt.Sum)
        if not torch.equal(out, torch.full((5,), float(world.size))):
            return f"allreduce after the error returned {out.tolist()}"
    except Exception as e:  # noqa: BLE001
        return f"allreduce after the error raised {type(e).__name__}: {e}"
    return None


def check(err, elapsed, types, tensor_name, after=None):
    assert err is not None, f"expected {types} for {tensor_name!r}, nothing was raised"
    assert isinstance(err, types), f"expected {types}, got {type(err).__name__}: {err}"
    assert tensor_name in str(err), f"the message does not name the tensor {tensor_name!r}: {err}"
    assert elapsed < LIMIT_S, f"the error took {elapsed:.1f} s to come back"
    assert after is None, after


@multi_rank
@pytest.mark.parametrize("kind", ["allreduce", "allreduce_async", "allgather", "broadcast", "reducescatter"])
def test_shape_mismatch(world, nm, kind):
    name = nm("bad")
    r = world.rank
    if kind == "allreduce":
        fn = lambda: dadt.allreduce(torch.ones(r + 1), name=name, op=dadt.Sum)  # noqa: E731
    elif kind == "allreduce_async":
        fn = lambda: dadt.synchronize(dadt.allreduce_async(torch.ones(2, r + 1), name=name))  # noqa: E731
    elif kind == "allgather":
        fn = lambda: dadt.allgather(torch.ones(2, r + 1), name=name)  # noqa: E731 (only dim 0 may differ)
    elif kind == "broadcast":
        fn = lambda: dadt.broadcast(torch.ones(r + 3), root_rank=0, name=name)  # noqa: E731
    else:
        fn = lambda: dadt.reducescatter(torch.ones(4, r + 1), name=name, op=dadt.Sum)  # noqa: E731
    err, elapsed = attempt(fn)
    after = still_usable(world, nm("after"))
    check(err, elapsed, RuntimeError, name, after)


@multi_rank
def test_mismatch_error_type_and_name_reuse(world, nm):
    name = nm("bad")
    err, elapsed = attempt(lambda: dadt.allreduce(torch.ones(world.rank + 1), name=name, op=dadt.Sum))
    # The same name, now consistent, must work (a failed negotiation must not poison the cache).
    try:
        out = dadt.allreduce(torch.ones(3), name=name, op=dadt.Sum)
        after = None if torch.equal(out, torch.full((3,), float(world.size))) else f"got {out.tolist()}"
    except Exception as e:  # noqa: BLE001
        after = f"reusing the name raised {type(e).__name__}: {e}"
    check(err, elapsed, dadt.TensorMismatchError, name, after)
    assert issubclass(dadt.TensorMismatchError, RuntimeError)


@multi_rank
@pytest.mark.parametrize("kind", ["allreduce", "allgather", "broadcast"])
def test_dtype_mismatch(world, nm, kind):
    name = nm("bad")
    dtype = torch.float32 if world.rank == 0 else torch.int32
    x = torch.ones(4, dtype=dtype)
    fn = {
        "allreduce": lambda: dadt.allreduce(x, name=name, op=dadt.Sum),
        "allgather": lambda: dadt.allgather(x, name=name),
        "broadcast": lambda: dadt.broadcast(x, root_rank=0, name=name),
    }[kind]
    err, elapsed = attempt(fn)
    after = still_usable(world, nm("after"))
    check(err, elapsed, RuntimeError, name, after)


@multi_rank
def test_op_mismatch(world, nm):
    name = nm("bad")
    op = dadt.Sum if world.rank == 0 else dadt.Max
    err, elapsed = attempt(lambda: dadt.allreduce(torch.ones(4), name=name, op=op))
    after = still_usable(world, nm("after"))
    check(err, elapsed, RuntimeError, name, after)


@multi_rank
def test_scaling_mismatch_or_consistent(world, nm):
    # Different prescale factors per rank are not a shape/dtype problem; Horovod reports it as a
    # mismatch. Either a RuntimeError naming the tensor or a result that applies each rank's own
    # factor is acceptable -- never a hang.
    name = nm("scaled")
    result = {}
    err, elapsed = attempt(lambda: result.setdefault(
        "out", dadt.allreduce(torch.ones(3), name=name, op=dadt.Sum, prescale_factor=float(world.rank + 1))))
    after = still_usable(world, nm("after"))
    assert elapsed < LIMIT_S
    assert after is None, after
    if err is not None:
        check(err, elapsed, RuntimeError, name)
    else:
        total = float(sum(range(1, world.size + 1)))
        assert_equal(result["out"], torch.full((3,), total), "per-rank prescale")


@multi_rank
def test_root_rank_mismatch(world, nm):
    name = nm("bad")
    err, elapsed = attempt(lambda: dadt.broadcast(torch.ones(4), root_rank=world.rank, name=name))
    after = still_usable(world, nm("after"))
    check(err, elapsed, RuntimeError, name, after)


def test_root_rank_out_of_range(world, nm):
    name = nm("bad")
    err, elapsed = attempt(lambda: dadt.broadcast(torch.ones(4), root_rank=world.size, name=name))
    after = still_usable(world, nm("after"))
    check(err, elapsed, (ValueError, RuntimeError), name, after)


@multi_rank
def test_duplicate_in_flight_name(world, nm):
    name = nm("dup")
    # A name is in flight until the runtime completes its collective. The last rank submits only
    # after the barrier, so on every other rank the first op cannot have completed when the second
    # call comes (a small op may complete as soon as every rank has submitted it: the coordinator
    # reduces it itself, ahead of anything queued on the data plane).
    first = torch.full((6,), float(world.rank))
    err, elapsed = None, 0.0
    if world.rank < world.size - 1:
        h1 = dadt.allreduce_async(first, name=name, op=dadt.Sum)
        err, elapsed = attempt(lambda: dadt.allreduce_async(torch.ones(6), name=name, op=dadt.Sum))
    dadt.barrier()
    if world.rank == world.size - 1:
        h1 = dadt.allreduce_async(first, name=name, op=dadt.Sum)
    try:
        out = dadt.synchronize(h1)
        first_result = None
    except Exception as e:  # noqa: BLE001
        out, first_result = None, f"the first op failed: {type(e).__name__}: {e}"
    after = still_usable(world, nm("after"))
    if world.rank < world.size - 1:
        check(err, elapsed, ValueError, name, after)
    assert after is None, after
    assert first_result is None, first_result
    assert_equal(out, torch.full((6,), float(sum(range(world.size)))), "the first op's result")


@multi_rank
@pytest.mark.parametrize("grouped", [False, True], ids=["single", "grouped"])
def test_name_is_free_once_the_runtime_completed_it(world, nm, grouped):
    # Horovod's rule: a name is taken while the runtime runs its collective, not until its handle
    # is synchronized (Horovod's own tests reuse names of completed, never synchronized handles).
    name = nm("held")
    submit = ((lambda: dadt.grouped_allreduce_async([torch.ones(3), torch.ones(2)], name=name, op=dadt.Sum))
              if grouped else (lambda: dadt.allreduce_async(torch.ones(3), name=name, op=dadt.Sum)))
    first = None
    if world.rank == 0:
        first = submit()  # cannot complete: the other ranks have not submitted it yet
        err, elapsed = attempt(submit)
        check(err, elapsed, ValueError, name)
    dadt.barrier()
    if world.rank > 0:
        first = submit()
    deadline = time.monotonic() + LIMIT_S
    while not dadt.poll(first):
        assert time.monotonic() < deadline, "the first collective did not complete"
        time.sleep(0.001)
    second = submit()  # the first is complete but not synchronized: the name is free again
    for h in (second, first):
        out = dadt.synchronize(h)
        outs = out if grouped else [out]
        for got, n in zip(outs, (3, 2)):
            assert_equal(got, torch.full((n,), float(world.size)), f"{name} after reuse")


@pytest.mark.parametrize("kind", ["allreduce", "allreduce_", "allgather", "broadcast_", "alltoall", "reducescatter"])
def test_non_contiguous_tensor(world, nm, kind):
    name = nm("bad")
    x = torch.arange(16, dtype=torch.float32).reshape(4, 4).t()
    assert not x.is_contiguous()
    fn = {
        "allreduce": lambda: dadt.allreduce(x, name=name),
        "allreduce_": lambda: dadt.allreduce_(x, name=name),
        "allgather": lambda: dadt.allgather(x, name=name),
        "broadcast_": lambda: dadt.broadcast_(x, root_rank=0, name=name),
        "alltoall": lambda: dadt.alltoall(x, name=name),
        "reducescatter": lambda: dadt.reducescatter(x, name=name),
    }[kind]
    err, elapsed = attempt(fn)
    after = still_usable(world, nm("after"))
    check(err, elapsed, ValueError, name, after)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
@pytest.mark.parametrize("kind", ["allreduce", "allgather", "broadcast"])
def test_unsupported_dtype(world, nm, kind, dtype):
    name = nm("bad")
    x = torch.ones(4, dtype=dtype)
    fn = {
        "allreduce": lambda: dadt.allreduce(x, name=name),
        "allgather": lambda: dadt.allgather(x, name=name),
        "broadcast": lambda: dadt.broadcast(x, root_rank=0, name=name),
    }[kind]
    err, elapsed = attempt(fn)
    after = still_usable(world, nm("after"))
    check(err, elapsed, ValueError, name, after)


def test_average_of_bool_is_an_error(world, nm):
    name = nm("bad")
    err, elapsed = attempt(lambda: dadt.allreduce(torch.ones(4, dtype=torch.bool), name=name, op=dadt.Average))
    after = still_usable(world, nm("after"))
    check(err, elapsed, (ValueError, RuntimeError), name, after)


@pytest.mark.parametrize("case", ["sum-too-large", "wrong-length", "negative"])
def test_alltoall_bad_splits(world, nm, case):
    name = nm("bad")
    n = world.size
    x = torch.ones(2 * n, 3)
    splits = {
        "sum-too-large": [3] * n,
        "wrong-length": [2] * n + [0],
        # a negative count; the counts still add up to the rows where size > 1
        "negative": [-1] if n == 1 else [-1] + [2] * (n - 2) + [2 * n + 1 - 2 * (n - 2)],
    }[case]
    err, elapsed = attempt(lambda: dadt.alltoall(x, splits=torch.tensor(splits, dtype=torch.int32), name=name))
    after = still_usable(world, nm("after"))
    check(err, elapsed, (ValueError, RuntimeError), name, after)


def test_alltoall_indivisible_without_splits(world, nm):
    if world.size == 1:
        pytest.skip("every first dimension is divisible by 1")
    name = nm("bad")
    x = torch.ones(world.size * 2 + 1, 2)
    err, elapsed = attempt(lambda: dadt.alltoall(x, name=name))
    after = still_usable(world, nm("after"))
    check(err, elapsed, (ValueError, RuntimeError), name, after)


def test_cuda_tensor():
    if not torch.cuda.is_available():
        pytest.skip("torch.cuda is not available on this machine")
    x = torch.ones(8, device="cuda")
    out = dadt.allreduce(x, name="test_errors.cuda", op=dadt.Sum)
    assert out.device.type == "cuda"
    assert torch.equal(out.cpu(), torch.full((8,), float(dadt.size())))
