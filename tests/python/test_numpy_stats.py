"""tessera.numpy's order statistics and binning (tessera/_np_stats.py) against numpy: median, quantile, percentile
and their nan forms over axes, keepdims and methods, their gradients against finite differences, histogram,
bincount, digitize and interp. Where jax.numpy differs from numpy (method='nearest' at an exact half, histogram's
floating counts, bincount's length=) the expected value says so; a quantile of an empty slice is a ValueError
(numpy's quantile raises IndexError, its median gives NaN)."""
import re

import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from finite_differences import finite_difference


def _same(got, want, rtol=1e-5, dtype=None):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if dtype is not None:
        assert got.dtype == dtype, got.dtype
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=1e-6, equal_nan=True)


@pytest.fixture
def x(rng):
    return rng.standard_normal((5, 6, 7)).astype(np.float32)


@pytest.fixture
def xnan(x):
    x = x.copy()
    x[0, 1, 2] = np.nan
    x[1, :, 3] = np.nan  # a slice along axis 1 all NaN
    return x


# Not at multiples of 1/n: inverted_cdf jumps there, and numpy's float64 q * n may fall either side.
_QS = np.array([0.0, 0.13, 0.52, 0.77, 1.0], np.float32)


@pytest.mark.parametrize("method", ["linear", "lower", "higher", "midpoint", "inverted_cdf"])
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2), (2, 0)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_quantile_matches_numpy(x, method, axis, keepdims):
    got = tnp.quantile(x, _QS, axis=axis, method=method, keepdims=keepdims)
    _same(got, np.quantile(x, _QS, axis=axis, method=method, keepdims=keepdims), dtype=np.float32)
    got = tnp.quantile(x, 0.33, axis=axis, method=method, keepdims=keepdims)
    _same(got, np.quantile(x, 0.33, axis=axis, method=method, keepdims=keepdims))


@pytest.mark.parametrize("method", ["linear", "lower", "higher", "midpoint", "inverted_cdf"])
@pytest.mark.parametrize("axis", [None, 1, (0, 1)])
def test_nanquantile_matches_numpy(xnan, method, axis):
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning) if axis == 1 else _nothing():
        want = np.nanquantile(xnan, _QS, axis=axis, method=method)
    _same(tnp.nanquantile(xnan, _QS, axis=axis, method=method), want)
    # A NaN anywhere in a slice makes the plain quantile NaN.
    _same(tnp.quantile(xnan, _QS, axis=axis, method=method), np.quantile(xnan, _QS, axis=axis, method=method))


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_nearest_takes_the_lower_at_an_exact_half():
    v = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    # q * (n - 1) = 1.5: jax.numpy takes the lower (2); numpy rounds the index to even (3).
    assert float(tnp.quantile(v, 0.5, method="nearest")) == 2.0
    _same(tnp.quantile(v, np.array([0.1, 0.4, 0.9], np.float32), method="nearest"), [1.0, 2.0, 4.0])


def test_median_percentile_and_dtypes(x, xnan, rng):
    _same(tnp.median(x), np.median(x))
    _same(tnp.median(x, axis=1), np.median(x, axis=1))
    _same(tnp.median(x[:, :6], axis=1, keepdims=True), np.median(x[:, :6], axis=1, keepdims=True))
    ints = rng.integers(-5, 5, size=(4, 9)).astype(np.int32)
    _same(tnp.median(ints, axis=1), np.median(ints, axis=1), dtype=np.float32)
    _same(tnp.percentile(x, [10, 50, 90], axis=0), np.percentile(x, [10, 50, 90], axis=0))
    _same(tnp.percentile(ints, 25), np.percentile(ints, 25))
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        _same(tnp.nanmedian(xnan, axis=1), np.nanmedian(xnan, axis=1))
        _same(tnp.nanpercentile(xnan, 40, axis=1), np.nanpercentile(xnan, 40, axis=1))
    _same(tnp.nanmedian(xnan), np.nanmedian(xnan))
    half = tnp.quantile(x.astype(np.float16), 0.3, axis=0)
    assert half.dtype == np.float16
    _same(half, np.quantile(x.astype(np.float16).astype(np.float32), 0.3, axis=0), rtol=2e-3)


