"""Point to point (dadt.torch.p2p): send/recv, matched exchanges and neighbor allgather, against
values each rank can predict, and the disagreements that must be errors (never hangs).

Every rank runs every test; the ones that need a partner skip (on every rank) at one rank.
"""
import pytest
import torch

import dadt.torch as dadt
from dadt.common import topology
from collective_utils import Deadline

DTYPES = [torch.float32, torch.float64, torch.int64, torch.uint8]


def _value(rank, shape, dtype, salt=0):
    return (torch.arange(int(torch.tensor(shape).prod()), dtype=torch.float64) + 10 * rank + salt
            ).reshape(shape).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ring_of_sends_and_receives(world, nm, require_two_ranks, dtype):
    right, left = (world.rank + 1) % world.size, (world.rank - 1) % world.size
    mine = _value(world.rank, (2, 3), dtype)
    got = torch.zeros(2, 3, dtype=dtype)
    # Every rank sends before it receives: the pair only waits for the pair.
    sent = dadt.isend(mine, right, name=nm("%d" % world.rank))
    received = dadt.irecv(got, left, name=nm("%d" % left))
    dadt.synchronize(sent)
    assert dadt.synchronize(received) is got
    assert torch.equal(got, _value(left, (2, 3), dtype))


def test_unnamed_messages_between_two_ranks_arrive_in_order(world, require_two_ranks):
    if world.rank == 0:
        for k in range(3):
            dadt.send(torch.full((4,), float(k)), 1)
    elif world.rank == 1:
        got = [torch.zeros(4) for _ in range(3)]
        for t in got:
            assert dadt.recv(t, 0) == 0
        assert [t[0].item() for t in got] == [0.0, 1.0, 2.0]
    dadt.barrier()


@pytest.mark.parametrize("graph", ["ring_graph", "exponential_graph"])
def test_neighbor_allgather_concatenates_in_receive_order(world, nm, graph):
    send, recv = getattr(topology, graph)(world.rank, world.size)
    out = dadt.neighbor_allgather(_value(world.rank, (2,), torch.float32), send, recv,
                                  name=nm())
    expected = torch.cat([_value(r, (2,), torch.float32) for r in recv]) if recv else \
        torch.zeros(0)
    assert out.shape == (2 * len(recv),)
    assert torch.equal(out, expected)


def test_neighbor_allgather_graph_disagreement_is_an_error_on_every_rank(world, nm,
                                                                        require_two_ranks):
    send, recv = topology.ring_graph(world.rank, world.size)
    if world.rank == 0:
        send = []  # rank 1 still expects rank 0's tensor
    with Deadline():
        with pytest.raises(dadt.TensorMismatchError, match="ranks disagree on the graph"):
            dadt.neighbor_allgather(torch.ones(3), send, recv, name=nm())
    # The job goes on.
    assert dadt.allreduce(torch.ones(1), name=nm("after"), op=dadt.Sum).item() == world.size


def test_exchange_pairs_ranks_that_name_each_other(world, nm, require_two_ranks):
    mine = _value(world.rank, (5,), torch.float32)
    handle = dadt.exchange_async(mine, topology.complete(world.rank, world.size), name=nm())
    dadt.barrier()  # every rank's request is in: at most one (odd sizes) is still unmatched
    dadt.withdraw_exchange(nm())
    out, partner = dadt.synchronize(handle)
    partners = dadt.allgather(torch.tensor([partner]), name=nm("partners")).tolist()
    unmatched = [r for r, p in enumerate(partners) if p < 0]
    assert len(unmatched) == world.size % 2, partners
    if partner >= 0:
        assert partners[partner] == world.rank, "partner of my partner: %s" % partners
        assert torch.equal(out, _value(partner, (5,), torch.float32))


def test_exchange_candidates_restrict_the_pairing(world, nm):
    if world.size < 4:
        pytest.skip("two disjoint pairs need 4 ranks")
    peers = topology.bipartite(world.rank, world.size)
    out, partner = dadt.synchronize(
        dadt.exchange_async(torch.full((2,), float(world.rank)), peers, name=nm()))
    assert partner % 2 != world.rank % 2
    assert out.tolist() == [float(partner)] * 2


def test_send_receive_mismatch_is_an_error_for_both_and_the_job_goes_on(world, nm,
                                                                         require_two_ranks):
    if world.rank in (0, 1):
        with Deadline():
            with pytest.raises(dadt.TensorMismatchError, match="shapes"):
                if world.rank == 0:
                    dadt.send(torch.ones(3), 1, name=nm())
                else:
                    dadt.recv(torch.zeros(4), 0, name=nm())
    assert dadt.allreduce(torch.ones(1), name=nm("after"), op=dadt.Sum).item() == world.size


def test_bad_point_to_point_arguments_are_refused_at_once(world, nm):
    with pytest.raises(ValueError, match="itself"):
        dadt.send(torch.ones(1), world.rank, name=nm("self"))
    with pytest.raises(ValueError, match="not in"):
        dadt.recv(torch.ones(1), world.size + 3, name=nm("far"))
    with pytest.raises(ValueError, match="peers is empty"):
        dadt.exchange_async(torch.ones(1), [], name=nm("empty"))


def test_numpy_point_to_point_for_tensorflow_and_jax(world, nm, require_two_ranks):
    """dadt.common.array_ops, the layer under dadt.tensorflow and dadt.jax: the same operations on
    NumPy arrays."""
    import numpy as np
    from dadt.common import array_ops
    right, left = (world.rank + 1) % world.size, (world.rank - 1) % world.size
    mine = np.full((2, 2), world.rank, dtype=np.int32)
    sent = array_ops.send_async(mine, right, name=nm("%d" % world.rank))
    got = array_ops.synchronize(array_ops.recv_async(mine, left, name=nm("%d" % left)))
    array_ops.synchronize(sent)
    ring = array_ops.neighbor_allgather(np.float32(world.rank), *topology.ring_graph(world.rank, world.size),
                                        name=nm("ring"))
    h = array_ops.exchange_async(np.arange(3.0) + world.rank, topology.complete(world.rank, world.size),
                                 name=nm("swap"))
    array_ops.barrier()
    array_ops.withdraw_exchange(nm("swap"))
    out, partner = array_ops.synchronize(h)
    assert got.tolist() == [[left, left], [left, left]]
    assert ring.tolist() == [float(left)]
    if partner >= 0:
        assert out.tolist() == (np.arange(3.0) + partner).tolist()
