"""The pure parts of an elastic `RayExecutor` job (dadt/ray/elastic.py): which workers a round holds and
with which ranks, the values a round publishes in the job's store, and a client that writes them
there. No Ray here: test/python_unit/test_ray_elastic_plan.py checks it without a cluster.

The round and its keys are dadtrun's launcher <-> worker contract (docs/elastic.md, "How the driver
works"; runtime/core/elastic_membership.h has the worker's side), so the runtime of a rank joins a
Ray job's rounds exactly as it joins dadtrun's. The order of the ranks follows dadtrun's round planner
(dadtrun/round_planner.h):

1. at most ``max_workers``: workers that were in an earlier round (survivors) first, then the others,
   in the order they were started;
2. hosts with a survivor first, in the order the job first saw them, then the other hosts, in that
   order; within a host, survivors first, then by slot. So rank 0 is a survivor on the oldest
   surviving host, and the state every rank syncs from rank 0 is never a fresh worker's;
3. local and cross ranks by dadtrun's definitions (dadt/ray/_places.py).
"""
import socket
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from dadt import _rendezvous_wire as wire
from dadt.ray import _places


class Candidate(NamedTuple):
    """A started worker that may take part in the next round."""
    worker_id: str
    host: str        # its node IP
    slot: int        # its slot on that node
    survivor: bool   # it was in an earlier round (it holds the committed state)


def plan_round(candidates: Sequence[Candidate], host_order: Sequence[str],
               max_workers: Optional[int] = None) -> Tuple[List[Tuple[str, Dict[str, int]]], List[str]]:
    """(the round's workers in rank order, each with its place (_places.places), the ids left out).
    ``candidates`` in the order the workers were started; ``host_order``: hosts in the order the job
    first saw them (hosts missing there come after, in candidate order)."""
    chosen = [c for c in candidates if c.survivor] + [c for c in candidates if not c.survivor]
    if max_workers is not None:
        chosen = chosen[:max_workers]
    left_out = [c.worker_id for c in candidates if c not in chosen]
    seen = list(host_order) + [c.host for c in candidates if c.host not in host_order]
    first_seen = {h: seen.index(h) for h in seen}
    with_survivor = {c.host for c in chosen if c.survivor}
    ranked = sorted(chosen, key=lambda c: (c.host not in with_survivor, first_seen[c.host], not c.survivor, c.slot))
    placed = _places.places([c.host for c in ranked])
    return [(c.worker_id, p) for c, p in zip(ranked, placed)], left_out


def round_items(round_number: int, members: Sequence[Tuple[str, Dict[str, int]]],
                removed: Iterable[str] = ()) -> List[Tuple[str, str]]:
    """The keys of round ``round_number`` in publishing order (docs/elastic.md, "Rounds"): every
    assignment ("rank size local_rank local_size cross_rank cross_size", or "removed"), then the size,
    then ``elastic/round``, which makes the round visible."""
    prefix = "elastic/round/%d" % round_number
    items = [("%s/assign/%s" % (prefix, wid), "%d %d %d %d %d %d" % (
        p["rank"], p["size"], p["local_rank"], p["local_size"], p["cross_rank"], p["cross_size"]))
        for wid, p in members]
    items += [("%s/assign/%s" % (prefix, wid), "removed") for wid in removed]
    items += [("%s/size" % prefix, str(len(members))), ("elastic/round", str(round_number))]
    return items


def notice_items(seq: int, kind: str) -> List[Tuple[str, str]]:
    """A host-update notice (``added``, ``removed`` or ``mixed``): its kind, then the counter that the
    ranks' ``check_host_updates()`` compares."""
    return [("elastic/notice/%d" % seq, kind), ("elastic/notice", str(seq))]


def finished_items(round_number: int, who: str) -> List[Tuple[str, str]]:
    """Round ``round_number``'s end: a rank of it returned, so no later round will come."""
    return [("elastic/round/%d/finished" % round_number, who)]


def _requests(addr: str, port: int, secret: str, op: int, items: Sequence[Tuple[str, str]],
              timeout_s: float) -> List[Tuple[int, bytes]]:
    """Sends ``items`` (key, value) as ``op`` requests over one connection, in order (the server
    answers each request before the next is read); returns each (status, value). Raises
    ConnectionError naming the store and the key for an answer other than OK or NOT_FOUND."""
    answers = []
    with socket.create_connection((addr, port), timeout=timeout_s) as sock:
        wire.handshake(sock, secret.encode(), "%s:%d" % (addr, port))
        for key, value in items:
            wire.send_frame(sock, wire.encode_request(op, key, value.encode()))
            status, answer = wire.decode_response(wire.read_frame(sock))
            if status not in (wire.OK, wire.NOT_FOUND) or (status == wire.NOT_FOUND and op != wire.GET):
                raise ConnectionError("dadt's rendezvous store at %s:%d refused %s %s: %s"
                                      % (addr, port, "GET" if op == wire.GET else "SET", key,
                                         wire.STATUS_NAMES.get(status, status)))
            answers.append((status, answer))
    return answers


def store_set(addr: str, port: int, secret: str, items: Sequence[Tuple[str, str]],
              timeout_s: float = 10.0) -> None:
    """SETs ``items`` in dadt's rendezvous store at addr:port, in order, over one connection (so the
    order is the order the ranks can see them in)."""
    _requests(addr, port, secret, wire.SET, items, timeout_s)


def store_get(addr: str, port: int, secret: str, keys: Sequence[str], timeout_s: float = 10.0) -> Dict[str, str]:
    """The values of those of ``keys`` that the store at addr:port holds (an absent key is left out)."""
    answers = _requests(addr, port, secret, wire.GET, [(k, "") for k in keys], timeout_s)
    return {k: v.decode(errors="replace") for k, (status, v) in zip(keys, answers) if status == wire.OK}


def unresponsive_key(round_number: int, rank: int) -> str:
    """Where a survivor's liveness watch names a rank of round ``round_number`` silent for the
    shutdown time (runtime/core/runtime_liveness.cc; dadtrun/elastic_driver.h, UnresponsiveKey)."""
    return "elastic/%d/unresponsive/%d" % (round_number, rank)
