"""Point to point on torch tensors: send and receive between two ranks, a matched pairwise
exchange (what gossip training uses), and a neighbor allgather over a graph (docs/api.md, "Point
to point and gossip").

Like every dadt operation these are negotiated by the coordinator, so a disagreement is an error
on the ranks concerned rather than a hang: a send and a receive of one name must agree on dtype
and shape, two ranks that name each other must agree on who sends, and a neighbor allgather's
graph must be the same on every rank. Unlike the collectives, a send, receive or exchange waits for
its partner only, never for the other ranks. CPU tensors (or GPU tensors staged through host
memory) of the global process set.
"""

import operator
from typing import List, Optional, Sequence

import torch

from dadt.common.basics import _core
from dadt.common.util import OP_NEIGHBOR_ALLGATHER, OP_PEER_EXCHANGE, message_name
from dadt.torch.handles import auto_name, check_tensor, enqueue, register, synchronize

__all__ = ["send", "recv", "isend", "irecv", "exchange_async", "withdraw_exchange",
           "neighbor_allgather", "neighbor_allgather_async"]


def _ranks(ranks, what: str) -> List[int]:
    """A rank or ranks as a list of ints (anything with __index__, not bool)."""
    items = [ranks] if hasattr(ranks, "__index__") else list(ranks)
    if any(isinstance(r, bool) or not hasattr(r, "__index__") for r in items):
        raise TypeError("%s must be ranks (ints), got %r" % (what, ranks))
    return [operator.index(r) for r in items]


def isend(tensor: torch.Tensor, dst: int, name: Optional[str] = None) -> int:
    """Sends ``tensor`` to rank ``dst`` without blocking; returns a handle for ``synchronize()``.
    Keep the tensor unchanged until then. Unnamed sends are matched in order with ``dst``'s
    unnamed receives from this rank."""
    check_tensor(tensor, name or "send")
    (dst,) = _ranks(dst, "dst")
    if name is None:
        name = message_name(_core.rank(), dst)
    return register([enqueue(OP_PEER_EXCHANGE, name, tensor, None, send_ranks=[dst])])


def irecv(tensor: torch.Tensor, src: int, name: Optional[str] = None) -> int:
    """Receives into ``tensor`` (in place) from rank ``src`` without blocking; ``synchronize()``
    returns the tensor."""
    check_tensor(tensor, name or "recv")
    (src,) = _ranks(src, "src")
    if name is None:
        name = message_name(src, _core.rank())
    return register([enqueue(OP_PEER_EXCHANGE, name, tensor, tensor, recv_ranks=[src])], tensor)


def send(tensor: torch.Tensor, dst: int, name: Optional[str] = None) -> None:
    """Sends ``tensor`` to rank ``dst`` and returns when it has been handed over."""
    synchronize(isend(tensor, dst, name))


def recv(tensor: torch.Tensor, src: int, name: Optional[str] = None) -> int:
    """Receives into ``tensor`` from rank ``src``; returns ``src`` (as torch.distributed.recv
    returns the sender)."""
    synchronize(irecv(tensor, src, name))
    return src


def exchange_async(tensor: torch.Tensor, peers: Sequence[int], name: str,
                   output: Optional[torch.Tensor] = None) -> int:
    """Swaps ``tensor`` with one rank of ``peers``: the coordinator pairs this rank with the
    first of them that asks for an exchange of ``name`` naming this rank too (the one that has
    waited longest), so a rank waits only until some candidate is free, never for a given one.
    ``synchronize()`` returns ``(output, partner)``: the partner's tensor and its rank, or
    ``(output, -1)`` with ``output`` untouched when the exchange was withdrawn
    (``withdraw_exchange``) before a partner came. Every rank must pass the same dtype and shape.
    ``dadt.common.topology`` has the usual candidate lists (ring, exponential, bipartite)."""
    check_tensor(tensor, name)
    peers = _ranks(peers, "peers")
    if not peers:
        raise ValueError("exchange_async of %r: peers is empty; name at least one rank" % name)
    if output is None:
        output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    elif output is tensor:
        raise ValueError("exchange_async of %r: the output must not be the input" % name)
    member = enqueue(OP_PEER_EXCHANGE, name, tensor, output, send_ranks=peers, recv_ranks=peers)
    return register([member], output,
                    finish=lambda handles: (output, int(_core.int_result(handles[0]))))


def withdraw_exchange(name: str) -> None:
    """Withdraws this rank's pending ``exchange_async`` of ``name``, if no partner has been found
    for it yet (its ``synchronize()`` then returns partner -1); returns once the coordinator has
    seen it. A no-op when none is pending or it was matched already (then it completes as usual).
    """
    withdrawal = name + _core.WITHDRAW_SUFFIX
    synchronize(register([enqueue(OP_PEER_EXCHANGE, withdrawal, None, None, withdraw=True)]))


def neighbor_allgather_async(tensor: torch.Tensor, send_ranks: Sequence[int],
                             recv_ranks: Sequence[int], name: Optional[str] = None) -> int:
    """Sends ``tensor`` to every rank of ``send_ranks`` and receives one tensor of the same dtype
    and shape from every rank of ``recv_ranks``; ``synchronize()`` returns them concatenated on
    the first dimension, in ``recv_ranks`` order (a 0-d tensor counts as one row). A collective:
    every rank calls it, and the graph must agree (rank i sends to j exactly when j receives from
    i), or every rank gets an error naming the first disagreement. ``dadt.common.topology`` has
    ``ring_graph`` and ``exponential_graph``."""
    name = auto_name("neighbor_allgather", name)
    check_tensor(tensor, name)
    send_ranks, recv_ranks = _ranks(send_ranks, "send_ranks"), _ranks(recv_ranks, "recv_ranks")
    rows = tensor.reshape(1, *tensor.shape) if tensor.dim() == 0 else tensor
    output = torch.empty((len(recv_ranks) * rows.shape[0],) + tuple(rows.shape[1:]),
                         dtype=tensor.dtype, device=tensor.device)
    member = enqueue(OP_NEIGHBOR_ALLGATHER, name, rows.contiguous(), output,
                     send_ranks=send_ranks, recv_ranks=recv_ranks)
    return register([member], output)


def neighbor_allgather(tensor: torch.Tensor, send_ranks: Sequence[int],
                       recv_ranks: Sequence[int], name: Optional[str] = None) -> torch.Tensor:
    """The blocking form of ``neighbor_allgather_async``."""
    return synchronize(neighbor_allgather_async(tensor, send_ranks, recv_ranks, name))

