"""Helpers the tests share to build Arrays of a given dtype and compare results with numpy's, and references
computed in float64."""
import math

import numpy as np

import tessera.numpy as tnp


def arr(x):
    """x as an Array of its own dtype (asarray alone makes float64 float32, as JAX without x64)."""
    x = np.asarray(x)
    return tnp.asarray(x, x.dtype)


def close(actual, expected, rtol=1e-5, atol=1e-6):
    """Equal shapes and values within rtol/atol."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def same(got, want, rtol=1e-5, dtype=None):
    """Equal shapes (and dtype, when given) and values within rtol and an absolute 1e-5, compared in float64."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if dtype is not None:
        assert got.dtype == dtype, got.dtype
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=1e-5)


def taylor_expm(m, terms=60):
    """exp(m) in float64 by its series, m scaled by 2^-k first and squared k times back (the series of a matrix
    of norm at most 1/2 converges fast)."""
    k = max(0, int(math.ceil(math.log2(max(np.abs(m).sum(0).max(), 1e-300) * 2))))
    a = m / 2.0 ** k
    r, term = np.eye(len(m)), np.eye(len(m))
    for i in range(1, terms):
        term = term @ a / i
        r = r + term
    for _ in range(k):
        r = r @ r
    return r
