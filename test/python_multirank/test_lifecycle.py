"""init()/shutdown()/init() in one process, under the launcher (Gloo and MPI alike).

Every test leaves dadt initialised as the session fixture (conftest.py) expects. Each cycle does a
collective, so a re-init that read an earlier incarnation's rendezvous keys (Gloo) or messages
(MPI) fails here instead of timing out in a user's job.
"""
import os
import time

import pytest
import torch

import dadt.torch as dadt


def _sum_ones(name):
    return dadt.allreduce(torch.ones(3), name=name, op=dadt.Sum)


def test_reinit_many_times_with_a_collective_in_each(world):
    for cycle in range(5):
        dadt.shutdown()
        assert not dadt.is_initialized()
        with pytest.raises(ValueError):
            dadt.rank()
        dadt.init()
        assert dadt.is_initialized()
        assert (dadt.rank(), dadt.size()) == (world.rank, world.size)
        out = _sum_ones("lifecycle.cycle")  # the same name in every incarnation
        assert out.tolist() == [float(world.size)] * 3, f"cycle {cycle}"


def test_ranks_arrive_at_init_and_shutdown_at_different_moments(world):
    for late in range(world.size):
        if world.rank == late:
            time.sleep(0.3)  # the others ask for the new incarnation's addresses first
        dadt.shutdown()
        if world.rank == (late + 1) % world.size:
            time.sleep(0.3)
        dadt.init()
        assert _sum_ones("lifecycle.late").tolist() == [float(world.size)] * 3


def test_collective_in_flight_at_shutdown_fails_clearly_then_reinit_works(world, require_two_ranks):
    # Every rank but the last starts a collective the last never joins; the last shuts down.
    quitter = world.size - 1
    if world.rank == quitter:
        time.sleep(0.3)
        dadt.shutdown()
    else:
        handle = dadt.allreduce_async(torch.ones(2), name="lifecycle.orphan", op=dadt.Sum)
        with pytest.raises(Exception) as error:
            dadt.synchronize(handle)
        assert f"shut down by rank {quitter}" in str(error.value), str(error.value)
        # The stopped runtime refuses new work with a clear error instead of hanging.
        with pytest.raises(Exception) as again:
            _sum_ones("lifecycle.after")
        assert "shut down" in str(again.value), str(again.value)
        dadt.shutdown()
    dadt.init()
    assert _sum_ones("lifecycle.orphan").tolist() == [float(world.size)] * 3


def test_a_handle_of_an_earlier_incarnation_is_refused_after_reinit(world):
    handle = dadt.allreduce_async(torch.ones(2), name="lifecycle.old", op=dadt.Sum)
    while not dadt.poll(handle):
        time.sleep(0.001)
    dadt.shutdown()
    dadt.init()
    _sum_ones("lifecycle.new")  # a new incarnation's handles, possibly with the old numbers
    with pytest.raises(ValueError):
        dadt.synchronize(handle)


def test_shutdown_leaves_no_thread_or_socket_behind(world):
    def counts():
        fds = os.listdir("/proc/self/fd")
        sockets = 0
        for fd in fds:
            try:
                sockets += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
            except OSError:  # the listing's own descriptor, closed by now
                pass
        return len(os.listdir("/proc/self/task")), sockets, len(fds)

    dadt.shutdown()
    dadt.init()
    _sum_ones("lifecycle.warm")
    dadt.shutdown()
    before = counts()
    for _ in range(5):
        dadt.init()
        _sum_ones("lifecycle.count")
        dadt.shutdown()
    after = counts()
    dadt.init()
    assert after == before, f"(threads, sockets, fds) before {before}, after 5 cycles {after}"


def test_names_in_flight_and_generated_names_start_over_in_a_new_incarnation(world):
    # Collectives no other rank matches (they fail at shutdown, never synchronized): a named one on
    # rank 0, and `rank` unnamed ones on each rank, so that the generated-name counters differ.
    if world.rank == 0:
        dadt.allreduce_async(torch.ones(1), name="lifecycle.dangling", op=dadt.Sum)
    stale = [dadt.allreduce_async(torch.ones(1), op=dadt.Sum) for _ in range(world.rank)]
    dadt.barrier()
    dadt.shutdown()
    dadt.init()
    # The same name again, and an unnamed collective: both agree across ranks.
    assert _sum_ones("lifecycle.dangling").tolist() == [float(world.size)] * 3
    assert dadt.allreduce(torch.ones(2), op=dadt.Sum).tolist() == [float(world.size)] * 2
    for handle in stale:
        with pytest.raises(ValueError):
            dadt.synchronize(handle)
