"""Floats' bits: lax.bitcast_convert_type, Array.view, and the numpy functions written with them (nextafter,
spacing, signbit, bitwise_count), against numpy's own bit views."""

import numpy as np
import pytest

import tessera as ts
import tessera.lax as lax
import tessera.numpy as tnp

SPECIAL = np.array([1.0, -1.0, 0.0, -0.0, np.inf, -np.inf, np.nan, 3.4028235e38, -3.4028235e38, 1e-45, 2.5e-38,
                    -2.5, 0.1, 65504.0], np.float32)


def bits(a):
    return np.asarray(a).view(np.int32)


def test_bitcast_same_width_matches_numpy_view():
    rng = np.random.default_rng(0)
    x = np.concatenate([SPECIAL, rng.standard_normal(50).astype(np.float32)])
    np.testing.assert_array_equal(np.asarray(lax.bitcast_convert_type(x, np.int32)), x.view(np.int32))
    np.testing.assert_array_equal(np.asarray(lax.bitcast_convert_type(x, np.uint32)), x.view(np.uint32))
    i = rng.integers(-2**31, 2**31 - 1, 64, dtype=np.int64).astype(np.int32)
    back = np.asarray(lax.bitcast_convert_type(i, np.float32))
    np.testing.assert_array_equal(back.view(np.int32), i)  # NaN payloads included


def test_bitcast_to_and_from_bytes():
    x = SPECIAL.reshape(2, 7)
    b = lax.bitcast_convert_type(x, np.uint8)
    assert b.shape == (2, 7, 4) and b.dtype == np.uint8
    np.testing.assert_array_equal(np.asarray(b), x.view(np.uint8).reshape(2, 7, 4))  # low-order byte first
    np.testing.assert_array_equal(bits(lax.bitcast_convert_type(b, np.float32)), x.view(np.int32))
    u = np.arange(24, dtype=np.uint8).reshape(2, 3, 4) * 9
    np.testing.assert_array_equal(np.asarray(lax.bitcast_convert_type(u, np.int32)),
                                  u.reshape(2, 12).view(np.int32).reshape(2, 3))


def test_bitcast_under_jit():
    x = np.linspace(-3, 3, 16, dtype=np.float32)
    f = ts.jit(lambda v: lax.bitcast_convert_type(lax.bitcast_convert_type(v, np.uint8) ^ np.uint8(0x80), np.float32))
    # the top bit of every byte flipped, the sign's included
    expect = (x.view(np.uint32) ^ np.uint32(0x80808080)).view(np.float32)
    np.testing.assert_array_equal(bits(f(x)), expect.view(np.int32))


def test_bitcast_errors():
    with pytest.raises(TypeError, match="bitcast_convert_type"):
        lax.bitcast_convert_type(tnp.ones(3, dtype=tnp.bfloat16), np.int32)
    with pytest.raises(TypeError, match="bitcast_convert_type"):
        lax.bitcast_convert_type(tnp.ones(3, dtype=bool), np.uint8)
    with pytest.raises(ValueError, match="trailing axis of 4"):
        lax.bitcast_convert_type(np.zeros((2, 3), np.uint8), np.float32)


def test_view():
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    a = tnp.asarray(x)
    np.testing.assert_array_equal(np.asarray(a.view(tnp.int32)), x.view(np.int32))
    np.testing.assert_array_equal(np.asarray(a.view(np.uint8)), x.view(np.uint8))
    u = x.view(np.uint8)
    np.testing.assert_array_equal(bits(tnp.asarray(u).view(np.float32)), x.view(np.int32))
    with pytest.raises(ValueError, match="multiple of 4"):
        tnp.zeros((2, 3), dtype=np.uint8).view(np.float32)


