"""Asynchronous handles: many in flight, completed and synchronized out of order; poll()."""
import os
import random
import time

import pytest
import torch

import dadt.torch as dadt
from collective_utils import assert_equal, inputs_for, reduce_expected, values


def _wait_poll(handle, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not dadt.poll(handle):
        assert time.monotonic() < deadline, f"poll() still False after {seconds} s"
        time.sleep(0.001)


def test_synchronize_in_reverse_order(world, nm):
    sizes = [1, 3, 1000, 17, 0, 4096, 2, 65]
    xs = [inputs_for("Sum", (n,), torch.float32, world.rank, world.size, salt=i) for i, n in enumerate(sizes)]
    handles = [dadt.allreduce_async(x, name=nm(str(i)), op=dadt.Sum) for i, x in enumerate(xs)]
    outs = {}
    for i in reversed(range(len(handles))):
        outs[i] = dadt.synchronize(handles[i])
    for i, n in enumerate(sizes):
        assert_equal(outs[i], reduce_expected("Sum", (n,), torch.float32, world.size, salt=i), f"handle {i}")


def test_synchronize_in_random_order_and_poll(world, nm):
    rng = random.Random(1234)  # same order on every rank (it does not need to be, but keeps logs alike)
    n_handles = 24
    xs = [inputs_for("Max", (i * 11 + 1,), torch.int32, world.rank, world.size, salt=i) for i in range(n_handles)]
    handles = [dadt.allreduce_async(x, name=nm(str(i)), op=dadt.Max) for i, x in enumerate(xs)]
    order = list(range(n_handles))
    rng.shuffle(order)
    # Poll the last one enqueued until it is done (it cannot be done before the ones in front of
    # it are negotiated, but must never need a synchronize() to make progress).
    _wait_poll(handles[-1])
    assert dadt.poll(handles[-1]) is True
    outs = {}
    for i in order:
        outs[i] = dadt.synchronize(handles[i])
    for i in range(n_handles):
        assert_equal(outs[i], reduce_expected("Max", (i * 11 + 1,), torch.int32, world.size, salt=i), f"handle {i}")


def test_poll_becomes_true_without_synchronize(world, nm):
    h = dadt.allreduce_async(torch.ones(10), name=nm(), op=dadt.Sum)
    _wait_poll(h)
    out = dadt.synchronize(h)
    assert_equal(out, torch.full((10,), float(world.size)), "polled allreduce")


def test_mixed_collectives_in_flight_together(world, nm):
    r, n = world.rank, world.size
    ar_in = inputs_for("Sum", (9,), torch.float64, r, n)
    h_ar = dadt.allreduce_async(ar_in, name=nm("allreduce"), op=dadt.Sum)
    h_ag = dadt.allgather_async(torch.full((r + 1, 2), r, dtype=torch.int32), name=nm("allgather"))
    bc = values((6,), torch.int64, r) if r == 0 else torch.zeros(6, dtype=torch.int64)
    h_bc = dadt.broadcast_async(bc, root_rank=0, name=nm("broadcast"))
    h_bc_ = dadt.broadcast_async_(torch.full((4,), r, dtype=torch.float32), root_rank=n - 1,
                                  name=nm("broadcast_"))
    h_rs = dadt.reducescatter_async(torch.ones(2 * n + 1, 3), name=nm("reducescatter"), op=dadt.Sum)
    h_ar2 = dadt.allreduce_async(torch.full((2,), r, dtype=torch.int8), name=nm("allreduce2"), op=dadt.Max)

    out_ar2 = dadt.synchronize(h_ar2)
    out_rs = dadt.synchronize(h_rs)
    out_bc_ = dadt.synchronize(h_bc_)
    out_bc = dadt.synchronize(h_bc)
    out_ag = dadt.synchronize(h_ag)
    out_ar = dadt.synchronize(h_ar)

    assert_equal(out_ar, reduce_expected("Sum", (9,), torch.float64, n), "allreduce")
    assert_equal(out_ag, torch.cat([torch.full((k + 1, 2), k, dtype=torch.int32) for k in range(n)]), "allgather")
    assert_equal(out_bc, values((6,), torch.int64, 0), "broadcast")
    assert_equal(out_bc_, torch.full((4,), n - 1, dtype=torch.float32), "broadcast_")
    rows = 3 if r == 0 else 2
    assert_equal(out_rs, torch.full((rows, 3), float(n)), "reducescatter")
    assert_equal(out_ar2, torch.full((2,), n - 1, dtype=torch.int8), "allreduce int8 max")


def test_ranks_enqueue_in_different_orders(world, nm):
    # Negotiation matches by name, not by order: each rank enqueues the same set in a rank-dependent order.
    k = 12
    order = list(range(k))
    random.Random(world.rank).shuffle(order)
    handles = {}
    for i in order:
        handles[i] = dadt.allreduce_async(torch.full((i + 1,), float(i)), name=nm(str(i)), op=dadt.Sum)
    outs = {i: dadt.synchronize(handles[i]) for i in range(k)}
    for i in range(k):
        assert_equal(outs[i], torch.full((i + 1,), float(i * world.size)), f"tensor {i}")


def test_small_allreduce_is_not_held_behind_a_large_one(world, nm):
    # With Gloo, large collectives run on the lanes (DADT_GLOO_THREADS). A small allreduce is
    # reduced during its negotiation (eager) and completes at once, while the large one is still
    # moving data, instead of waiting for the lanes to drain.
    if world.size < 2 or os.environ.get("DADT_CONTROLLER") != "gloo" or \
            os.environ.get("DADT_GLOO_THREADS", "2") == "1":
        pytest.skip("needs two or more ranks and the Gloo controller with lanes")
    big = torch.ones(32 << 20)  # 128 MB: far longer on the wire than one negotiation round
    small = torch.full((4,), float(world.rank + 1))
    h_big = dadt.allreduce_async(big, name=nm("big"), op=dadt.Sum)
    h_small = dadt.allreduce_async(small, name=nm("small"), op=dadt.Sum)
    out = dadt.synchronize(h_small)
    big_done_first = dadt.poll(h_big)
    big_out = dadt.synchronize(h_big)
    assert_equal(out, torch.full((4,), float(world.size * (world.size + 1) // 2)), "small allreduce")
    assert big_out[0].item() == big_out[-1].item() == world.size
    assert not big_done_first, "the small allreduce waited for the large one"
