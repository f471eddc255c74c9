"""Collectives on NumPy arrays: the engine under dadt.tensorflow, dadt.keras and dadt.jax.

TensorFlow and JAX both hand their CPU buffers to Python as NumPy arrays (``tensor.numpy()``,
``np.asarray(jax_array)``, and the arguments of ``tf.numpy_function`` and ``jax`` host
callbacks), so one framework-free layer serves both: it validates the array, builds its DLPack
capsule (dadt.common.dlpack), enqueues it in the runtime and keeps it alive until the handle is
synchronized. A front end converts its tensors to NumPy arrays and back, and adds only what is
idiomatic for its framework (gradients, graph mode, pytrees).

Semantics, names and errors are those of dadt.torch: collectives are keyed by name (generated
from a per-op counter when None, so ranks calling in the same order agree), a name is refused
while the runtime still runs a collective of that name on this rank (dadt.common.in_flight), and runtime failures raise
TensorMismatchError, ValueError or DadtInternalError with the runtime's message.
"""

import hashlib
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from dadt.common import dlpack
from dadt.common.basics import _core, call, on_new_incarnation, wait_all
from dadt.common.exceptions import DadtInternalError
from dadt.common import in_flight
from dadt.common.in_flight import InFlightNames
from dadt.common.process_sets import enqueue_kwargs, set_id
from dadt.common.util import collective_name, message_name
from dadt.common.util import (NOT_INITIALIZED, OP_ALLGATHER, OP_ALLREDUCE, OP_ALLTOALL,
                              OP_BARRIER, OP_BROADCAST, OP_JOIN, OP_NEIGHBOR_ALLGATHER,
                              OP_PEER_EXCHANGE, OP_REDUCESCATTER, Adasum, Average, Max, Min, Product,
                              Sum)

# Adasum: the runtime checks the dtype (floating point) and the collective (allreduce).
_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max",
             Product: "Product"}


class _Entry:
    """What one handle of this layer stands for: runtime handles, names, live buffers, result."""

    __slots__ = ("handles", "names", "keep", "result")

    def __init__(self, handles: List[int], names: List[str], keep: List[Any],
                 result: Callable[[List[int]], Any]):
        self.handles, self.names, self.keep, self.result = handles, names, keep, result


_entries: Dict[int, _Entry] = {}
_in_flight = InFlightNames()  # names the runtime still runs (Horovod's rule)


@on_new_incarnation
def _forget_previous_incarnation() -> None:
    # A handle of an earlier incarnation is then unknown here (ValueError), as after synchronize().
    _entries.clear()
    _in_flight.clear()
# '<op>.noname.<n>' for name=None; one counter per op shared with every front end.
make_name = collective_name


def as_array(value: Any, name: str) -> np.ndarray:
    """A C-contiguous NumPy array over ``value`` (no copy when it already is one); raises
    ValueError naming the tensor for a dtype dadt does not reduce or move."""
    array = value if type(value) is np.ndarray else np.asarray(value)
    if not array.flags.c_contiguous:  # (np.ascontiguousarray would turn 0-d arrays into 1-d)
        array = array.copy(order="C")
    if dlpack.dlpack_type(array.dtype) is None:
        raise ValueError("tensor '%s' has dtype %s, which dadt does not support; use one of %s"
                         % (name, array.dtype, ", ".join(dlpack.SUPPORTED_DTYPE_NAMES)))
    return array


def _check_reduction(array: np.ndarray, name: str, op: int, prescale: float,
                     postscale: float) -> None:
    if op not in _OP_NAMES:
        raise ValueError("tensor '%s': unknown reduce op %r; use Average, Sum, Adasum, Min, Max "
                         "or Product" % (name, op))
    if array.dtype.kind == "b" and (op == Average or prescale != 1.0 or postscale != 1.0):
        raise ValueError("tensor '%s' is bool: Average and scale factors are not defined for "
                         "bool; use Sum or Max (logical or) or Min or Product (logical and)" % name)


