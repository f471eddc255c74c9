"""Collectives inside a TensorFlow graph (tf.function, tf.compat.v1 Session.run), without ever
holding one of TensorFlow's threads while a collective waits for its partners.

Each collective is three ops (docs/frameworks.md, "Graph-mode execution"):

1. *submit*: a stateful ``tf.numpy_function`` that enqueues the collective through
   dadt.common.array_ops and returns its handle (an int64 scalar) at once;
2. *await*: ``DadtAwait`` (await_op.cc), a TensorFlow AsyncOpKernel that waits for the handle on
   a thread of its own, so TensorFlow's inter-op threads (as many as cores by default) stay free
   to run every other submit of the graph; it fails with the collective's ``tf.errors`` class;
3. *take*: a stateful ``tf.numpy_function`` that collects the completed result.

A blocking op in one piece deadlocks as soon as a graph has more collectives pending than
TensorFlow has threads: every thread waits for a partner op that never gets one.

The kernel is compiled on first use with ``tf.sysconfig``'s flags (about 7 s, once per
TensorFlow version) into ``$DADT_TF_OPS_DIR`` (default ``~/.cache/dadt``) by the C++ compiler
``$CXX`` (default ``g++``); ranks starting together build it once, under a file lock.
"""

import ctypes
import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
from typing import Any, Callable, List, Sequence

import numpy as np
import tensorflow as tf

from dadt.common import array_ops
from dadt.common.basics import _core
from dadt.common.exceptions import CANONICAL_CODES
from dadt.tensorflow.errors import to_tf_error

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "await_op.cc")
_lock = threading.Lock()
_module = None
# Handles submitted by graph ops whose take has not run yet.
_graph_handles: set = set()


def _library_path(flags: List[str]) -> str:
    with open(_SOURCE, "rb") as f:
        source = f.read()
    key = hashlib.sha256(source + tf.__version__.encode() + " ".join(flags).encode()
                         + sys.version.encode()).hexdigest()[:16]
    root = os.environ.get("DADT_TF_OPS_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "dadt")
    return os.path.join(root, "dadt_tf_await-%s.so" % key)


def _build(path: str, flags: List[str]) -> None:
    """Compiles await_op.cc into ``path`` (atomically; one rank builds, the others wait)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(path):
            return
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(path))
        os.close(fd)
        compiler = os.environ.get("CXX", "g++")
        command = [compiler, "-shared", "-fPIC", "-O2", "-w", _SOURCE, "-o", tmp] + flags
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as e:
            os.unlink(tmp)
            raise RuntimeError("dadt.tensorflow graph mode builds its TensorFlow op with a C++ "
                               "compiler, and running %r failed: %s (set CXX to a C++17 "
                               "compiler)" % (compiler, e)) from None
        if done.returncode != 0:
            os.unlink(tmp)
            raise RuntimeError("dadt.tensorflow graph mode could not build its TensorFlow op:\n"
                               "%s\n%s" % (" ".join(command), done.stderr[-4000:]))
        os.replace(tmp, path)


def _ops():
    """The loaded op library (built on first use), configured with the runtime's wait function
    and the status table."""
    global _module
    with _lock:
        if _module is None:
            flags = tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags()
            path = _library_path(flags)
            if not os.path.exists(path):
                _build(path, flags)
            module = tf.load_op_library(path)
            wait_for = ctypes.CDLL(_core.__file__).dadt_wait_for
            count = max(CANONICAL_CODES) + 1
            table = (ctypes.c_int * count)(*[CANONICAL_CODES.get(i, 0) for i in range(count)])
            ctypes.CDLL(path).dadt_tf_configure(ctypes.cast(wait_for, ctypes.c_void_p), table,
                                                count)
            _module = module
    return _module


def prepare() -> None:
    """Builds and loads the op library now (graph construction calls it; so may a script that
    wants the build out of its first step)."""
    _ops()


def _reap(names: Sequence[str]) -> None:
    """Releases collectives of these names that an earlier run of a graph submitted but never
    took (the run failed in between); a collective still pending keeps its name in flight."""
    for name in names:
        handle = array_ops.pending_handle(name)
        if handle in _graph_handles and array_ops.poll(handle):
            _graph_handles.discard(handle)
            try:
                array_ops.synchronize(handle)
            except Exception:  # noqa: BLE001 - the failure was reported by the run that failed
                pass


@tf.autograph.experimental.do_not_convert
def run(submit: Callable[..., int], result: Callable[[Any], List[np.ndarray]],
        names: Sequence[str], inputs: Sequence[tf.Tensor], dtypes: Sequence[tf.DType],
        shapes: Sequence[tf.TensorShape]) -> List[tf.Tensor]:
    """Adds submit -> await -> take to the current graph. ``submit`` (NumPy arrays -> array_ops
    handle) enqueues, ``result`` turns array_ops.synchronize's value into the list of outputs;
    ``names`` are the runtime names the collective uses."""
    ops = _ops()
    names = list(names)

    def submit_op(*arrays):
        _reap(names)
        try:
            handle = submit(*arrays)
        except Exception as e:  # noqa: BLE001 - surfaces as the op's tf.errors class
            raise _as_py_func_error(e) from None
        _graph_handles.add(handle)
        return np.int64(handle)

    def take_op(handle):
        handle = int(handle)
        _graph_handles.discard(handle)
        try:
            return result(array_ops.synchronize(handle))
        except Exception as e:  # noqa: BLE001
            raise _as_py_func_error(e) from None

    handle = tf.numpy_function(submit_op, list(inputs), tf.int64, stateful=True,
                               name="dadt_submit")
    handle.set_shape([])
    done = ops.dadt_await(handle)
    outs = tf.numpy_function(take_op, [done], list(dtypes), stateful=True, name="dadt_take")
    for out, shape in zip(outs, shapes):
        out.set_shape(shape)
    return list(outs)


def _as_py_func_error(error: BaseException) -> BaseException:
    """tf.numpy_function turns ValueError into InvalidArgumentError and NotImplementedError into
    UnimplementedError, every other Python exception into UnknownError; errors raised before the
    await (bad input) are bad arguments, so they travel as ValueError."""
    error = to_tf_error(error)
    if isinstance(error, tf.errors.InvalidArgumentError):
        return ValueError(str(error))
    return error
