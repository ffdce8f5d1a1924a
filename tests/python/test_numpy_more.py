"""tessera.numpy's number functions (_np_math.py), array manipulations (_np_arrays.py) and functions of sequences
(_np_signal.py) against numpy (the independent reference, in float64 where values are compared), under jit
where they trace, and their gradients against finite differences."""
import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from finite_differences import finite_difference

rng = np.random.default_rng(7)
X = rng.standard_normal((3, 4, 5)).astype(np.float32)
I = rng.integers(-9, 10, (4, 6)).astype(np.int32)


def _same(got, want, rtol=1e-5, atol=1e-5, dtype=None):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if dtype is not None:
        assert got.dtype == dtype, got.dtype
    if want.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True)


# ---- _np_math -------------------------------------------------------------------------------------------

def test_gcd_and_lcm_match_numpy_with_signs_and_zeros():
    a = np.array([0, 0, 12, -8, 7, 1071, -270, 2**30], np.int32)
    b = np.array([0, 5, 18, 6, -7, 462, 192, 6], np.int32)
    _same(tnp.gcd(a, b), np.gcd(a, b), dtype=np.int32)
    _same(tnp.lcm(a, b), np.lcm(a, b), dtype=np.int32)
    _same(tnp.gcd(I, 6), np.gcd(I, 6))  # broadcast against a scalar
    _same(tessera.jit(tnp.gcd)(a, b), np.gcd(a, b))
    with pytest.raises(TypeError, match="gcd: arguments must be integers"):
        tnp.gcd(np.float32(1.5), 2)


def test_divmod_is_floor_division_and_remainder():
    q, r = tnp.divmod(I, np.int32(-4))
    nq, nr = np.divmod(I, np.int32(-4))
    _same(q, nq)
    _same(r, nr)


def test_frexp_and_ldexp_round_trip_and_match_numpy_on_special_values():
    x = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 3.0, 1024.0, 1e-3, -7.25e10, 3.4e38, 1e-40, np.inf, -np.inf, np.nan],
                 np.float32)
    m, e = tnp.frexp(x)
    nm, ne = np.frexp(x)
    _same(m, nm, rtol=0, atol=0)
    assert np.asarray(e).dtype == np.int32
    np.testing.assert_array_equal(np.asarray(e)[np.isfinite(x)], ne[np.isfinite(x)])
    _same(tnp.ldexp(nm, ne.astype(np.int32)), np.ldexp(nm, ne), rtol=0, atol=0)
    with np.errstate(over="ignore"):
        _same(tnp.ldexp(np.float32(1.5), np.int32(200)), np.ldexp(np.float32(1.5), 200))  # overflows to inf
    _same(tnp.ldexp(np.float32(1.0), np.int32(-140)), np.ldexp(np.float32(1.0), -140), rtol=0, atol=0)  # subnormal
    with pytest.raises(TypeError, match="ldexp: the exponent must be an integer"):
        tnp.ldexp(x, x)


def test_modf_and_the_real_views():
    x = np.array([2.5, -2.5, 0.0, -0.0, 7.0, np.inf, -np.inf, np.nan], np.float32)
    f, w = tnp.modf(x)
    nf, nw = np.modf(x)
    _same(f, nf)
    _same(w, nw)
    assert np.signbit(np.asarray(f)).tolist() == np.signbit(nf).tolist()
    _same(tnp.real(X), X)
    _same(tnp.imag(X), np.zeros_like(X))
    _same(tnp.conj(X), X)


# ---- _np_arrays -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("sections,axis", [(3, 2), (2, 0), (4, 1), ([1, 3], 2), (7, 0)])
def test_array_split_matches_numpy(sections, axis):
    got = tnp.array_split(X, sections, axis=axis)
    want = np.array_split(X, sections, axis=axis)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        _same(g, w)


@pytest.mark.parametrize("obj,values,axis", [
    (2, 9.0, None), (-1, [7.0, 8.0, 1.0, 2.0, 3.0], 1), (1, [[7.0], [8.0], [1.0]], 2), ([0, 2, 2, 5], 3.0, 2), (slice(1, 4), -1.0, 1), (4, X[:, :1, :], 1),
    (np.array([3, 0]), [[1.0], [2.0]], 0)])
def test_insert_matches_numpy(obj, values, axis):
    a = X if axis != 0 else X[:, 0, :2]
    _same(tnp.insert(a, obj, values, axis=axis), np.insert(a, obj, values, axis=axis))