def _submit(op_type: int, name: str, array: Optional[np.ndarray], output: Optional[np.ndarray],
            keep: List[Any], **desc: Any) -> int:
    """Enqueues one collective; appends what must outlive it to ``keep``; returns its handle."""
    if not _core.is_initialized():
        raise ValueError(NOT_INITIALIZED)
    set_kwargs = enqueue_kwargs(desc.get("process_set"))
    name_key = in_flight.key(name, set_kwargs.get("process_set_id", 0))
    _in_flight.check(name_key)
    source = sink = None
    if array is not None:
        source, held = dlpack.to_capsule(array, writable=output is array)
        keep.append(held)
    if output is array:
        sink = source
    elif output is not None:
        sink, held = dlpack.to_capsule(output, writable=True)
        keep.append(held)
    point_to_point = {k: desc[k] for k in ("send_ranks", "recv_ranks", "withdraw") if k in desc}
    handle = call(_core.enqueue, op_type, name, source, sink, int(desc.get("reduce_op", Average)),
                  float(desc.get("prescale", 1.0)), float(desc.get("postscale", 1.0)),
                  int(desc.get("root_rank", 0)), desc.get("splits"), desc.get("group_id", -1),
                  desc.get("group_size", 0), **set_kwargs, **point_to_point)
    _in_flight.add(name_key, handle)
    keep.append(source)
    keep.append(sink)
    return handle


def _track(handles: List[int], names: List[str], keep: List[Any],
           result: Callable[[List[int]], Any], process_set=None) -> int:
    keys = [in_flight.key(n, set_id(process_set)) for n in names]  # as _submit added them
    _entries[handles[0]] = _Entry(handles, keys, keep, result)
    return handles[0]


def _take(handle: int) -> np.ndarray:
    capsule = _core.take_output(handle)
    if capsule is None:
        raise DadtInternalError("the runtime returned no output for handle %d" % handle)
    return dlpack.to_array(capsule)


# ----------------------------------------------------------------------------------------------
# Asynchronous collectives: each returns a handle for poll() / synchronize().
# ----------------------------------------------------------------------------------------------

def allreduce_async(value: Any, name: Optional[str] = None, op: int = Average,
                    prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    process_set=None) -> int:
    """Reduces ``value`` over all ranks into a new array; synchronize() returns it."""
    name = make_name("allreduce", name, process_set)
    array = as_array(value, name)
    _check_reduction(array, name, op, prescale_factor, postscale_factor)
    output = dlpack.aligned_empty(array.shape, array.dtype)
    keep: List[Any] = []
    handle = _submit(OP_ALLREDUCE, name, array, output, keep, reduce_op=op,
                     prescale=prescale_factor, postscale=postscale_factor,
                     process_set=process_set)
    return _track([handle], [name], keep, lambda hs: output, process_set)


def grouped_allreduce_async(values: Sequence[Any], name: Optional[str] = None, op: int = Average,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set=None) -> int:
    """Reduces a list of arrays as one fused collective (members ``'<name>.<i>'``);
    synchronize() returns the list of results."""
    names, arrays = _group_members(values, "grouped_allreduce", name, process_set)
    # Everything the runtime could refuse is checked before any member is enqueued: a refused
    # member would leave the others waiting for a group that never completes.
    for array, member in zip(arrays, names):
        _check_reduction(array, member, op, prescale_factor, postscale_factor)
    _check_not_in_flight(names, process_set)
    digest = hashlib.blake2b("\0".join(names).encode(), digest_size=8).digest()
    group_id = int.from_bytes(digest, "little") & (2**63 - 1)
    outputs = [dlpack.aligned_empty(a.shape, a.dtype) for a in arrays]
    keep: List[Any] = []
    handles = [_submit(OP_ALLREDUCE, member, array, output, keep, reduce_op=op,
                       prescale=prescale_factor, postscale=postscale_factor, group_id=group_id,
                       group_size=len(arrays), process_set=process_set)
               for array, output, member in zip(arrays, outputs, names)]
    return _track(handles, names, keep, lambda hs: outputs, process_set)


def allgather_async(value: Any, name: Optional[str] = None, process_set=None) -> int:
    """Concatenates every rank's array on the first dimension; synchronize() returns it."""
    name = make_name("allgather", name, process_set)
    keep: List[Any] = []
    handle = _submit(OP_ALLGATHER, name, as_array(value, name), None, keep,
                     process_set=process_set)
    return _track([handle], [name], keep, lambda hs: _take(hs[0]), process_set)


def grouped_allgather_async(values: Sequence[Any], name: Optional[str] = None,
                            process_set=None) -> int:
    """Allgathers a list of arrays under one handle (members ``'<name>.<i>'``); synchronize()
    returns the list of results."""
    names, arrays = _group_members(values, "grouped_allgather", name, process_set)
    _check_not_in_flight(names, process_set)
    return _submit_group_taking_outputs(OP_ALLGATHER, names, arrays, process_set)


