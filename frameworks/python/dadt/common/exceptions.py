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


class DadtInternalError(RuntimeError):
    """Internal error raised when a collective fails because a peer or the backend failed
    (aborted, timed out, or an internal runtime error). The job cannot continue."""


# Horovod's name, for scripts that catch it.
HorovodInternalError = DadtInternalError


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
}


def from_core_error(error: BaseException) -> BaseException:
    """Returns the Python exception for a ``dadt._core.CoreError``; the message is kept verbatim."""
    code = getattr(error, "code", ERR_INTERNAL)
    message = getattr(error, "message", str(error))
    return _CODE_TO_TYPE.get(code, DadtInternalError)(message)