@pytest.mark.parametrize("obj,axis", [(1, None), ([0, 2], 1), (slice(0, 5, 2), 2), (-1, 0),
                                      (np.array([True, False, True, False, False]), 2)])
def test_delete_matches_numpy(obj, axis):
    _same(tnp.delete(X, obj, axis=axis), np.delete(X, obj, axis=axis))


def test_insert_and_delete_say_what_is_wrong():
    with pytest.raises(IndexError, match="out of bounds for axis 1 with size 4"):
        tnp.insert(X, 9, 1.0, axis=1)
    with pytest.raises(IndexError, match="index 5 is out of bounds"):
        tnp.delete(X, 5, axis=1)
    with pytest.raises(tessera.ConcretizationError, match="positions must be known while tracing"):
        tessera.jit(lambda a, i: tnp.delete(a, i, axis=0))(X, np.array([1], np.int32))


def test_resize_kron_cross_inner_vdot_diagflat_match_numpy():
    _same(tnp.resize(X[0, 0], (3, 4)), np.resize(X[0, 0], (3, 4)))
    _same(tnp.resize(I, 5), np.resize(I, 5))
    _same(tnp.resize(np.zeros((0,), np.float32), (2, 2)), np.zeros((2, 2)))
    _same(tnp.kron(X[0, :2, :3], X[1, :3, :2]), np.kron(X[0, :2, :3], X[1, :3, :2]))
    _same(tnp.kron(X[0, 0], X[:2, :2, :2]), np.kron(X[0, 0], X[:2, :2, :2]))
    _same(tnp.kron(I[:2, :2], I[:3, :1]), np.kron(I[:2, :2], I[:3, :1]))
    for a, b, kw in [(X[..., :3], X[..., 2:], {}), (X[..., :2], X[..., 2:], {}), (X[..., :2], X[..., 3:], {}),
                     (X[:, :3, 0], X[:, 1:, 1], {"axisa": 1, "axisb": 1}), (X[:3, 0], X[:3, 1], {"axis": 0}),
                     (X[:3, :2], X[:3, 2:4], {"axisa": 0, "axisb": 0, "axisc": 1})]:
        _same(tnp.cross(a, b, **kw), np.cross(a, b, **kw))
    with pytest.raises(ValueError, match="dimension must be 2 or 3"):
        tnp.cross(X, X)
    _same(tnp.inner(X, X[0]), np.inner(X, X[0]), rtol=1e-4)
    _same(tnp.inner(X, np.float32(2.0)), np.inner(X, np.float32(2.0)))
    _same(tnp.vdot(X[0], X[1]), np.vdot(X[0], X[1]), rtol=1e-4)
    _same(tnp.diagflat(X[0, :2], k=-1), np.diagflat(X[0, :2], k=-1))
    for g, w in zip(tnp.diag_indices(4, 3), np.diag_indices(4, 3)):
        _same(g, w)


def test_ravel_multi_index_and_unravel_index_match_numpy():
    idx = (np.array([0, 1, 2, 2]), np.array([3, 0, 1, 3]))
    for order in ("C", "F"):
        _same(tnp.ravel_multi_index(idx, (3, 4), order=order), np.ravel_multi_index(idx, (3, 4), order=order))
    far = (np.array([5, -1]), np.array([1, 9]))
    for mode in ("clip", "wrap", ("clip", "wrap")):
        _same(tnp.ravel_multi_index(far, (3, 4), mode=mode), np.ravel_multi_index(far, (3, 4), mode=mode))
    with pytest.raises(ValueError, match="out of bounds"):
        tnp.ravel_multi_index(far, (3, 4))
    flat = np.array([0, 5, 11, 7], np.int32)
    for g, w in zip(tnp.unravel_index(flat, (3, 4)), np.unravel_index(flat, (3, 4))):
        _same(g, w)
    for g, w in zip(tnp.unravel_index(np.int32(17), (2, 3, 4)), np.unravel_index(17, (2, 3, 4))):
        _same(g, w)
    with pytest.raises(ValueError, match="index 12 is out of bounds for size 12"):
        tnp.unravel_index(np.array([12], np.int32), (3, 4))
    # traced indices are clipped, as JAX's
    got = tessera.jit(lambda f: tnp.unravel_index(f, (3, 4)))(np.array([13], np.int32))
    assert [int(np.asarray(g)[0]) for g in got] == [2, 3]