def test_nextafter_matches_numpy_bit_for_bit():
    rng = np.random.default_rng(1)
    x = np.concatenate([SPECIAL, rng.standard_normal(40).astype(np.float32)])
    for y in (np.float32(np.inf), np.float32(-np.inf), np.float32(0.0), np.float32(-0.0), np.float32(np.nan),
              rng.standard_normal(x.size).astype(np.float32), x[::-1].copy(), x.copy()):
        with np.errstate(over="ignore"):
            ref = np.nextafter(x, y)
        got = tnp.nextafter(x, y)
        assert got.dtype == np.float32
        same = (bits(got) == ref.view(np.int32)) | (np.isnan(np.asarray(got)) & np.isnan(ref))
        assert same.all(), (x[~same], np.broadcast_to(y, x.shape)[~same], np.asarray(got)[~same], ref[~same])


def test_nextafter_bfloat16_steps_one_bfloat16_unit():
    x = np.array([1.0, -1.0, 0.5, 3.0, -100.0], np.float32)
    got = np.asarray(tnp.nextafter(tnp.asarray(x, dtype=tnp.bfloat16), tnp.asarray(np.inf, dtype=tnp.bfloat16)),
                     np.float32)
    # bf16 keeps 8 significand bits: one unit is 2**(e - 7) for x in [2**e, 2**(e+1)); towards +inf a negative
    # power of two steps by half of that
    np.testing.assert_array_equal(got, [1 + 2**-7, -1 + 2**-8, 0.5 + 2**-8, 3 + 2**-6, -100 + 2**-1])


def test_nextafter_under_jit_and_vmap():
    x = np.linspace(-2, 2, 11, dtype=np.float32)
    x = x[x != 0]  # jitted code flushes subnormals, which nextafter(0, .) is
    y = np.float32(1.0)
    np.testing.assert_array_equal(bits(ts.jit(tnp.nextafter)(x, y)), np.nextafter(x, y).view(np.int32))
    np.testing.assert_array_equal(bits(ts.vmap(lambda v: tnp.nextafter(v, y))(x)), np.nextafter(x, y).view(np.int32))


def test_spacing_matches_numpy():
    rng = np.random.default_rng(2)
    x = np.concatenate([SPECIAL, rng.standard_normal(40).astype(np.float32) * 1e3])
    with np.errstate(over="ignore", invalid="ignore"):
        ref = np.spacing(x)
    got = np.asarray(tnp.spacing(x))
    ref[x == -0.0] = np.where(np.signbit(x[x == -0.0]), -np.spacing(np.float32(0)), np.spacing(np.float32(0)))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    ok = ~np.isnan(ref)
    np.testing.assert_array_equal(got[ok].view(np.int32), ref[ok].view(np.int32))


def test_signbit_reads_the_bit():
    neg_nan = np.array([np.nan], np.float32).view(np.int32) | np.int32(-2**31)
    x = np.concatenate([SPECIAL, neg_nan.view(np.float32)])
    np.testing.assert_array_equal(np.asarray(tnp.signbit(x)), np.signbit(x))
    np.testing.assert_array_equal(np.asarray(tnp.signbit(tnp.asarray(x, dtype=tnp.bfloat16))), np.signbit(x))
    np.testing.assert_array_equal(np.asarray(ts.jit(tnp.signbit)(x)), np.signbit(x))
    np.testing.assert_array_equal(np.asarray(tnp.copysign(2.0, np.float32(-0.0))), -2.0)


def test_bitwise_count():
    v = np.array([0, 1, -1, 255, -2**31, 2**31 - 1, 12345, -12345], np.int32)
    ref = [bin(abs(int(a)) & 0xFFFFFFFF).count("1") for a in v]  # |-2**31| wraps to itself in int32
    got = tnp.bitwise_count(v)
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(np.asarray(got), ref)
    u = np.array([0, 7, 255], np.uint8)
    np.testing.assert_array_equal(np.asarray(tnp.bitwise_count(u)), [0, 3, 8])
    with pytest.raises(TypeError, match="integer"):
        tnp.bitwise_count(np.ones(3, np.float32))
