"""NumPy arrays to and from DLPack capsules, for the front ends that hand dadt NumPy buffers.

``dadt._core`` takes tensors as "dltensor" capsules. NumPy's own ``__dlpack__`` refuses the dtypes
that machine-learning frameworks add through ml_dtypes (bfloat16) and read-only arrays (JAX and
TensorFlow hand out read-only views of their buffers), so ``to_capsule`` has ``dadt._core`` build
the capsule over the array's buffer (``_core.buffer_capsule``: the buffer protocol, in C++, a
microsecond): the capsule holds the array until it is freed, and the caller keeps it alive until
the collective completes. The runtime only reads an input capsule and writes an output one.

Outputs that the runtime allocates (allgather, alltoall, reducescatter) come back as capsules;
``to_array`` wraps their memory in a NumPy array without a copy and frees it (through the
capsule's deleter) when the last view of the array goes away.

These functions sit on every collective's path: dtypes are looked up by dtype object (a dict, not
``dtype.name``, which costs microseconds), and nothing here allocates more than it returns.
"""

import ctypes
import math
from typing import Any, Dict, Optional, Tuple

import numpy as np

from dadt.common.basics import _core

# DLPack type codes (dlpack.h); bool is 6 since DLPack 0.8.
_INT, _UINT, _FLOAT, _BFLOAT, _BOOL = 0, 1, 2, 4, 6

_CAPSULE_NAME = b"dltensor"
_USED_CAPSULE_NAME = b"used_dltensor"  # module constants: capsule names must outlive capsules


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32),
                ("dtype", _DataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _ManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_ManagedTensor))
_ManagedTensor._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p),
                           ("deleter", _Deleter)]

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_set_name = ctypes.pythonapi.PyCapsule_SetName
_capsule_set_name.restype = ctypes.c_int
_capsule_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]

# NumPy dtype name -> (DLPack code, bits). bfloat16 is ml_dtypes' extension type.
_CODES = {
    "uint8": (_UINT, 8), "int8": (_INT, 8), "int16": (_INT, 16), "uint16": (_UINT, 16),
    "int32": (_INT, 32), "int64": (_INT, 64),
    "float16": (_FLOAT, 16), "bfloat16": (_BFLOAT, 16), "float32": (_FLOAT, 32),
    "float64": (_FLOAT, 64), "bool": (_BOOL, 8),
}
SUPPORTED_DTYPE_NAMES = tuple(_CODES)
_NAMES = {code: name for name, code in _CODES.items()}


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype called ``name`` (one of SUPPORTED_DTYPE_NAMES); bfloat16 from ml_dtypes."""
    if name == "bfloat16":
        import ml_dtypes  # installed with TensorFlow and JAX
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


# dtype -> (DLPack code, bits), filled on first use of each dtype (bfloat16 without importing
# ml_dtypes here); None for a dtype dadt does not support.
_BY_DTYPE: Dict[np.dtype, Optional[Tuple[int, int]]] = {}


def dlpack_type(dtype: np.dtype) -> Optional[Tuple[int, int]]:
    """(DLPack type code, bits) of a NumPy dtype, or None when dadt does not support it."""
    try:
        return _BY_DTYPE[dtype]
    except KeyError:
        found = _BY_DTYPE[dtype] = _CODES.get(dtype.name)
        return found


def is_supported(dtype: np.dtype) -> bool:
    return dlpack_type(dtype) is not None


def to_capsule(array: np.ndarray, writable: bool = False) -> Tuple[Any, Any]:
    """Returns (capsule, keep): an unconsumed "dltensor" capsule over ``array``'s memory (which
    must be C-contiguous, on the CPU, of a supported dtype; writable when ``writable``, for an
    output) and what must stay alive while the runtime may read or write it."""
    code, bits = dlpack_type(array.dtype)
    return _core.buffer_capsule(array, code, bits, writable), array


ALIGNMENT = 64  # bytes; what TensorFlow's kernels (Eigen) and XLA expect of a tensor's memory


def aligned_empty(shape: Tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised C-contiguous array whose memory starts on an ALIGNMENT-byte boundary, so
    that frameworks can use it in place (NumPy itself only guarantees 16 bytes)."""
    dtype = np.dtype(dtype)
    raw = np.empty(math.prod(shape) * dtype.itemsize + ALIGNMENT, np.uint8)
    return np.ndarray(shape, dtype, raw, -raw.ctypes.data % ALIGNMENT)


def is_aligned(array: np.ndarray) -> bool:
    return array.ctypes.data % ALIGNMENT == 0


def export(array: np.ndarray) -> Any:
    """A "dltensor" capsule that owns a reference to ``array`` (writable, C-contiguous), for a
    framework's from_dlpack (zero copy): NumPy's own export, with the dtype code fixed for
    bfloat16 (exported as uint16, which has the same bits)."""
    if dlpack_type(array.dtype) != (_BFLOAT, 16):
        return array.__dlpack__()
    capsule = array.view(np.uint16).__dlpack__()
    managed = ctypes.cast(_capsule_pointer(capsule, _CAPSULE_NAME), ctypes.POINTER(_ManagedTensor))
    managed.contents.dl_tensor.dtype.code = _BFLOAT
    return capsule


class _Owner:
    """Frees a runtime-allocated DLManagedTensor when the last array over its memory goes."""

    __slots__ = ("managed",)

    def __init__(self, managed):
        self.managed = managed

    def __del__(self):
        deleter = self.managed.contents.deleter
        if deleter:
            deleter(self.managed)


def to_array(capsule: Any) -> np.ndarray:
    """Consumes a "dltensor" capsule from ``dadt._core.take_output`` and returns a NumPy array
    over its memory (no copy); the memory is freed with the array."""
    address = _capsule_pointer(capsule, _CAPSULE_NAME)
    managed = ctypes.cast(address, ctypes.POINTER(_ManagedTensor))
    _capsule_set_name(capsule, _USED_CAPSULE_NAME)  # ours now: the capsule no longer frees it
    owner = _Owner(managed)
    t = managed.contents.dl_tensor
    dtype = numpy_dtype(_NAMES[(t.dtype.code, t.dtype.bits)])
    shape = tuple(t.shape[i] for i in range(t.ndim))
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0 or not t.data:
        return np.empty(shape, dtype)  # `owner` frees the runtime's (empty) tensor on return
    buf = (ctypes.c_uint8 * (count * dtype.itemsize)).from_address(t.data + t.byte_offset)
    buf._dadt_owner = owner  # freed with `buf`, which the array's base keeps alive
    return np.frombuffer(buf, dtype=dtype).reshape(shape)