def test_lexsort_partition_argpartition():
    first = np.array([1, 5, 1, 4, 3, 4, 4], np.int32)
    second = np.array([9, 4, 0, 4, 0, 2, 1], np.int32)
    _same(tnp.lexsort((first, second)), np.lexsort((first, second)))
    keys = rng.integers(0, 3, (3, 4, 6)).astype(np.float32)
    _same(tnp.lexsort(keys, axis=-1), np.lexsort(keys, axis=-1))
    _same(tnp.lexsort(keys, axis=0), np.lexsort(keys, axis=0))
    v = rng.standard_normal((4, 9)).astype(np.float32)
    for kth in (0, 3, -1):
        got = np.asarray(tnp.partition(v, kth, axis=1))
        want = np.partition(v, kth, axis=1)
        _same(got[:, kth], want[:, kth])
        k = kth % 9
        assert (got[:, :k] <= got[:, k:k + 1]).all() and (got[:, k + 1:] >= got[:, k:k + 1]).all()
        order = np.asarray(tnp.argpartition(v, kth, axis=1))
        _same(np.take_along_axis(v, order, 1)[:, k], want[:, k])
    with pytest.raises(ValueError, match="kth 9 is out of bounds"):
        tnp.partition(v, 9)


def test_piecewise_matches_numpy():
    x = np.linspace(-2, 2, 9).astype(np.float32)
    conds = [x < 0, x >= 1]
    _same(tnp.piecewise(x, [tnp.asarray(c) for c in conds], [lambda t: -t, lambda t: t * t]),
          np.piecewise(x, conds, [lambda t: -t, lambda t: t * t]))
    _same(tnp.piecewise(x, conds, [-1.0, 1.0, lambda t: t * 10]), np.piecewise(x, conds, [-1.0, 1.0, lambda t: t * 10]))
    _same(tnp.piecewise(x, x > 0, [lambda t, k: t * k], 3.0), np.piecewise(x, x > 0, [lambda t, k: t * k], 3.0))
    with pytest.raises(ValueError, match="2 or 3 functions are expected"):
        tnp.piecewise(x, conds, [1.0])


def test_apply_along_axis_matches_numpy():
    _same(tnp.apply_along_axis(lambda v: tnp.sum(v * v), 1, X), np.apply_along_axis(lambda v: np.sum(v * v), 1, X),
          rtol=1e-4)
    _same(tnp.apply_along_axis(lambda v: v[::-1] * 2, 2, X), np.apply_along_axis(lambda v: v[::-1] * 2, 2, X))
    _same(tnp.apply_along_axis(lambda v: tnp.outer(v, v), 0, X[:, :2, :2]),
          np.apply_along_axis(lambda v: np.outer(v, v), 0, X[:, :2, :2]), rtol=1e-4)


def test_setdiff1d_eager_and_with_size_under_jit():
    a = np.array([5, 1, 3, 3, 9, 1, 7], np.int32)
    b = np.array([3, 4, 9], np.int32)
    _same(tnp.setdiff1d(a, b), np.setdiff1d(a, b))
    _same(tnp.setdiff1d(np.array([4, 2, 8], np.int32), b, assume_unique=True),
          np.setdiff1d(np.array([4, 2, 8], np.int32), b, assume_unique=True))
    got = tessera.jit(lambda x, y: tnp.setdiff1d(x, y, size=5, fill_value=-1))(a, b)
    _same(got, np.array([1, 5, 7, -1, -1], np.int32))
    with pytest.raises(tessera.ConcretizationError, match="give size="):
        tessera.jit(lambda x, y: tnp.setdiff1d(x, y))(a, b)


def test_nancumsum_and_nancumprod_match_numpy():
    x = X.copy()
    x[x > 1] = np.nan
    _same(tnp.nancumsum(x, axis=1), np.nancumsum(x, axis=1), rtol=1e-4)
    _same(tnp.nancumprod(x[0], axis=None), np.nancumprod(x[0], axis=None), rtol=1e-4)


# ---- _np_signal -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("n,m", [(7, 3), (3, 7), (6, 6), (5, 2), (1, 4)])
def test_convolve_and_correlate_match_numpy(mode, n, m):
    a = rng.standard_normal(n).astype(np.float32)
    v = rng.standard_normal(m).astype(np.float32)
    _same(tnp.convolve(a, v, mode=mode), np.convolve(a.astype(np.float64), v, mode=mode), rtol=1e-4)
    _same(tnp.correlate(a, v, mode=mode), np.correlate(a.astype(np.float64), v, mode=mode), rtol=1e-4)


