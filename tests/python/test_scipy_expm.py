"""tessera.scipy.linalg.expm (tessera/_scipy.py): float32 against the series and an eigendecomposition (under jit
and grad), float64 against an eigendecomposition of a symmetric matrix, a batch whose matrices need different
numbers of squarings (under jit), NaNs past max_squarings (as JAX), and the gradient under jit against central
differences of a float64 Taylor series."""
import math

import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera.scipy import linalg

from comparisons import arr, close, taylor_expm
from finite_differences import finite_difference


def test_expm_float64_matches_the_eigendecomposition():
    rng = np.random.default_rng(0)
    s = rng.standard_normal((5, 5))
    sym = (s + s.T) * 2  # 1-norm well above 5.37: several squarings
    w, v = np.linalg.eigh(sym)
    got = linalg.expm(arr(sym))
    assert np.asarray(got).dtype == np.float64
    close(got, (v * np.exp(w)) @ v.T, rtol=1e-11, atol=1e-11)


def test_expm_batch_with_different_squarings_under_jit():
    rng = np.random.default_rng(1)
    batch = np.stack([rng.standard_normal((3, 3)) * scale for scale in (0.01, 0.5, 4.0, 40.0)])
    want = np.stack([taylor_expm(m) for m in batch])
    close(tessera.jit(linalg.expm)(arr(batch)), want, rtol=1e-10, atol=1e-12)
    close(linalg.expm(batch.astype(np.float32)), want, rtol=5e-4, atol=1e-5)


def test_expm_beyond_max_squarings_is_nan():
    m = np.diag([1.0, -1.0]) * 5.4 * 2 ** 3  # 1-norm 43.2 > 5.372 * 2^3: needs 4 squarings
    assert np.isnan(np.asarray(linalg.expm(arr(m), max_squarings=3))).all()
    close(linalg.expm(arr(m), max_squarings=4), taylor_expm(m), rtol=1e-9)


@pytest.mark.parametrize("scale", [0.3, 6.0])
def test_expm_gradient_under_jit_matches_finite_differences(scale):
    rng = np.random.default_rng(2)
    m, c = rng.standard_normal((3, 3)) * scale, rng.standard_normal((3, 3))
    g = tessera.jit(tessera.grad(lambda x: tnp.sum(linalg.expm(x) * arr(c))))(arr(m))
    close(g, finite_difference(lambda x: np.sum(taylor_expm(x) * c), m), rtol=1e-6, atol=1e-6)


def test_expm_matches_series_and_eigendecomposition_under_jit_and_grad():
    rng = np.random.default_rng(3)
    s = rng.standard_normal((4, 4))
    sym = (s + s.T) / 2 * 3  # norm large enough that the squarings run
    w, v = np.linalg.eigh(sym)
    close(linalg.expm(sym.astype(np.float32)), (v * np.exp(w)) @ v.T, rtol=2e-4, atol=1e-4)
    a = rng.standard_normal((2, 3, 3)) * 0.3
    series = np.stack([sum(np.linalg.matrix_power(m, k) / float(math.factorial(k)) for k in range(30)) for m in a])
    close(tessera.jit(linalg.expm)(a.astype(np.float32)), series, rtol=1e-5, atol=1e-6)
    nil = np.array([[0.0, 1.0], [0.0, 0.0]], np.float32)
    close(linalg.expm(nil), [[1.0, 1.0], [0.0, 1.0]], atol=1e-7)
    c = rng.standard_normal((3, 3))
    m = rng.standard_normal((3, 3)) * 0.5

    def reference(x):
        return np.sum(sum(np.linalg.matrix_power(x, k) / float(math.factorial(k)) for k in range(30)) * c)

    g = tessera.grad(lambda x: tnp.sum(linalg.expm(x) * c.astype(np.float32)))(m.astype(np.float32))
    close(g, finite_difference(reference, m), rtol=2e-3, atol=2e-3)
    with pytest.raises(ValueError, match="square matrix"):
        linalg.expm(np.ones((2, 3), np.float32))
