"""Eager float32 elementwise ops run the vector code jitted loops run: the same bits as the jitted op, and
numpy's values within the vector math's error, on special values too. Other dtypes keep their kernels."""

import numpy as np
import pytest

import tessera as ts
import tessera.numpy as tnp

RNG = np.random.default_rng(7)
X = np.concatenate([RNG.standard_normal(1000).astype(np.float32) * 3,
                    np.array([0.0, -0.0, 1e-38, -3e-38, 88.0, -88.0, 1e30, np.inf, -np.inf, np.nan], np.float32)])
Y = np.concatenate([RNG.standard_normal(1000).astype(np.float32) + 0.5,
                    np.array([1.0, -2.0, 3.0, 0.5, 2.0, -1.0, 1e-30, 1.0, np.inf, 2.0], np.float32)])

UNARY = {"exp": np.exp, "log1p": None, "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "sqrt": None,
         "abs": np.abs, "negative": np.negative, "floor": np.floor, "expm1": np.expm1, "square": np.square}
BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
          "maximum": np.maximum, "minimum": np.minimum, "arctan2": np.arctan2}


def bits(a):
    return np.asarray(a).view(np.int32)


def subnormal(a):
    a = np.asarray(a, np.float32)
    return (a != 0) & (np.abs(a) < np.finfo(np.float32).tiny)


def same_bits(eager, jitted, *operands):
    """Equal bits, NaNs alike; where an operand or the result is subnormal, jitted code flushes it (to a zero of
    either sign), which eager code does not."""
    a, b = np.asarray(eager), np.asarray(jitted)
    flushed = subnormal(a)
    for x in operands:
        flushed |= subnormal(x)
    return (bits(a) == bits(b)) | (np.isnan(a) & np.isnan(b)) | flushed


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_eager_equals_jit(name):
    f = getattr(tnp, name)
    x = np.abs(X) if name in ("sqrt", "log1p") else X
    eager, jitted = f(x), ts.jit(f)(x)
    assert same_bits(eager, jitted, x).all(), name
    ref = UNARY[name] or getattr(np, name)
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
    finite = np.isfinite(want) & (np.abs(want) < 1e30) & (np.abs(x) > 1e-30)
    np.testing.assert_allclose(np.asarray(eager)[finite], want[finite], rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_eager_equals_jit(name):
    f = getattr(tnp, name)
    eager, jitted = f(X, Y), ts.jit(f)(X, Y)
    assert same_bits(eager, jitted, X, Y).all(), name
    with np.errstate(all="ignore"):
        want = BINARY[name](X.astype(np.float64), Y.astype(np.float64))
    finite = np.isfinite(want) & (np.abs(want) < 1e30) & (np.abs(X) > 1e-30)
    np.testing.assert_allclose(np.asarray(eager)[finite], want[finite], rtol=2e-6, atol=1e-6)


def test_eager_keeps_subnormals_that_jit_flushes():
    # the vector code runs with the caller's floating-point environment: eager keeps what jitted code flushes
    x = np.array([1e-38], np.float32)
    assert float(np.asarray(tnp.multiply(x, np.float32(0.01)))[0]) > 0.0


def test_other_dtypes_keep_their_kernels():
    x = np.linspace(-3, 3, 50)
    for dt in (tnp.float16, tnp.bfloat16):
        got = np.asarray(tnp.exp(tnp.asarray(x, dtype=dt)), np.float32)
        np.testing.assert_allclose(got, np.exp(np.asarray(tnp.asarray(x, dtype=dt), np.float32)), rtol=1e-2)
    i = np.arange(-5, 5, dtype=np.int32)
    np.testing.assert_array_equal(np.asarray(tnp.abs(i)), np.abs(i))