def test_convolve_of_integers_is_exact_and_errors_are_clear():
    a, v = np.array([1, 2, 3, -4], np.int32), np.array([2, -1, 5], np.int32)
    _same(tnp.convolve(a, v), np.convolve(a, v), dtype=np.int32)
    with pytest.raises(ValueError, match="only 1-d arrays"):
        tnp.convolve(X, X[0, 0])
    with pytest.raises(ValueError, match="mode must be one of"):
        tnp.convolve(a, v, mode="circular")


def test_polynomials_match_numpy():
    x = np.linspace(-2, 3, 11).astype(np.float32)
    p = np.array([0.5, -1.0, 2.0, 3.0], np.float32)
    _same(tnp.polyval(p, x), np.polyval(p.astype(np.float64), x), rtol=1e-5)
    _same(tnp.vander(x[:4]), np.vander(x[:4]))
    _same(tnp.vander(np.array([-2, 3, 5], np.int32), 4, increasing=True),
          np.vander(np.array([-2, 3, 5]), 4, increasing=True).astype(np.int32))
    y = np.polyval(p, x) + 0.01 * rng.standard_normal(11)
    _same(tnp.polyfit(x, y.astype(np.float32), 3), np.polyfit(x.astype(np.float64), y, 3), rtol=2e-3, atol=2e-3)
    y2 = np.stack([y, 2 * y + 1], 1)
    _same(tnp.polyfit(x, y2.astype(np.float32), 2), np.polyfit(x.astype(np.float64), y2, 2), rtol=2e-3, atol=2e-3)
    w = np.linspace(1, 2, 11)
    _same(tnp.polyfit(x, y.astype(np.float32), 2, w=w.astype(np.float32)), np.polyfit(x, y, 2, w=w), rtol=2e-3,
          atol=2e-3)
    c, cv = tnp.polyfit(x, y.astype(np.float32), 2, cov=True)
    nc, ncv = np.polyfit(x.astype(np.float64), y, 2, cov=True)
    _same(cv, ncv, rtol=2e-2, atol=1e-6)


def test_gradient_ediff1d_trapezoid_match_numpy():
    f = X[0]
    for got, want in zip(tnp.gradient(f), np.gradient(f)):
        _same(got, want)
    _same(tnp.gradient(f, 0.5, axis=1), np.gradient(f, 0.5, axis=1))
    xs = np.cumsum(rng.uniform(0.1, 1.0, 5)).astype(np.float32)
    _same(tnp.gradient(f, xs, axis=1), np.gradient(f, xs, axis=1), rtol=1e-4)
    got = tnp.gradient(X, 1.0, 2.0, xs)
    for g, w in zip(got, np.gradient(X, 1.0, 2.0, xs)):
        _same(g, w, rtol=1e-4)
    with pytest.raises(NotImplementedError, match="edge_order=1"):
        tnp.gradient(f, edge_order=2)
    _same(tnp.ediff1d(X[0], to_begin=[-5.0], to_end=[7.0, 8.0]), np.ediff1d(X[0], to_begin=[-5.0], to_end=[7.0, 8.0]))
    _same(tnp.trapezoid(X, axis=1), np.trapezoid(X, axis=1) if hasattr(np, "trapezoid") else np.trapz(X, axis=1))
    trap = np.trapezoid if hasattr(np, "trapezoid") else np.trapz
    _same(tnp.trapezoid(X, xs), trap(X, xs), rtol=1e-4)
    _same(tnp.trapezoid(X[0], dx=0.25, axis=0), trap(X[0], dx=0.25, axis=0))


def test_cov_and_corrcoef_match_numpy():
    m = X[0]
    _same(tnp.cov(m), np.cov(m.astype(np.float64)), rtol=1e-4)
    _same(tnp.cov(m, rowvar=False, bias=True), np.cov(m.astype(np.float64), rowvar=False, bias=True), rtol=1e-4)
    _same(tnp.cov(m[0], m[1]), np.cov(m[0].astype(np.float64), m[1]), rtol=1e-4)
    fw = np.array([1, 2, 1, 3, 1], np.int32)
    aw = np.array([0.5, 1.0, 2.0, 1.0, 0.25], np.float32)
    _same(tnp.cov(m, fweights=fw, aweights=aw), np.cov(m.astype(np.float64), fweights=fw, aweights=aw), rtol=1e-4)
    _same(tnp.cov(m, ddof=0, aweights=aw), np.cov(m.astype(np.float64), ddof=0, aweights=aw), rtol=1e-4)
    _same(tnp.cov(m[0]), np.cov(m[0].astype(np.float64)), rtol=1e-4)
    _same(tnp.corrcoef(m), np.corrcoef(m.astype(np.float64)), rtol=1e-4)
    _same(tnp.corrcoef(m[0], m[1]), np.corrcoef(m[0].astype(np.float64), m[1]), rtol=1e-4)


