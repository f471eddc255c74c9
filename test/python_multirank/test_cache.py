"""Steady state: the same names over and over (the response cache) while what they carry changes.

A cached response must never be reused for a request that differs in anything the result depends
on: shape, dtype, reduce op, scale factors, root rank, per-rank first dimension, splits.
"""
import random

import torch

import dadt.torch as dadt
from collective_utils import assert_equal, inputs_for, reduce_expected, values


def test_many_steps_same_names(world, nm):
    """30 training-like steps of 20 tensors, enqueued in a rank- and step-dependent order."""
    steps, k = 30, 20
    results = []
    for step in range(steps):
        order = list(range(k))
        random.Random(world.rank * 1000 + step).shuffle(order)
        handles = {}
        for i in order:
            x = inputs_for("Sum", (i * 13 + 1,), torch.float32, world.rank, world.size, salt=step + i)
            handles[i] = dadt.allreduce_async(x, name=nm(f"grad{i}"), op=dadt.Sum)
        results.append({i: dadt.synchronize(handles[i]) for i in range(k)})
    for step, outs in enumerate(results):
        for i in range(k):
            expected = reduce_expected("Sum", (i * 13 + 1,), torch.float32, world.size, salt=step + i)
            assert_equal(outs[i], expected, f"step {step} tensor {i}")


def test_allreduce_same_name_changing_op_and_scale(world, nm):
    name = nm("x")
    calls = [("Sum", 1.0, 1.0), ("Sum", 1.0, 1.0), ("Max", 1.0, 1.0), ("Sum", 0.5, 1.0), ("Sum", 1.0, 4.0),
             ("Min", 1.0, 1.0), ("Sum", 1.0, 1.0)]
    outs = []
    for op_name, pre, post in calls:
        x = inputs_for(op_name, (9,), torch.float32, world.rank, world.size)
        outs.append(dadt.allreduce(x, name=name, op=getattr(dadt, op_name), prescale_factor=pre,
                                   postscale_factor=post))
    for (op_name, pre, post), out in zip(calls, outs):
        expected = reduce_expected(op_name, (9,), torch.float32, world.size, prescale=pre, postscale=post)
        assert_equal(out, expected, f"{op_name} pre={pre} post={post} under one name")


def test_allgather_same_name_changing_rows(world, nm):
    name = nm("x")
    outs = []
    for step in range(6):
        rows = (world.rank + step) % 3  # per-rank first dimension changes every step (sometimes 0)
        outs.append(dadt.allgather(values((rows, 2), torch.int32, world.rank, salt=step), name=name))
    for step, out in enumerate(outs):
        expected = torch.cat([values(((r + step) % 3, 2), torch.int32, r, salt=step) for r in range(world.size)])
        assert_equal(out, expected, f"allgather step {step}")


def test_broadcast_same_name_changing_root(world, nm):
    name = nm("x")
    roots = [(s * 7) % world.size for s in range(8)]
    outs = [dadt.broadcast(values((5,), torch.float64, world.rank, salt=s), root_rank=root, name=name)
            for s, root in enumerate(roots)]
    for s, (root, out) in enumerate(zip(roots, outs)):
        assert_equal(out, values((5,), torch.float64, root, salt=s), f"broadcast step {s} root {root}")


def test_alltoall_same_name_changing_splits(world, nm):
    name = nm("x")
    n, r = world.size, world.rank
    results = []
    for step in range(5):
        send = [(r + j + step) % 3 for j in range(n)]
        x = torch.cat([torch.full((send[j], 2), 100 * r + 10 * j + step, dtype=torch.int64) for j in range(n)])
        results.append(dadt.alltoall(x, splits=torch.tensor(send, dtype=torch.int32), name=name))
    for step, (out, received) in enumerate(results):
        rows = [(i + r + step) % 3 for i in range(n)]
        expected = torch.cat([torch.full((rows[i], 2), 100 * i + 10 * r + step, dtype=torch.int64) for i in range(n)])
        assert [int(v) for v in received.tolist()] == rows, f"step {step}: received splits {received.tolist()}"
        assert_equal(out, expected, f"alltoall step {step}")


def test_reducescatter_same_name_changing_rows(world, nm):
    name = nm("x")
    shapes = [(world.size * 2 + s, 3) for s in range(5)]
    outs = [dadt.reducescatter(inputs_for("Sum", s, torch.float32, world.rank, world.size), name=name, op=dadt.Sum)
            for s in shapes]
    for shape, out in zip(shapes, outs):
        full = reduce_expected("Sum", shape, torch.float32, world.size)
        base, extra = divmod(shape[0], world.size)
        start = world.rank * base + min(world.rank, extra)
        assert_equal(out, full[start:start + base + (1 if world.rank < extra else 0)], f"rows {shape[0]}")