def test_weighted_inverted_cdf_is_the_repeated_sample(rng):
    v = rng.standard_normal(7).astype(np.float32)
    counts = np.array([1, 3, 0, 2, 1, 4, 2])
    repeated = np.repeat(v, counts)
    for q in (0.1, 0.3, 0.5, 0.8, 1.0):
        got = tnp.quantile(v, q, method="inverted_cdf", weights=counts.astype(np.float32))
        _same(got, np.quantile(repeated, q, method="inverted_cdf"))
    rows = rng.standard_normal((3, 7)).astype(np.float32)
    got = tnp.quantile(rows, np.array([0.2, 0.6], np.float32), axis=1, method="inverted_cdf",
                       weights=counts.astype(np.float32))
    want = np.stack([np.quantile(np.repeat(r, counts), [0.2, 0.6], method="inverted_cdf") for r in rows], 1)
    _same(got, want)


def test_quantile_errors(x):
    with pytest.raises(ValueError, match="method can only be"):
        tnp.quantile(x, 0.5, method="foo")
    with pytest.raises(ValueError, match="rank <= 1"):
        tnp.quantile(x, np.full((2, 2), 0.5))
    with pytest.raises(NotImplementedError, match="inverted_cdf"):
        tnp.quantile(x, 0.5, weights=np.ones_like(x))
    with pytest.raises(ValueError, match="overwrite_input"):
        tnp.median(x, overwrite_input=True)
    with pytest.raises(ValueError, match="repeated axis"):
        tnp.quantile(x, 0.5, axis=(1, 1))


@pytest.mark.parametrize("name,call", [
    ("quantile", lambda a, **k: tnp.quantile(a, 0.5, **k)),
    ("percentile", lambda a, **k: tnp.percentile(a, 50, **k)),
    ("nanquantile", lambda a, **k: tnp.nanquantile(a, [0.1, 0.9], **k)),
    ("nanpercentile", lambda a, **k: tnp.nanpercentile(a, 50, **k)), ("median", tnp.median),
    ("nanmedian", tnp.nanmedian),
])
def test_quantiles_of_an_empty_slice_raise(name, call):
    # numpy's quantile raises IndexError here, its median returns NaN with a warning: there is no order
    # statistic of no elements, so each raises ValueError with its name and the shape.
    for shape, kwargs in [((3, 0), dict(axis=1)), ((0,), {}), ((0, 0), dict(axis=1)), ((2, 0, 4), dict(axis=(0, 1)))]:
        with pytest.raises(ValueError, match=rf"^{name}: .*empty slice.*{re.escape(str(shape))}"):
            call(np.zeros(shape, np.float32), **kwargs)
    # A non-empty reduced axis of an array with no other elements is an empty result, as numpy.
    assert np.asarray(call(np.zeros((0, 3), np.float32), axis=1)).size == 0


def test_quantile_gradients_match_finite_differences(x, rng):
    row = x[0, 0].astype(np.float64)
    for v in (row, row[:6]):  # odd and even counts: the median's cotangent goes to one or two elements
        g = tessera.grad(lambda a: tnp.median(a))(v.astype(np.float32))
        _same(g, finite_difference(lambda a: np.median(a), v), rtol=1e-4)
    qs = np.array([0.3, 0.7], np.float32)
    g = tessera.grad(lambda a: tnp.quantile(a, qs, axis=1).sum())(x[0])
    _same(g, finite_difference(lambda a: np.quantile(a, qs, axis=1).sum(), x[0].astype(np.float64)), rtol=1e-3)
    nan_row = x[0].copy()
    nan_row[:, 2] = np.nan
    g = tessera.grad(lambda a: tnp.nanquantile(a, 0.3, axis=1).sum())(nan_row)
    want = finite_difference(lambda a: np.nanquantile(a, 0.3, axis=1).sum(), nan_row.astype(np.float64))
    _same(g, np.where(np.isnan(nan_row), 0.0, want), rtol=1e-3)


def test_quantile_under_jit_and_vmap(x):
    qs = np.array([0.25, 0.5], np.float32)
    _same(tessera.jit(lambda v, q: tnp.quantile(v, q, axis=0))(x, qs), np.quantile(x, qs, axis=0))
    flat = x.reshape(5, -1)
    _same(tessera.vmap(tnp.median)(flat), np.median(flat, axis=1))


# ---- binning ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [{}, {"bins": 7}, {"bins": 5, "range": (-1, 1)},
                                    {"bins": np.array([-2, -0.5, 0, 0.3, 3.0], np.float32)}, {"bins": 6, "density": True}])
def test_histogram_matches_numpy(rng, kwargs):
    a = rng.standard_normal(50).astype(np.float32)
    counts, edges = tnp.histogram(a, **kwargs)
    want_counts, want_edges = np.histogram(a, **kwargs)
    assert counts.dtype == np.float32  # jax.numpy's counts are floating
    _same(counts, want_counts)
    _same(edges, want_edges)