def test_histogram2d_matches_numpy():
    x = rng.standard_normal(200).astype(np.float32)
    y = rng.standard_normal(200).astype(np.float32)
    for kw in [{}, {"bins": 4}, {"bins": (3, 5)}, {"bins": [np.array([-2, 0, 2], np.float32), 4]},
               {"bins": 3, "range": [(-1, 1), (-2, 2)]}, {"bins": 4, "density": True},
               {"bins": 4, "weights": np.abs(x)}]:
        got = tnp.histogram2d(x, y, **kw)
        want = np.histogram2d(x.astype(np.float64), y.astype(np.float64), **kw)
        for g, w in zip(got, want):
            _same(g, w, rtol=1e-4)


# ---- gradients --------------------------------------------------------------------------------------------

def test_gradients_through_convolve_polyval_cov_and_kron_match_finite_differences():
    a = rng.standard_normal(6)
    v = rng.standard_normal(3)

    def check(f_t, f_np, x, rtol=2e-3):
        g = tessera.grad(lambda t: f_t(t))(x.astype(np.float32))
        _same(g, finite_difference(f_np, x), rtol=rtol, atol=2e-3)

    w = rng.standard_normal(8)
    check(lambda t: tnp.sum(tnp.convolve(t, v.astype(np.float32)) * w.astype(np.float32)),
          lambda t: np.sum(np.convolve(t, v) * w), a)
    check(lambda t: tnp.sum(tnp.correlate(t, v.astype(np.float32), mode="same") * w[:6].astype(np.float32)),
          lambda t: np.sum(np.correlate(t, v, mode="same") * w[:6]), a)
    check(lambda t: tnp.sum(tnp.polyval(t, tnp.asarray(a.astype(np.float32)))),
          lambda t: np.sum(np.polyval(t, a)), v)
    m = rng.standard_normal((3, 5))
    check(lambda t: tnp.sum(tnp.cov(t) * tnp.asarray(np.eye(3, dtype=np.float32) + 1)),
          lambda t: np.sum(np.cov(t) * (np.eye(3) + 1)), m)
    check(lambda t: tnp.sum(tnp.kron(t, tnp.asarray(m[:2, :2].astype(np.float32))) ** 2),
          lambda t: np.sum(np.kron(t, m[:2, :2]) ** 2), m[:2, :3])
    check(lambda t: tnp.sum(tnp.cross(t, tnp.asarray(m[:, :3].astype(np.float32))) * 1.5),
          lambda t: np.sum(np.cross(t, m[:, :3]) * 1.5), m[:, 2:])


def test_traced_forms_match_eager():
    f = tessera.jit(lambda a, v: (tnp.convolve(a, v, mode="same"), tnp.polyval(v, a), tnp.kron(a[:2], v),
                                  tnp.cov(tnp.stack([a, a * a])), tnp.gradient(a), tnp.trapezoid(a)))
    a = X[0, 0]
    v = X[1, 1, :3]
    for got, want in zip(f(a, v), (np.convolve(a, v, mode="same"), np.polyval(v, a), np.kron(a[:2], v),
                                   np.cov(np.stack([a, a * a]).astype(np.float64)), np.gradient(a),
                                   np.trapezoid(a) if hasattr(np, "trapezoid") else np.trapz(a))):
        _same(got, want, rtol=1e-4)


# ---- second group: grids, windows, picking, set operations, polynomial arithmetic, Array API names ---------