def grouped_reducescatter_async(values: Sequence[Any], name: Optional[str] = None,
                                op: int = Average, prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0, process_set=None) -> int:
    """Reducescatters a list of arrays under one handle (members ``'<name>.<i>'``);
    synchronize() returns the list of this rank's blocks."""
    names, arrays = _group_members(values, "grouped_reducescatter", name, process_set)
    for array, member in zip(arrays, names):
        _check_reduction(array, member, op, prescale_factor, postscale_factor)
    _check_not_in_flight(names, process_set)
    return _submit_group_taking_outputs(OP_REDUCESCATTER, names, arrays, process_set, reduce_op=op,
                                        prescale=prescale_factor, postscale=postscale_factor)


def _group_members(values: Sequence[Any], collective: str, name: Optional[str],
                   process_set) -> Tuple[List[str], List[Any]]:
    """The members of a grouped collective: their names ``'<name>.<i>'`` and their arrays."""
    values = list(values)
    if not values:
        raise ValueError("%s needs at least one tensor" % collective.replace("_", " "))
    base = make_name(collective, name, process_set)
    names = ["%s.%d" % (base, i) for i in range(len(values))]
    return names, [as_array(v, n) for v, n in zip(values, names)]


def _submit_group_taking_outputs(op_type: int, names: Sequence[str], arrays: Sequence[Any],
                                 process_set, **submit_args) -> int:
    """Enqueues every member (the runtime allocates each output) under one handle whose result
    is the list of outputs."""
    keep: List[Any] = []
    handles = [_submit(op_type, n, a, None, keep, process_set=process_set, **submit_args)
               for a, n in zip(arrays, names)]
    return _track(handles, names, keep, lambda hs: [_take(h) for h in hs], process_set)


def _check_not_in_flight(names: Sequence[str], process_set) -> None:
    # Checked before any member is enqueued, so that a refusal leaves nothing half-submitted (an
    # unregistered set included).
    set_id_ = set_id(process_set)
    for member in names:
        _in_flight.check(in_flight.key(member, set_id_))


def broadcast_async(value: Any, root_rank: int, name: Optional[str] = None,
                    process_set=None) -> int:
    """Copies root rank's array to every rank (into a new array); synchronize() returns it.
    ``root_rank`` is a global rank (a member of ``process_set``)."""
    name = make_name("broadcast", name, process_set)
    array = as_array(value, name)
    output = dlpack.aligned_empty(array.shape, array.dtype)
    output[...] = array
    keep: List[Any] = []
    handle = _submit(OP_BROADCAST, name, output, output, keep, root_rank=root_rank,
                     process_set=process_set)
    return _track([handle], [name], keep, lambda hs: output, process_set)


def _splits(splits: Any) -> Optional[List[int]]:
    if splits is None:
        return None
    array = np.asarray(splits)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise ValueError("splits must be a 1-D integer tensor or a list of ints")
    return [int(s) for s in array]


def alltoall_async(value: Any, splits: Any = None, name: Optional[str] = None,
                   process_set=None) -> int:
    """Sends row blocks of ``value`` to each rank (``splits`` rows to rank i; equal parts when
    None); synchronize() returns (output, received_splits as int32 array)."""
    name = make_name("alltoall", name, process_set)
    keep: List[Any] = []
    handle = _submit(OP_ALLTOALL, name, as_array(value, name), None, keep,
                     splits=_splits(splits), process_set=process_set)

    def result(hs):
        received = np.asarray(_core.received_splits(hs[0]), dtype=np.int32)
        return _take(hs[0]), received
    return _track([handle], [name], keep, result, process_set)


def reducescatter_async(value: Any, name: Optional[str] = None, op: int = Average,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                        process_set=None) -> int:
    """Reduces ``value`` over all ranks and returns this rank's block of rows (lower ranks get
    one more row when the first dimension does not divide evenly)."""
    name = make_name("reducescatter", name, process_set)
    array = as_array(value, name)
    _check_reduction(array, name, op, prescale_factor, postscale_factor)
    keep: List[Any] = []
    handle = _submit(OP_REDUCESCATTER, name, array, None, keep, reduce_op=op,
                     prescale=prescale_factor, postscale=postscale_factor,
                     process_set=process_set)
    return _track([handle], [name], keep, lambda hs: _take(hs[0]), process_set)