def test_histogram_weights_edges_and_degenerate_range(rng):
    a = rng.standard_normal((5, 10)).astype(np.float32)
    w = rng.random((5, 10)).astype(np.float32)
    counts, _ = tnp.histogram(a, bins=6, weights=w)
    _same(counts, np.histogram(a, bins=6, weights=w)[0])
    # Values on the edges: the last bin is closed.
    on = np.arange(11, dtype=np.float32)
    _same(tnp.histogram(on, bins=10)[0], np.histogram(on, bins=10)[0])
    ones = np.ones(5, np.float32)
    _same(tnp.histogram(ones, bins=3)[0], np.histogram(ones, bins=3)[0])
    _same(tnp.histogram_bin_edges(ones, 3), np.histogram_bin_edges(ones, 3))
    _same(tnp.histogram_bin_edges(a, 4, range=(0, 2)), np.histogram_bin_edges(a, 4, range=(0, 2)))
    with pytest.raises(ValueError, match="same shape"):
        tnp.histogram(a, weights=w[:2])
    with pytest.raises(ValueError, match="range"):
        tnp.histogram_bin_edges(a, 3, range=(0, 1, 2))
    with pytest.raises(NotImplementedError):
        tnp.histogram_bin_edges(a, "auto")


def test_histogram_under_jit_and_grad(rng):
    a = rng.standard_normal(40).astype(np.float32)
    got = tessera.jit(lambda v: tnp.histogram(v, bins=5))(a)
    _same(got[0], np.histogram(a, bins=5)[0])
    w = rng.random(40).astype(np.float32)
    g = tessera.grad(lambda ww: tnp.histogram(a, bins=5, weights=ww)[0][2])(w)
    edges = np.histogram_bin_edges(a, 5)
    _same(g, ((a >= edges[2]) & (a < edges[3])).astype(np.float32))


def test_bincount(rng):
    x = rng.integers(0, 8, size=30).astype(np.int32)
    w = rng.random(30).astype(np.float32)
    got = tnp.bincount(x)
    assert got.dtype == np.int32
    _same(got, np.bincount(x))
    _same(tnp.bincount(x, weights=w), np.bincount(x, weights=w))
    _same(tnp.bincount(x, minlength=12), np.bincount(x, minlength=12))
    _same(tnp.bincount(np.array([True, False, True])), [1, 2])
    _same(tnp.bincount(np.zeros(0, np.int32), minlength=3), [0, 0, 0])
    # jax.numpy's: negative values count as 0, values past length= are dropped.
    _same(tnp.bincount(np.array([-1, -3, 2, 2], np.int32)), [2, 0, 2])
    _same(tnp.bincount(x, length=5), np.bincount(x)[:5])
    _same(tessera.jit(lambda v: tnp.bincount(v, length=10))(x), np.bincount(x, minlength=10))
    _same(tessera.vmap(lambda v: tnp.bincount(v, length=9))(x.reshape(5, 6)),
          [np.bincount(r, minlength=9) for r in x.reshape(5, 6)])
    g = tessera.grad(lambda ww: (tnp.bincount(x, weights=ww, length=8) ** 2).sum())(w)
    _same(g, 2 * np.bincount(x, weights=w, minlength=8)[x], rtol=1e-5)
    with pytest.raises(tessera.ConcretizationError, match="length="):
        tessera.jit(lambda v: tnp.bincount(v))(x)
    with pytest.raises(TypeError, match="integer"):
        tnp.bincount(w)
    with pytest.raises(ValueError, match="1-dimensional"):
        tnp.bincount(x.reshape(5, 6))


@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("bins", [[-1.0, 0.0, 0.5, 1.0], [1.0, 0.5, 0.0, -1.0]])
def test_digitize_matches_numpy(bins, right):
    x = np.array([-3, -1, 0, 0.25, 0.5, 1, 1.5, np.nan], np.float32)
    bins = np.array(bins, np.float32)
    got = tnp.digitize(x, bins, right=right)
    assert got.dtype == np.int32
    _same(got, np.digitize(x, bins, right=right))
    _same(tnp.digitize(x.reshape(2, 4), bins, right=right), np.digitize(x.reshape(2, 4), bins, right=right))


def test_digitize_edge_cases():
    _same(tnp.digitize(np.ones((2, 3), np.float32), np.zeros(0, np.float32)), np.zeros((2, 3)))
    _same(tnp.digitize(np.arange(7), np.array([1, 3, 5])), np.digitize(np.arange(7), [1, 3, 5]))
    with pytest.raises(ValueError, match="1-dimensional"):
        tnp.digitize(np.ones(3), np.zeros((1, 1)))