def test_ranges_and_grids_match_numpy():
    _same(tnp.logspace(0, 2, 5), np.logspace(0, 2, 5), rtol=1e-5)
    _same(tnp.logspace(1, 3, 4, endpoint=False, base=2.0), np.logspace(1, 3, 4, endpoint=False, base=2.0), rtol=1e-5)
    _same(tnp.geomspace(1, 1000, 4), np.geomspace(1, 1000, 4), rtol=1e-5)
    _same(tnp.geomspace(-8, -1, 4, endpoint=False), np.geomspace(-8, -1, 4, endpoint=False), rtol=1e-5)
    with pytest.raises(ValueError, match="cannot include zero"):
        tnp.geomspace(0, 5)
    _same(tnp.indices((2, 3)), np.indices((2, 3)))
    for g, w in zip(tnp.indices((2, 3, 4), sparse=True), np.indices((2, 3, 4), sparse=True)):
        _same(g, w)
    _same(tnp.fromfunction(lambda i, j: i * 10 + j, (3, 4)), np.fromfunction(lambda i, j: i * 10 + j, (3, 4)))
    for g, w in zip(tnp.ix_([0, 2], np.array([True, False, True, True])), np.ix_([0, 2], [True, False, True, True])):
        _same(g, w)
    _same(tnp.mgrid[0:3, 1:5:2], np.mgrid[0:3, 1:5:2])
    _same(tnp.mgrid[-1:1:5j], np.mgrid[-1:1:5j])
    for g, w in zip(tnp.ogrid[0:2, 0:1:3j], np.ogrid[0:2, 0:1:3j]):
        _same(g, w)
    a = np.zeros((4, 5))
    for f in ("tril_indices_from", "triu_indices_from"):
        for g, w in zip(getattr(tnp, f)(a, k=1), getattr(np, f)(a, k=1)):
            _same(g, w)
    for g, w in zip(tnp.diag_indices_from(np.zeros((3, 3, 3))), np.diag_indices_from(np.zeros((3, 3, 3)))):
        _same(g, w)
    for g, w in zip(tnp.mask_indices(4, tnp.triu, 1), np.mask_indices(4, np.triu, 1)):
        _same(g, w)


@pytest.mark.parametrize("M", [0, 1, 2, 7, 12])
def test_windows_match_numpy(M):
    for name in ("bartlett", "blackman", "hamming", "hanning"):
        _same(getattr(tnp, name)(M), getattr(np, name)(M), atol=2e-6)
    _same(tnp.kaiser(M, 6.5), np.kaiser(M, 6.5), rtol=1e-5, atol=1e-6)


def test_i0_matches_numpy_across_the_switch():
    x = np.concatenate([np.linspace(-30, 30, 241), [0.0, 1e-3, 14.999, 15.0, 15.001, 40.0]]).astype(np.float32)
    _same(tnp.i0(x), np.i0(x.astype(np.float64)), rtol=2e-6)


def test_picking_functions_match_numpy():
    a = np.array([[0, 2, 1], [1, 0, 2]], np.int32)
    choices = [np.arange(6).reshape(2, 3), np.full((2, 3), 10), np.array([100, 200, 300])]
    _same(tnp.choose(a, choices), np.choose(a, choices).astype(np.int32))
    _same(tnp.choose(a + 2, choices, mode="wrap"), np.choose(a + 2, choices, mode="wrap").astype(np.int32))
    _same(tnp.choose(a + 2, choices, mode="clip"), np.choose(a + 2, choices, mode="clip").astype(np.int32))
    with pytest.raises(ValueError, match="out of bounds"):
        tnp.choose(a + 2, choices)
    cond = np.array([True, False, True, True])
    _same(tnp.compress(cond, X, axis=1), np.compress(cond, X, axis=1))
    _same(tnp.compress(cond[:2], X), np.compress(cond[:2], X))
    _same(tnp.extract(X > 0.5, X), np.extract(X > 0.5, X))
    got = tessera.jit(lambda c, x: tnp.compress(c, x, axis=1, size=4, fill_value=-1))(cond, X)
    want = np.concatenate([np.compress(cond, X, axis=1), np.full((3, 1, 5), -1, np.float32)], 1)
    _same(got, want)
    flat = X.ravel().copy()
    np.put(flat, [0, 7, -1], [5.0, 6.0])
    _same(tnp.put(X, np.array([0, 7, -1]), np.array([5.0, 6.0], np.float32), inplace=False), flat.reshape(X.shape))
    with pytest.raises(ValueError, match="inplace=False"):
        tnp.put(X, 0, 1.0)
    idx = np.argsort(X, axis=2)[..., :2]
    want = X.copy()
    np.put_along_axis(want, idx, -9.0, axis=2)
    _same(tnp.put_along_axis(X, idx, -9.0, axis=2, inplace=False), want)
    for shape, wrap in [((4, 4), False), ((7, 3), True), ((7, 3), False), ((3, 3, 3), False)]:
        want = np.zeros(shape, np.float32)
        np.fill_diagonal(want, 5.0, wrap=wrap)
        _same(tnp.fill_diagonal(np.zeros(shape, np.float32), 5.0, wrap=wrap, inplace=False), want)


