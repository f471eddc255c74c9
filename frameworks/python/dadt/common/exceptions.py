"""Exception types raised by dadt, and the mapping from the runtime's status codes.

Horovod scripts keep working: ``HorovodInternalError`` is an alias of :class:`DadtInternalError`.
"""

# Status codes of runtime/c_api.h (DADT_ERR_*).
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_MISMATCH = 2
ERR_PRECONDITION = 3
ERR_ABORTED = 4
ERR_TIMEOUT = 5
ERR_UNIMPLEMENTED = 6
ERR_INTERNAL = 7
ERR_REMOVED = 8


class DadtInternalError(RuntimeError):
    """Internal error raised when a collective fails because a peer or the backend failed
    (aborted, timed out, or an internal runtime error). The job cannot continue."""


# Horovod's name, for scripts that catch it.
HorovodInternalError = DadtInternalError


class WorkerRemovedError(SystemExit):
    """Elastic mode: init() found that the launcher removed this worker from the job (its host
    left the discovery script's list). A SystemExit with code 0, so that a removed worker ends
    cleanly wherever it is raised (the launcher never counts that exit as the job's end); ``except
    Exception`` does not catch it."""

    def __init__(self, message: str = "this worker was removed from the job"):
        super().__init__(0)
        self.message = message

    def __str__(self) -> str:
        return self.message


class TensorMismatchError(RuntimeError):
    """Ranks submitted the same tensor name with different dtype, shape, op or root rank."""


class DeviceMismatchError(ValueError, RuntimeError):
    """The members of one grouped collective are on different devices (CPU and GPU, or two GPUs).
    A ValueError, as dadt's other refusals of bad input are, and a RuntimeError, as Horovod's is."""


_CODE_TO_TYPE = {
    ERR_INVALID_ARGUMENT: ValueError,
    ERR_MISMATCH: TensorMismatchError,
    ERR_PRECONDITION: ValueError,
    ERR_ABORTED: DadtInternalError,
    ERR_TIMEOUT: DadtInternalError,
    ERR_UNIMPLEMENTED: NotImplementedError,
    ERR_INTERNAL: DadtInternalError,
    ERR_REMOVED: WorkerRemovedError,
}


# The error-class table shared by the front ends whose frameworks have typed errors (TensorFlow's
# tf.errors, as Horovod's TensorFlow ops raise them): each runtime status as a canonical
# (absl / gRPC) status code. A cross-rank mismatch is FAILED_PRECONDITION, bad input
# INVALID_ARGUMENT. The TensorFlow graph-mode kernel receives this table too
# (dadt/tensorflow/graph_ops.py), so eager and graph mode agree.
CANONICAL_INVALID_ARGUMENT = 3
CANONICAL_DEADLINE_EXCEEDED = 4
CANONICAL_FAILED_PRECONDITION = 9
CANONICAL_ABORTED = 10
CANONICAL_UNIMPLEMENTED = 12
CANONICAL_INTERNAL = 13
CANONICAL_CODES = {
    ERR_INVALID_ARGUMENT: CANONICAL_INVALID_ARGUMENT,
    ERR_MISMATCH: CANONICAL_FAILED_PRECONDITION,
    ERR_PRECONDITION: CANONICAL_FAILED_PRECONDITION,
    ERR_ABORTED: CANONICAL_ABORTED,
    ERR_TIMEOUT: CANONICAL_DEADLINE_EXCEEDED,
    ERR_UNIMPLEMENTED: CANONICAL_UNIMPLEMENTED,
    ERR_INTERNAL: CANONICAL_INTERNAL,
}


def from_core_error(error: BaseException) -> BaseException:
    """Returns the Python exception for a ``dadt._core.CoreError``; the message is kept verbatim
    and the runtime status is kept as ``dadt_code``."""
    code = getattr(error, "code", ERR_INTERNAL)
    message = getattr(error, "message", str(error))
    exc = _CODE_TO_TYPE.get(code, DadtInternalError)(message)
    exc.dadt_code = code
    return exc


def canonical_code(error: BaseException) -> int:
    """The canonical status code of an exception dadt raised: from its runtime status when it
    came from the runtime, else from its type (ValueError and TypeError: bad input)."""
    code = getattr(error, "dadt_code", None)
    if code in CANONICAL_CODES:
        return CANONICAL_CODES[code]
    if isinstance(error, TensorMismatchError):
        return CANONICAL_FAILED_PRECONDITION
    if isinstance(error, (ValueError, TypeError)):
        return CANONICAL_INVALID_ARGUMENT
    if isinstance(error, NotImplementedError):
        return CANONICAL_UNIMPLEMENTED
    return CANONICAL_INTERNAL
