"""tessera.numpy's composite functions (tessera/_np_composite.py) against numpy: stacking, diagonals, the nan*
reductions, more elementwise math and the queries. Where jax.numpy differs from numpy (an all-NaN slice's
nanargmax), the expected value says so."""
import numpy as np
import pytest

import tessera
import tessera.numpy as tnp

_SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 0.5, -2.5, 3.0, 1e30], np.float32)
_NANS = np.array([[np.nan, 1.0, 2.0], [np.nan, np.nan, np.nan], [3.0, -1.0, np.nan]], np.float32)


def _same(got, want, rtol=1e-5):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("name", ["sinh", "cosh", "arcsinh", "arctanh", "arccosh", "cbrt", "trunc", "rint", "signbit",
                                  "deg2rad", "rad2deg", "radians", "degrees", "sinc"])
def test_unary_functions_match_numpy(name):
    with np.errstate(all="ignore"):
        want = getattr(np, name)(_SPECIAL)
    _same(getattr(tnp, name)(_SPECIAL), want, rtol=2e-5)


def test_nan_to_num_and_invert():
    _same(tnp.nan_to_num(_SPECIAL), np.nan_to_num(_SPECIAL))
    _same(tnp.nan_to_num(_SPECIAL, nan=-1.0, posinf=9.0, neginf=-9.0), np.nan_to_num(_SPECIAL, nan=-1.0, posinf=9.0, neginf=-9.0))
    x = np.array([0, 5, -3], np.int32)
    _same(tnp.invert(x), np.invert(x))
    _same(tnp.bitwise_not(np.array([True, False])), [False, True])


@pytest.mark.parametrize("name", ["copysign", "fmax", "fmin", "fmod", "hypot", "logaddexp2", "float_power", "heaviside"])
def test_binary_functions_match_numpy(name):
    a, b = _SPECIAL[:, None], _SPECIAL[None, :]
    with np.errstate(all="ignore"):
        want = getattr(np, name)(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    _same(getattr(tnp, name)(a, b), want, rtol=2e-5)


def test_fmod_of_integers():
    a, b = np.array([7, -7, 7, 5], np.int32), np.array([3, 3, -3, 0], np.int32)
    _same(tnp.fmod(a, b), [1, -1, 1, 0])  # by zero: 0, as jax.numpy


@pytest.mark.parametrize("name", ["nansum", "nanprod", "nanmax", "nanmin", "nanmean", "nanvar", "nanstd"])
def test_nan_reductions_match_numpy(name):
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning) if name not in ("nansum", "nanprod") else _nothing():
        want = getattr(np, name)(_NANS, axis=1)
    _same(getattr(tnp, name)(_NANS, axis=1), want)
    _same(getattr(tnp, name)(_NANS[0], keepdims=True), getattr(np, name)(_NANS[0], keepdims=True))


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_nanargmax_is_minus_one_for_an_all_nan_slice():
    _same(tnp.nanargmax(_NANS, axis=1), [2, -1, 0])  # numpy raises for the all-NaN row; jax.numpy gives -1
    _same(tnp.nanargmin(_NANS, axis=1), [1, -1, 1])


def test_count_nonzero_average_and_cumulative_sum():
    x = np.array([[0, 1, 2], [3, 0, 0]], np.int32)
    _same(tnp.count_nonzero(x), np.count_nonzero(x))
    _same(tnp.count_nonzero(x, axis=0), np.count_nonzero(x, axis=0))
    w = np.array([1.0, 2.0, 0.5], np.float32)
    _same(tnp.average(x, axis=1, weights=w), np.average(x, axis=1, weights=w))
    avg, scl = tnp.average(x.astype(np.float32), axis=0, returned=True)
    want_avg, want_scl = np.average(x.astype(np.float32), axis=0, returned=True)
    _same(avg, want_avg)
    _same(scl, want_scl)
    _same(tnp.cumulative_sum(np.array([1, 2, 3], np.int32), include_initial=True), [0, 1, 3, 6])