def test_layout_helpers_match_numpy():
    for f in ("hsplit", "vsplit", "dsplit"):
        for g, w in zip(getattr(tnp, f)(X, [1, 2]), getattr(np, f)(X, [1, 2])):
            _same(g, w)
    for g, w in zip(tnp.unstack(X, axis=1), [X[:, i] for i in range(4)]):
        _same(g, w)
    _same(tnp.rollaxis(X, 2), np.rollaxis(X, 2))
    _same(tnp.rollaxis(X, 0, 2), np.rollaxis(X, 0, 2))
    A, B = np.ones((2, 2), np.float32), np.zeros((2, 3), np.float32)
    C, D = np.full((1, 2), 3, np.float32), np.full((1, 3), 4, np.float32)
    _same(tnp.block([[A, B], [C, D]]), np.block([[A, B], [C, D]]))
    _same(tnp.block([X[0, 0], X[1, 1]]), np.block([X[0, 0], X[1, 1]]))
    _same(tnp.block([[X[0, 0]], [X[1, 1]]]), np.block([[X[0, 0]], [X[1, 1]]]))
    _same(tnp.apply_over_axes(tnp.sum, X, [0, 2]), np.apply_over_axes(np.sum, X, [0, 2]), rtol=1e-4)
    assert bool(tnp.array_equiv(X[0, 0], np.broadcast_to(X[0, 0], (3, 5))))
    assert not bool(tnp.array_equiv(X[0, 0], X[0, :, :4]))
    _same(tnp.trim_zeros(np.array([0, 0, 1, 0, 2, 0], np.int32)), np.trim_zeros(np.array([0, 0, 1, 0, 2, 0])).astype(np.int32))
    _same(tnp.trim_zeros(np.array([0, 0, 1, 0, 2, 0], np.int32), "b"), np.array([0, 0, 1, 0, 2], np.int32))


def test_set_operations_match_numpy_eagerly_and_with_size_under_jit():
    a = np.array([5, 1, 3, 3, 9, 1, 7, 7], np.int32)
    b = np.array([3, 4, 9, 9, 0, 7], np.int32)
    for name in ("union1d", "intersect1d", "setxor1d", "setdiff1d"):
        _same(getattr(tnp, name)(a, b), getattr(np, name)(a, b))
        want = getattr(np, name)(a, b)
        got = tessera.jit(lambda x, y, f=getattr(tnp, name): f(x, y, size=8, fill_value=-1))(a, b)
        _same(got, np.concatenate([want, np.full(8 - len(want), -1)]).astype(np.int32))
    ua, ub = np.unique(a), np.unique(b)
    _same(tnp.intersect1d(ua, ub, assume_unique=True), np.intersect1d(ua, ub, assume_unique=True))
    _same(tnp.setxor1d(ua, ub, assume_unique=True), np.setxor1d(ua, ub, assume_unique=True))
    with pytest.raises(tessera.ConcretizationError, match="give size="):
        tessera.jit(tnp.union1d)(a, b)


def test_polynomial_arithmetic_matches_numpy():
    p = np.array([3.0, -2.0, 0.5, 4.0], np.float32)
    q = np.array([1.0, 2.0], np.float32)
    _same(tnp.polyadd(p, q), np.polyadd(p, q))
    _same(tnp.polysub(q, p), np.polysub(q, p))
    _same(tnp.polymul(p, q), np.polymul(p, q), rtol=1e-5)
    _same(tnp.polyder(p), np.polyder(p))
    _same(tnp.polyder(p, 2), np.polyder(p, 2))
    _same(tnp.polyint(p), np.polyint(p), rtol=1e-6)
    _same(tnp.polyint(p, 2, k=[1.0, -3.0]), np.polyint(p, 2, k=[1.0, -3.0]), rtol=1e-6)
    quotient, remainder = tnp.polydiv(p, q)
    nq, nr = np.polydiv(p.astype(np.float64), q)
    _same(quotient, nq, rtol=1e-5)
    _same(np.asarray(remainder)[-len(nr):], nr, rtol=1e-5, atol=1e-5)
    _same(tnp.polydiv(p, q, trim_leading_zeros=True)[1], nr, rtol=1e-5, atol=1e-5)
    roots = np.array([1.0, -2.0, 0.5], np.float32)
    _same(tnp.poly(roots), np.poly(roots), rtol=1e-6)