# ----------------------------------------------------------------------------------------------
# Point to point (dadt.torch.p2p has the same on torch tensors; docs/api.md, "Point to point and
# gossip"). Graphs: dadt.common.topology.
# ----------------------------------------------------------------------------------------------

def send_async(value: Any, dst: int, name: Optional[str] = None) -> int:
    """Sends ``value`` to rank ``dst``; synchronize() returns None once it is handed over."""
    array = as_array(value, name or "send")
    name = name if name is not None else message_name(_core.rank(), int(dst))
    keep: List[Any] = []
    h = _submit(OP_PEER_EXCHANGE, name, array, None, keep, send_ranks=[int(dst)])
    return _track([h], [name], keep, lambda hs: None)


def recv_async(like: Any, src: int, name: Optional[str] = None) -> int:
    """Receives from rank ``src`` an array of ``like``'s dtype and shape; synchronize() returns it."""
    out = np.empty_like(as_array(like, name or "recv"))
    name = name if name is not None else message_name(int(src), _core.rank())
    keep: List[Any] = []
    h = _submit(OP_PEER_EXCHANGE, name, out, out, keep, recv_ranks=[int(src)])
    return _track([h], [name], keep, lambda hs: out)


def exchange_async(value: Any, peers: Sequence[int], name: str) -> int:
    """Swaps ``value`` with one rank of ``peers`` (the coordinator's match); synchronize()
    returns (the partner's array, its rank), or (an unfilled array, -1) when withdrawn."""
    array = as_array(value, name)
    peers = [int(p) for p in peers]
    if not peers:
        raise ValueError("exchange_async of %r: peers is empty; name at least one rank" % name)
    out = np.empty_like(array)
    keep: List[Any] = []
    h = _submit(OP_PEER_EXCHANGE, name, array, out, keep, send_ranks=peers, recv_ranks=peers)
    return _track([h], [name], keep, lambda hs: (out, int(_core.int_result(hs[0]))))


def withdraw_exchange(name: str) -> None:
    """Withdraws this rank's pending exchange_async of ``name`` if it has no partner yet."""
    withdrawal = name + _core.WITHDRAW_SUFFIX
    keep: List[Any] = []
    h = _submit(OP_PEER_EXCHANGE, withdrawal, None, None, keep, withdraw=True)
    synchronize(_track([h], [withdrawal], keep, lambda hs: None))


def neighbor_allgather_async(value: Any, send_ranks: Sequence[int], recv_ranks: Sequence[int],
                             name: Optional[str] = None) -> int:
    """Every rank sends ``value`` to ``send_ranks`` and gets ``recv_ranks``' arrays back,
    concatenated on the first dimension in that order (a collective over a graph every rank must
    agree on)."""
    name = make_name("neighbor_allgather", name)
    array = as_array(value, name)
    rows = array.reshape((1,) + array.shape) if array.ndim == 0 else array
    recv_ranks = [int(r) for r in recv_ranks]
    out = np.empty((len(recv_ranks) * rows.shape[0],) + rows.shape[1:], dtype=array.dtype)
    keep: List[Any] = [rows]
    h = _submit(OP_NEIGHBOR_ALLGATHER, name, np.ascontiguousarray(rows), out, keep,
                send_ranks=[int(r) for r in send_ranks], recv_ranks=recv_ranks)
    return _track([h], [name], keep, lambda hs: out)


def send(value: Any, dst: int, name: Optional[str] = None) -> None:
    synchronize(send_async(value, dst, name))


def recv(like: Any, src: int, name: Optional[str] = None) -> np.ndarray:
    return synchronize(recv_async(like, src, name))


def neighbor_allgather(value: Any, send_ranks: Sequence[int], recv_ranks: Sequence[int],
                       name: Optional[str] = None) -> np.ndarray:
    return synchronize(neighbor_allgather_async(value, send_ranks, recv_ranks, name))


def pending_handle(name: str) -> Optional[int]:
    """The handle of this rank's in-flight collective named ``name`` (None when there is none)."""
    handle = _in_flight.handle(name)
    if handle is None:
        return None
    # A copy: TensorFlow runs graph-mode submits on several threads, which add entries.
    for first, entry in list(_entries.items()):
        if handle in entry.handles:
            return first
    return None


