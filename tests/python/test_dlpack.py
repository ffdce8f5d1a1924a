"""DLPack both ways: Array.__dlpack__ shares the buffer with numpy (no copy), from_dlpack copies any host tensor."""
import numpy as np
import pytest

import tessera
import tessera.numpy as tnp


def _address(a):
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8, np.uint32])
def test_numpy_reads_an_array_without_a_copy(dtype):
    host = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    x = tnp.asarray(host, dtype)
    y = np.from_dlpack(x)
    assert y.dtype == dtype and y.shape == (2, 3, 4)
    np.testing.assert_array_equal(y, host)
    assert _address(y) == _address(np.asarray(x))  # the same bytes as the array's own buffer
    assert x.__dlpack_device__() == (1, 0)  # kDLCPU


def test_the_exported_buffer_outlives_the_array():
    x = tnp.arange(1000, dtype=tnp.float32) * 2.0
    y = np.from_dlpack(x)
    del x
    np.testing.assert_array_equal(y, 2.0 * np.arange(1000, dtype=np.float32))


def test_from_dlpack_copies_contiguous_and_strided_tensors():
    host = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    x = tnp.from_dlpack(host)
    np.testing.assert_array_equal(np.asarray(x), host)
    for view in (host.transpose(2, 0, 1), host[:, ::2, 1:4], host[::-1]):
        if view.strides and any(s < 0 for s in view.strides):
            continue  # numpy does not export negative strides through DLPack
        np.testing.assert_array_equal(np.asarray(tnp.from_dlpack(view)), view)
    ints = np.arange(10, dtype=np.int32)[::3]
    got = tnp.from_dlpack(ints)
    assert got.dtype == tnp.int32
    np.testing.assert_array_equal(np.asarray(got), ints)


def test_round_trip_and_bfloat16():
    x = tnp.asarray(np.linspace(-2, 2, 16, dtype=np.float32)).astype(tnp.bfloat16)
    back = tnp.from_dlpack(x)
    assert back.dtype == tnp.bfloat16
    np.testing.assert_array_equal(np.asarray(back.astype(tnp.float32)), np.asarray(x.astype(tnp.float32)))


def test_unsupported_cases_say_why():
    with pytest.raises(TypeError, match="no type for bool"):
        tnp.asarray([True, False]).__dlpack__()
    with pytest.raises(ValueError, match="stream must be None"):
        tnp.ones((2,)).__dlpack__(stream=7)
    with pytest.raises(TypeError, match="__dlpack__"):
        tnp.from_dlpack(object())

    @tessera.jit
    def f(x):
        x.__dlpack__()
        return x

    with pytest.raises(Exception, match="traced"):
        f(tnp.ones((2,)))