def test_number_helpers_match_numpy():
    x = np.array([-3.5, -0.0, 0.0, 2.0, -1.0], np.float32)
    _same(tnp.fabs(np.array([-3, 4], np.int32)), np.fabs(np.array([-3, 4])))
    _same(tnp.angle(x), np.angle(x))
    _same(tnp.angle(x, deg=True), np.angle(x, deg=True), rtol=1e-6)
    assert np.asarray(tnp.isreal(x)).all() and not np.asarray(tnp.iscomplex(x)).any()
    assert tnp.isrealobj(tnp.asarray(x)) and not tnp.iscomplexobj(tnp.asarray(x))
    phase = np.cumsum(rng.uniform(-3, 3, (2, 40)), axis=1).astype(np.float32)
    wrapped = np.angle(np.exp(1j * phase)).astype(np.float32)
    _same(tnp.unwrap(wrapped), np.unwrap(wrapped), rtol=1e-4, atol=1e-4)
    _same(tnp.unwrap(wrapped * 2, period=4 * np.pi, axis=1), np.unwrap(wrapped * 2, period=4 * np.pi, axis=1),
          rtol=1e-4, atol=1e-4)


def test_array_api_names():
    a = X[0]
    for ours, numpys in [("acos", "arccos"), ("asinh", "arcsinh"), ("atan", "arctan")]:
        _same(getattr(tnp, ours)(np.clip(a, -1, 1)), getattr(np, numpys)(np.clip(a, -1, 1)), rtol=1e-5)
    _same(tnp.atan2(a, a + 1), np.arctan2(a, a + 1), rtol=1e-5)
    _same(tnp.pow(np.abs(a), 1.5), np.power(np.abs(a), 1.5), rtol=1e-5)
    _same(tnp.concat([a, a], axis=1), np.concatenate([a, a], axis=1))
    _same(tnp.permute_dims(X, (2, 0, 1)), np.transpose(X, (2, 0, 1)))
    _same(tnp.matrix_transpose(X), np.swapaxes(X, -1, -2))
    _same(tnp.vecdot(X, X[0]), np.sum(X * X[0], -1), rtol=1e-5)
    _same(tnp.matvec(X, X[0, 0]), X @ X[0, 0], rtol=1e-5)
    _same(tnp.vecmat(X[:, 0, :4], X), (X[:, 0, :4][:, None, :] @ X)[:, 0], rtol=1e-5)
    _same(tnp.cumulative_prod(X[0, 0], include_initial=True), np.concatenate([[1.0], np.cumprod(X[0, 0])]), rtol=1e-5)
    _same(tnp.bitwise_left_shift(np.abs(I), 2), np.left_shift(np.abs(I), 2))
    assert tnp.issubdtype(tnp.asarray(X).dtype, tnp.floating) and not tnp.issubdtype(tnp.asarray(I).dtype, tnp.floating)
    assert tnp.issubdtype(tnp.asarray(I).dtype, tnp.integer)


def test_vectorize_with_and_without_a_signature():
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    y = rng.standard_normal((4, 5)).astype(np.float32)
    dot = tnp.vectorize(lambda a, b: tnp.dot(a, b), signature="(n),(n)->()")
    _same(dot(x, y), np.einsum("ijk,jk->ij", x, y), rtol=1e-5)
    outer = tnp.vectorize(lambda a, b: tnp.outer(a, b), signature="(m),(n)->(m,n)")
    _same(outer(x[:, 0, :2], y[0, :3]), np.einsum("im,n->imn", x[:, 0, :2], y[0, :3]), rtol=1e-6)
    step = tnp.vectorize(lambda a, b: tnp.where(a > b, a - b, a + b))
    _same(step(x, y[0]), np.where(x > y[0], x - y[0], x + y[0]))
    scaled = tnp.vectorize(lambda a, k: a * k, excluded={1})
    _same(scaled(x[0], 3.0), x[0] * 3.0)
    _same(tessera.jit(dot)(x, y), np.einsum("ijk,jk->ij", x, y), rtol=1e-5)
    with pytest.raises(ValueError, match="core dim 'n'"):
        dot(x, y[:, :4])
    with pytest.raises(ValueError, match="not a valid gufunc signature"):
        tnp.vectorize(lambda a: a, signature="(n->()")


def test_isdtype():
    assert tnp.isdtype(tnp.float32, "real floating") and tnp.isdtype(tnp.bfloat16, "numeric")
    assert tnp.isdtype(tnp.int32, ("bool", "integral")) and not tnp.isdtype(tnp.uint8, "signed integer")
    assert tnp.isdtype(tnp.bool_, "bool") and tnp.isdtype(tnp.float16, tnp.float16)
    with pytest.raises(ValueError, match="unknown kind"):
        tnp.isdtype(tnp.float32, "floats")