_XP = np.array([0, 1, 2, 4.0], np.float32)
_FP = np.array([1, 3, 2, 0.0], np.float32)
_X = np.linspace(-1, 5, 13).astype(np.float32)


def test_interp_matches_numpy():
    _same(tnp.interp(_X, _XP, _FP), np.interp(_X, _XP, _FP))
    _same(tnp.interp(_X, _XP, _FP, left=-7, right=9), np.interp(_X, _XP, _FP, left=-7, right=9))
    _same(tnp.interp(2.5, _XP, _FP), np.interp(2.5, _XP, _FP))
    _same(tnp.interp(np.array([1, 2, 3]), np.array([0, 2, 4]), np.array([0, 10, 20])), [5.0, 10.0, 15.0])
    x2 = _X[:12].reshape(3, 4)
    _same(tnp.interp(x2, _XP, _FP), np.interp(x2, _XP, _FP))
    xs = np.linspace(-400, 400, 17).astype(np.float32)
    xp = np.array([-180, -90, 0, 90, 170.0], np.float32)
    fp = np.array([4, 1, 2, 0, 3.0], np.float32)
    _same(tnp.interp(xs, xp, fp, period=360), np.interp(xs, xp, fp, period=360), rtol=1e-4)


def test_interp_extrapolates_and_checks():
    got = tnp.interp(_X, _XP, _FP, left="extrapolate", right="extrapolate")
    # The end segments continued: slope 2 on the left, -1 on the right.
    want = np.where(_X < 0, 1 + 2 * _X, np.where(_X > 4, -(_X - 4), np.interp(_X, _XP, _FP)))
    _same(got, want)
    with pytest.raises(ValueError, match="extrapolate"):
        tnp.interp(1.0, _XP, _FP, left="foo")
    with pytest.raises(ValueError, match="one-dimensional"):
        tnp.interp(1.0, _XP, _FP[:3])


def test_interp_gradients_and_transforms(rng):
    off_knots = _X + np.float32(1e-3)
    g = tessera.grad(lambda v: tnp.interp(v, _XP, _FP).sum())(off_knots)
    _same(g, finite_difference(lambda v: np.interp(v, _XP, _FP).sum(), off_knots.astype(np.float64)), rtol=1e-4)
    g = tessera.grad(lambda f: tnp.interp(_X, _XP, f).sum())(_FP)
    _same(g, finite_difference(lambda f: np.interp(_X, _XP, f).sum(), _FP.astype(np.float64)), rtol=1e-4)
    _same(tessera.jit(tnp.interp)(_X, _XP, _FP), np.interp(_X, _XP, _FP))
    xs = rng.standard_normal((4, 5)).astype(np.float32)
    fps = rng.random((4, 4)).astype(np.float32)
    got = tessera.vmap(tnp.interp, in_axes=(0, None, 0))(xs, _XP, fps)
    _same(got, [np.interp(a, _XP, f) for a, f in zip(xs, fps)])


@pytest.mark.parametrize("method", [None, "compare_all", "sort", "scan"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_methods_match_numpy(rng, method, side):
    for trial in range(20):
        a = np.sort(rng.integers(0, 6, size=int(rng.integers(0, 12))).astype(np.float32))
        if trial % 3 == 0 and a.size:
            a[-1] = np.nan  # NaN sorts last, and a NaN query goes after the numbers
        v = rng.integers(-1, 7, size=(3, 4)).astype(np.float32)
        v[0, 0] = np.nan
        got = tnp.searchsorted(a, v, side=side, method=method)
        assert got.dtype == np.int32
        _same(got, np.searchsorted(a, v, side=side))
    ints = np.sort(rng.integers(0, 9, size=7)).astype(np.int32)
    _same(tnp.searchsorted(ints, v, side=side, method=method), np.searchsorted(ints.astype(np.float32), v, side=side))


def test_searchsorted_large_inputs_and_errors(rng):
    # Past 2**20 pairs the default ranks a and v with one sort instead of comparing every pair.
    a = np.sort(rng.standard_normal(5000).astype(np.float32))
    v = rng.standard_normal(1000).astype(np.float32)
    _same(tnp.searchsorted(a, v), np.searchsorted(a, v))
    with pytest.raises(ValueError, match="method"):
        tnp.searchsorted(a, v, method="bisect")
    with pytest.raises(ValueError, match="1-dimensional"):
        tnp.searchsorted(a.reshape(50, 100), v)