def poll(handle: int) -> bool:
    """True when the collective behind ``handle`` has completed (synchronize() will not block)."""
    entry = _entries.get(handle)
    if entry is None:
        raise ValueError("unknown dadt handle %r (already synchronized?)" % (handle,))
    return all(call(_core.poll, h) for h in entry.handles)


def synchronize(handle: int) -> Any:
    """Waits for the collective behind ``handle`` and returns its result (an array, a list of
    arrays for grouped allreduce, (output, received_splits) for alltoall, None for barrier)."""
    entry = _entries.get(handle)
    if entry is None:
        raise ValueError("unknown dadt handle %r (already synchronized?)" % (handle,))
    failure = wait_all(entry.handles)
    del _entries[handle]
    try:
        if failure is not None:
            raise failure from None
        return entry.result(entry.handles)
    finally:
        for h, n in zip(entry.handles, entry.names):
            _core.release(h)
            _in_flight.discard(n, h)


# ----------------------------------------------------------------------------------------------
# Blocking forms.
# ----------------------------------------------------------------------------------------------

def allreduce(value: Any, name: Optional[str] = None, op: int = Average,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set=None) -> np.ndarray:
    return synchronize(allreduce_async(value, name, op, prescale_factor, postscale_factor,
                                       process_set))


def grouped_allreduce(values: Sequence[Any], name: Optional[str] = None, op: int = Average,
                      prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0, process_set=None) -> List[np.ndarray]:
    return synchronize(grouped_allreduce_async(values, name, op, prescale_factor,
                                               postscale_factor, process_set))


def allgather(value: Any, name: Optional[str] = None, process_set=None) -> np.ndarray:
    return synchronize(allgather_async(value, name, process_set))


def broadcast(value: Any, root_rank: int, name: Optional[str] = None,
              process_set=None) -> np.ndarray:
    return synchronize(broadcast_async(value, root_rank, name, process_set))


def alltoall(value: Any, splits: Any = None, name: Optional[str] = None,
             process_set=None) -> Tuple[np.ndarray, np.ndarray]:
    return synchronize(alltoall_async(value, splits, name, process_set))


def reducescatter(value: Any, name: Optional[str] = None, op: int = Average,
                  prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                  process_set=None) -> np.ndarray:
    return synchronize(reducescatter_async(value, name, op, prescale_factor, postscale_factor,
                                           process_set))


def barrier(process_set=None) -> None:
    """Returns once every rank of ``process_set`` (default: the job) has reached it."""
    name = make_name("barrier", None, process_set)
    keep: List[Any] = []
    synchronize(_track([_submit(OP_BARRIER, name, None, None, keep, process_set=process_set)],
                       [name], keep, lambda hs: None, process_set))


def join() -> int:
    """Marks this rank as out of data (it joins the other ranks' allreduces with zeros) and
    blocks until every rank joined; returns the rank that joined last."""
    name = make_name("join", None)
    keep: List[Any] = []
    handle = _submit(OP_JOIN, name, None, None, keep)
    return synchronize(_track([handle], [name], keep, lambda hs: int(_core.int_result(hs[0]))))


# ----------------------------------------------------------------------------------------------
# Python objects, pickled into uint8 arrays.
# ----------------------------------------------------------------------------------------------

def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None,
                     process_set=None) -> Any:
    """Pickles ``obj`` on root rank (a global rank) and returns it, unpickled, on every rank of
    ``process_set``."""
    import pickle
    from dadt.common.basics import rank
    name = make_name("broadcast_object", name, process_set)
    is_root = rank() == root_rank
    data = (np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
            if is_root else np.zeros(0, np.uint8))
    length = broadcast(np.array([data.size], np.int64), root_rank, name + ".sz", process_set)
    if not is_root:
        data = np.zeros(int(length[0]), np.uint8)
    data = broadcast(data, root_rank, name + ".t", process_set)
    return obj if is_root else pickle.loads(data.tobytes())


def allgather_object(obj: Any, name: Optional[str] = None, process_set=None) -> List[Any]:
    """Pickles ``obj`` on every rank of ``process_set`` and returns the list of their objects, in
    rank order."""
    import pickle
    name = make_name("allgather_object", name, process_set)
    data = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    sizes = allgather(np.array([data.size], np.int64), name + ".sz", process_set)
    gathered = allgather(data, name + ".t", process_set)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return [pickle.loads(gathered[offsets[i]:offsets[i + 1]].tobytes())
            for i in range(len(sizes))]