def test_stacking_functions_match_numpy():
    a, b = np.arange(3.0, dtype=np.float32), np.arange(3.0, 6.0, dtype=np.float32)
    m = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    for name, args in [("hstack", ([a, b],)), ("vstack", ([a, b],)), ("dstack", ([a, b],)), ("column_stack", ([a, b],)),
                       ("hstack", ([m, m],)), ("vstack", ([m, a],)), ("append", (m, a)), ("fliplr", (m,)),
                       ("flipud", (m,)), ("atleast_2d", (a,)), ("atleast_3d", (m,)), ("atleast_3d", (a,))]:
        _same(getattr(tnp, name)(*args), getattr(np, name)(*args))
    _same(tnp.atleast_1d(3.0), np.atleast_1d(3.0))
    t = np.arange(12.0, dtype=np.float32).reshape(2, 3, 2)
    for k in range(-1, 5):
        _same(tnp.rot90(t, k), np.rot90(t, k))
    _same(tnp.rot90(t, 1, axes=(1, 2)), np.rot90(t, 1, axes=(1, 2)))


def test_meshgrid_matches_numpy():
    x, y, z = np.arange(3.0), np.arange(2.0), np.arange(4.0)
    for kw in [{}, {"indexing": "ij"}, {"sparse": True}]:
        for got, want in zip(tnp.meshgrid(x, y, z, **kw), np.meshgrid(x, y, z, **kw)):
            _same(got, want)


def test_diagonals_and_trace_match_numpy():
    v = np.arange(1.0, 4.0, dtype=np.float32)
    m = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    t = np.arange(24.0, dtype=np.float32).reshape(3, 2, 4)
    for k in (-2, -1, 0, 1, 3):
        _same(tnp.diag(v, k), np.diag(v, k))
        _same(tnp.diag(m, k), np.diag(m, k))
        _same(tnp.trace(m, k), np.trace(m, k))
        _same(tnp.diagonal(t, k, 0, 2), np.diagonal(t, k, 0, 2))
    g = tessera.grad(lambda a: tnp.trace(a @ a))(m[:, :3])
    _same(g, 2 * m[:, :3].T)


def test_diff_matches_numpy():
    x = np.array([1.0, 4.0, 9.0, 16.0, 20.0], np.float32)
    _same(tnp.diff(x), np.diff(x))
    _same(tnp.diff(x, 2), np.diff(x, 2))
    _same(tnp.diff(x, prepend=0.0, append=[30.0]), np.diff(x, prepend=0.0, append=[30.0]))
    m = np.arange(12, dtype=np.int32).reshape(3, 4) ** 2
    _same(tnp.diff(m, axis=0), np.diff(m, axis=0))
    b = np.array([True, False, False, True])
    _same(tnp.diff(b), np.diff(b))


def test_indices_isin_select_searchsorted():
    for got, want in zip(tnp.tril_indices(3, -1, 4), np.tril_indices(3, -1, 4)):
        _same(got, want)
    for got, want in zip(tnp.triu_indices(3), np.triu_indices(3)):
        _same(got, want)
    x = np.array([[0, 1, 2], [-3, 4, 2]], np.int32)
    _same(tnp.isin(x, [2, -3]), np.isin(x, [2, -3]))
    _same(tnp.isin(x, [2, -3], invert=True), np.isin(x, [2, -3], invert=True))
    y = np.array([-1.0, 0.0, 1.0, 2.0], np.float32)
    _same(tnp.select([y < 0, y > 1], [y * 10, y * 100], -5.0), np.select([y < 0, y > 1], [y * 10, y * 100], -5.0))
    a = np.array([1.0, 2.0, 2.0, 5.0], np.float32)
    v = np.array([[0.0, 2.0], [3.0, 9.0]], np.float32)
    _same(tnp.searchsorted(a, v), np.searchsorted(a, v))
    _same(tnp.searchsorted(a, v, side="right"), np.searchsorted(a, v, side="right"))


def test_queries_and_broadcasting_helpers():
    x = tnp.zeros((2, 3))
    assert tnp.shape(x) == (2, 3) and tnp.ndim(x) == 2 and tnp.size(x) == 6 and tnp.size(x, 1) == 3
    assert tnp.broadcast_shapes((2, 1), (3,)) == (2, 3)
    a, b = tnp.broadcast_arrays(np.ones((2, 1)), np.arange(3.0))
    assert a.shape == b.shape == (2, 3)
    assert bool(tnp.array_equal(np.array([1.0, np.nan]), np.array([1.0, np.nan]), equal_nan=True))
    assert not bool(tnp.array_equal(np.array([1.0, np.nan]), np.array([1.0, np.nan])))
    assert not bool(tnp.array_equal(np.ones(2), np.ones(3)))
    assert tnp.iinfo(tnp.int32).max == 2**31 - 1
    _same(tnp.identity(2), np.identity(2))
    assert tnp.empty_like(np.ones(3, np.int32)).dtype == tnp.int32
