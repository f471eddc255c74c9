"""dadt's exceptions as TensorFlow's error classes, as Horovod's TensorFlow ops raise them.

A collective that fails raises the ``tf.errors`` class of its status (the table in
dadt.common.exceptions): a cross-rank mismatch of shape, dtype or root rank is
``tf.errors.FailedPreconditionError``, bad input (invalid alltoall splits, a name already in
flight) ``tf.errors.InvalidArgumentError``, a job shut down by a peer ``tf.errors.AbortedError``,
in eager and in graph mode. Eagerly the exception is also an instance of the dadt type it stands
for (TensorMismatchError, ValueError, DadtInternalError), so code written against either keeps
working.
"""

from typing import Dict, Tuple, Type

import tensorflow as tf

from dadt.common import exceptions as _codes
from dadt.common.exceptions import canonical_code

# Canonical status code -> tf.errors class (TensorFlow's codes are the canonical ones).
_TF_TYPES = {
    _codes.CANONICAL_INVALID_ARGUMENT: tf.errors.InvalidArgumentError,
    _codes.CANONICAL_DEADLINE_EXCEEDED: tf.errors.DeadlineExceededError,
    _codes.CANONICAL_FAILED_PRECONDITION: tf.errors.FailedPreconditionError,
    _codes.CANONICAL_ABORTED: tf.errors.AbortedError,
    _codes.CANONICAL_UNIMPLEMENTED: tf.errors.UnimplementedError,
    _codes.CANONICAL_INTERNAL: tf.errors.InternalError,
}
_types: Dict[Tuple[type, type], type] = {}


def _combined(dadt_type: Type[BaseException], tf_type: type) -> type:
    key = (dadt_type, tf_type)
    if key not in _types:
        def __init__(self, message):
            tf_type.__init__(self, None, None, message)

        def __reduce__(self):
            return (type(self), (self.message,))
        # tf_type first: str(), .message and .error_code are TensorFlow's.
        _types[key] = type(dadt_type.__name__, (tf_type, dadt_type),
                           {"__init__": __init__, "__reduce__": __reduce__,
                            "__module__": __name__})
    return _types[key]


def to_tf_error(error: BaseException) -> BaseException:
    """``error`` (raised by dadt) as an instance of the matching ``tf.errors.OpError`` subclass
    that is also an instance of ``type(error)``; OpErrors are returned unchanged."""
    if isinstance(error, tf.errors.OpError):
        return error
    tf_type = _TF_TYPES.get(canonical_code(error), tf.errors.InternalError)
    try:
        converted = _combined(type(error), tf_type)(str(error))
    except TypeError:  # a type that cannot be combined (layout conflict): TensorFlow's alone
        converted = tf_type(None, None, str(error))
    if hasattr(error, "dadt_code"):
        converted.dadt_code = error.dadt_code
    return converted
