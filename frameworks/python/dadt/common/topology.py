"""Graphs for point-to-point exchanges (docs/api.md, "Point to point and gossip").

Each function returns, for one rank, the ranks it talks to. The undirected ones (``ring``,
``exponential``, ``bipartite``, ``complete``) are the candidate partners of a matched exchange
(``dadt.torch.exchange_async``, gossip training): symmetric, so that a rank is a candidate of each
of its candidates. The directed ones (``*_graph``) are ``(send_ranks, recv_ranks)`` for a
neighbor allgather, where every rank's out-neighbours name it among their in-neighbours.
"""

from typing import List, Tuple


def _check(rank: int, size: int) -> None:
    if size < 1 or not 0 <= rank < size:
        raise ValueError("rank %r is not in a job of size %r" % (rank, size))


def complete(rank: int, size: int) -> List[int]:
    """Every other rank: a random peer per step, whichever is free first."""
    _check(rank, size)
    return [r for r in range(size) if r != rank]


def ring(rank: int, size: int) -> List[int]:
    """The two neighbours on a ring (one at 2 ranks, none alone)."""
    _check(rank, size)
    return sorted({(rank - 1) % size, (rank + 1) % size} - {rank})


def exponential(rank: int, size: int) -> List[int]:
    """The ranks at distance 1, 2, 4, ... in either direction around the ring: log2(size)
    neighbours each way, so that a model spreads to every rank in O(log size) exchanges (the
    exponential graph of SGP, Assran et al. 2019)."""
    _check(rank, size)
    peers, hop = set(), 1
    while hop < size:
        peers.update({(rank + hop) % size, (rank - hop) % size})
        hop *= 2
    return sorted(peers - {rank})


def bipartite(rank: int, size: int) -> List[int]:
    """AD-PSGD's bipartite pairing (Lian et al. 2018): even ranks pair only with odd ranks, so an
    exchange never has two ranks of one side waiting on each other."""
    _check(rank, size)
    return [r for r in range(size) if r % 2 != rank % 2]


GRAPHS = {"complete": complete, "ring": ring, "exponential": exponential, "bipartite": bipartite}


def peers(graph: str, rank: int, size: int) -> List[int]:
    """The candidate partners of ``rank`` in the named graph."""
    if graph not in GRAPHS:
        raise ValueError("unknown gossip graph %r; choose one of %s" % (graph, ", ".join(GRAPHS)))
    return GRAPHS[graph](rank, size)


def ring_graph(rank: int, size: int) -> Tuple[List[int], List[int]]:
    """Directed ring: send to the next rank, receive from the previous one."""
    _check(rank, size)
    if size == 1:
        return [], []
    return [(rank + 1) % size], [(rank - 1) % size]


def exponential_graph(rank: int, size: int) -> Tuple[List[int], List[int]]:
    """Directed exponential graph: send to rank + 2^k, receive from rank - 2^k (k = 0, 1, ...,
    2^k < size)."""
    _check(rank, size)
    send, recv, hop = [], [], 1
    while hop < size:
        send.append((rank + hop) % size)
        recv.append((rank - hop) % size)
        hop *= 2
    return send, recv
