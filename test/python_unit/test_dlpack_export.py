"""The NumPy-to-framework plumbing under dadt.tensorflow, dadt.keras and dadt.jax, without a runtime:
the DLPack capsules that dadt.common.dlpack builds over NumPy buffers (``_core.buffer_capsule``),
the 64-byte-aligned outputs, and dadt.jax's results (made by jaxlib's device_put) against
``jnp.asarray``, whose semantics they keep.

Capsules are read back through torch.from_dlpack, an independent consumer: it checks the dtype code,
the shape and the data pointer that the runtime would see, and frees the capsule's tensor through
its deleter.
"""
import gc
import sys

import numpy as np
import pytest

from dadt.common import dlpack

torch = pytest.importorskip("torch", reason="torch reads the capsules back")
ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 comes from ml_dtypes (with TF and JAX)")

DTYPES = ["uint8", "int8", "int16", "uint16", "int32", "int64", "float16", "bfloat16", "float32",
          "float64", "bool"]
SHAPES = [(), (0,), (7,), (3, 5), (2, 0, 3)]


def _array(dtype, shape, writeable):
    np_dtype = dlpack.numpy_dtype(dtype)
    a = (np.arange(int(np.prod(shape))) % 5).astype(np.float64).astype(np_dtype).reshape(shape)
    a.flags.writeable = writeable
    return a


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("writeable", [False, True])
def test_capsule_describes_the_buffer(dtype, shape, writeable):
    a = _array(dtype, shape, writeable)
    capsule, keep = dlpack.to_capsule(a)
    assert keep is a
    t = torch.from_dlpack(capsule)
    assert tuple(t.shape) == shape
    assert str(t.dtype) == "torch." + dtype
    if a.size:
        assert t.data_ptr() == a.ctypes.data  # the array's own memory, no copy
        want = a.astype(np.float32) if dtype == "bfloat16" else a
        assert np.array_equal(t.float().numpy() if dtype == "bfloat16" else t.numpy(), want)


def test_capsule_holds_the_array_until_freed():
    a = np.arange(6, dtype=np.float32)
    before = sys.getrefcount(a)
    capsule = dlpack.to_capsule(a)[0]
    assert sys.getrefcount(a) == before + 1
    del capsule
    gc.collect()
    assert sys.getrefcount(a) == before
    t = torch.from_dlpack(dlpack.to_capsule(a)[0])  # consumed: the tensor holds it now
    assert sys.getrefcount(a) == before + 1
    del t
    gc.collect()
    assert sys.getrefcount(a) == before


def test_output_capsule_needs_a_writable_buffer():
    a = np.zeros(4, np.float32)
    a.flags.writeable = False
    with pytest.raises((ValueError, BufferError), match="read-only"):
        dlpack.to_capsule(a, writable=True)
    a = np.zeros(4, np.float32)
    torch.from_dlpack(dlpack.to_capsule(a, writable=True)[0]).fill_(3)
    assert (a == 3).all()


def test_capsule_refuses_a_strided_view():
    with pytest.raises((ValueError, BufferError), match="contiguous"):
        dlpack.to_capsule(np.zeros((4, 4), np.float32)[:, ::2])


def test_supported_dtypes():
    for name in DTYPES:
        assert dlpack.is_supported(dlpack.numpy_dtype(name))
    for other in (np.uint32, np.uint64, np.complex64, np.float128 if hasattr(np, "float128") else object):
        assert not dlpack.is_supported(np.dtype(other))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_aligned_empty(dtype, shape):
    a = dlpack.aligned_empty(shape, dlpack.numpy_dtype(dtype))
    assert a.shape == shape and a.dtype == dlpack.numpy_dtype(dtype)
    assert a.flags.c_contiguous and a.flags.writeable
    assert dlpack.is_aligned(a)


# ------------------------------------------------------------------------------------------------
# dadt.jax's results: what jnp.asarray gives, made without its dispatch.
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_jax_result_is_what_jnp_asarray_makes(dtype, shape):
    pytest.importorskip("jax", reason="dadt.jax needs jax")
    import jax.numpy as jnp
    from dadt.jax import ops

    a = dlpack.aligned_empty(shape, dlpack.numpy_dtype(dtype))
    a[...] = _array(dtype, shape, True)
    got, want = ops._to_jax(a), jnp.asarray(a)
    assert type(got) is type(want)
    assert (got.dtype, got.shape, got.weak_type, got.committed) == \
        (want.dtype, want.shape, want.weak_type, want.committed)
    assert got.sharding == want.sharding
    assert np.array_equal(np.asarray(got), np.asarray(want))


def test_jax_result_outlives_its_numpy_buffer():
    pytest.importorskip("jax", reason="dadt.jax needs jax")
    from dadt.jax import ops

    a = dlpack.aligned_empty((1000,), np.float32)
    a[...] = np.arange(1000)
    got = ops._to_jax(a)
    del a
    gc.collect()
    np.testing.assert_array_equal(np.asarray(got + 1), np.arange(1000) + 1)


def test_jax_result_of_float64_without_x64_is_canonical():
    jax = pytest.importorskip("jax", reason="dadt.jax needs jax")
    from dadt.jax import ops

    if jax.config.jax_enable_x64:
        pytest.skip("x64 is enabled in this process")
    got = ops._to_jax(np.arange(3, dtype=np.float64))
    assert got.dtype == np.float32  # as jnp.asarray canonicalizes it
