"""tessera.lax's reduce, mulhi, bessel_i1e and bessel_i0e (with tessera.scipy.special's i1, i1e, i0e),
custom_root and custom_linear_solve, and the truncated variance-scaling initializers, against independent
references: numpy folds and float64 products, a float64 Bessel series and scipy's stored values, Newton's method
and numpy.linalg.solve in float64 with their finite differences, analytic derivatives, and the truncated normal's
known moments."""
import math
import operator

import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
import tessera.scipy.special as special
from tessera import lax, random
from tessera.nn import initializers as I

from finite_differences import finite_difference


def _close(got, want, rtol=1e-6, atol=1e-6):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


# ---- reduce -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("computation,numpy_op,init", [
    (lax.add, np.add, 0.0), (lax.mul, np.multiply, 1.0), (lax.max, np.maximum, -np.inf),
    (lax.min, np.minimum, np.inf), (tnp.add, np.add, 0.0), (tnp.multiply, np.multiply, 1.0),
    (tnp.maximum, np.maximum, -np.inf), (operator.add, np.add, 0.0), (operator.mul, np.multiply, 1.0)])
@pytest.mark.parametrize("dims", [(0,), (1,), (0, 2), (0, 1, 2), ()])
def test_reduce_monoids_match_numpy(rng, computation, numpy_op, init, dims):
    x = rng.uniform(0.5, 1.5, size=(3, 4, 5)).astype(np.float32)
    want = numpy_op.reduce(x.astype(np.float64), axis=dims) if dims else x
    _close(lax.reduce(x, init, computation, dims), want, rtol=1e-5)


def test_reduce_applies_a_non_identity_init_once():
    x = np.arange(1.0, 7.0, dtype=np.float32).reshape(2, 3)
    _close(lax.reduce(x, 1.0, lax.add, (0,)), [6.0, 8.0, 10.0])  # 1 + column sums
    _close(lax.reduce(x, 2.0, lax.mul, (1,)), [12.0, 240.0])
    _close(lax.reduce(x, 4.0, lax.max, (1,)), [4.0, 6.0])
    _close(lax.reduce(x, 2.5, lax.min, (0, 1)), 1.0)


def test_reduce_keeps_the_dtype_and_reduces_bools_and_integers():
    ints = np.array([[3, 5, 9], [12, 7, 1]], np.int32)
    got = lax.reduce(ints, 0, lax.add, (1,))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), [17, 20])
    np.testing.assert_array_equal(np.asarray(lax.reduce(ints, 0, lax.bitwise_xor, (1,))), [3 ^ 5 ^ 9, 12 ^ 7 ^ 1])
    # on integers and/or are bitwise: the fold does them
    np.testing.assert_array_equal(np.asarray(lax.reduce(ints, -1, lax.bitwise_and, (0,))), [3 & 12, 5 & 7, 9 & 1])
    np.testing.assert_array_equal(np.asarray(lax.reduce(ints, 0, operator.or_, (0,))), [3 | 12, 5 | 7, 9 | 1])
    b = np.array([[True, False, True], [True, True, True]])
    np.testing.assert_array_equal(np.asarray(lax.reduce(b, True, lax.bitwise_and, (1,))), [False, True])
    np.testing.assert_array_equal(np.asarray(lax.reduce(b, False, tnp.logical_or, (1,))), [True, True])
    np.testing.assert_array_equal(np.asarray(lax.reduce(b, False, operator.xor, (1,))), [False, True])


def test_reduce_folds_an_arbitrary_computation_left_to_right(rng):
    x = rng.normal(size=(3, 4, 2)).astype(np.float32)

    def comp(acc, v):
        return 0.5 * acc + v * v

    got = lax.reduce(x, 1.0, comp, (2, 0))
    # the reduced elements in the operand's row-major order (dim 0, then 2), one kept position at a time, as XLA
    # on the CPU
    want = np.empty(4)
    for j in range(4):
        acc = 1.0
        for v in x[:, j, :].astype(np.float64).ravel():
            acc = 0.5 * acc + v * v
        want[j] = acc
    _close(got, want, rtol=1e-5)
    _close(tessera.jit(lambda x: lax.reduce(x, 1.0, comp, (2, 0)))(x), want, rtol=1e-5)


def test_reduce_of_a_pytree_is_variadic_an_argmax():
    x = np.array([[3.0, 9.0, 1.0, 9.0], [-2.0, -5.0, 0.5, 0.25]], np.float32)
    idx = np.broadcast_to(np.arange(4, dtype=np.int32), x.shape)

    def keep_larger(a, b):
        take_b = b[0] > a[0]
        return tnp.where(take_b, b[0], a[0]), tnp.where(take_b, b[1], a[1])

    values, where = lax.reduce((x, idx), (-np.inf, -1), keep_larger, (1,))
    _close(values, [9.0, 0.5])
    np.testing.assert_array_equal(np.asarray(where), [1, 2])  # the first of the tied maxima
    assert where.dtype == np.int32
    out = lax.reduce({"s": x, "p": x}, {"s": 0.0, "p": 1.0},
                     lambda a, b: {"s": a["s"] + b["s"], "p": a["p"] * b["p"]}, (0,))
    _close(out["s"], x.sum(0))
    _close(out["p"], x.prod(0))


def test_reduce_gradients_against_finite_differences(rng):
    x = rng.uniform(0.5, 1.5, size=(3, 4))

    def fold(v):  # acc * v + sin(v) over dim 1, then summed
        acc = np.full(v.shape[0], 0.5)
        for j in range(v.shape[1]):
            acc = acc * v[:, j] + np.sin(v[:, j])
        return acc.sum()

    got = tessera.grad(lambda v: lax.reduce(v, 0.5, lambda a, b: a * b + tnp.sin(b), (1,)).sum())(
        x.astype(np.float32))
    _close(got, finite_difference(fold, x), rtol=1e-4, atol=1e-4)
    got = tessera.grad(lambda v: (lax.reduce(v, 0.0, lax.add, (0,)) ** 2).sum())(x.astype(np.float32))
    _close(got, finite_difference(lambda v: (v.sum(0) ** 2).sum(), x), rtol=1e-4, atol=1e-4)


def test_reduce_under_vmap_and_over_an_empty_dim():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    _close(tessera.vmap(lambda r: lax.reduce(r, 0.0, lambda a, b: a - b, (0,)))(x), -x.sum(1))
    empty = np.zeros((0, 3), np.float32)
    _close(lax.reduce(empty, 2.0, lambda a, b: a + b, (0,)), [2.0, 2.0, 2.0])
    _close(lax.reduce(empty, 0.0, lax.add, (0,)), [0.0, 0.0, 0.0])


def test_reduce_errors():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="tree structure"):
        lax.reduce((x, x), 0.0, lax.add, (0,))
    with pytest.raises(ValueError, match="scalars"):
        lax.reduce(x, np.zeros(3, np.float32), lax.add, (0,))
    with pytest.raises(ValueError, match="out of range"):
        lax.reduce(x, 0.0, lax.add, (2,))
    with pytest.raises(ValueError, match="repeated"):
        lax.reduce(x, 0.0, lax.add, (1, -1))
    with pytest.raises(ValueError, match="one shape"):
        lax.reduce((x, np.ones(3, np.float32)), (0.0, 0.0), lambda a, b: a, (0,))
    with pytest.raises(TypeError, match="computation returns"):
        lax.reduce((x, x), (0.0, 0.0), lambda a, b: a[0] + b[0], (0,))


# ---- mulhi ------------------------------------------------------------------------------------------------

def test_mulhi_int32_is_the_high_half_of_the_signed_product(rng):
    edges = np.array([0, 1, -1, 2, -2, 2**31 - 1, -2**31, 65535, 65536, -65536, 123456789, -987654321], np.int64)
    a = np.concatenate([np.repeat(edges, len(edges)), rng.integers(-2**31, 2**31, 4000)]).astype(np.int32)
    b = np.concatenate([np.tile(edges, len(edges)), rng.integers(-2**31, 2**31, 4000)]).astype(np.int32)
    got = lax.mulhi(a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), (a.astype(np.int64) * b.astype(np.int64)) >> 32)
    np.testing.assert_array_equal(np.asarray(lax.mulhi(a, 3)), (a.astype(np.int64) * 3) >> 32)


def test_mulhi_unsigned_is_the_high_half_of_the_unsigned_product(rng):
    edges = np.array([0, 1, 2, 65535, 65536, 2**31, 2**32 - 1, 4000000000], np.uint64)
    a = np.concatenate([np.repeat(edges, len(edges)), rng.integers(0, 2**32, 4000, dtype=np.uint64)])
    b = np.concatenate([np.tile(edges, len(edges)), rng.integers(0, 2**32, 4000, dtype=np.uint64)])
    got = lax.mulhi(a.astype(np.uint32), b.astype(np.uint32))
    assert got.dtype == np.uint32
    np.testing.assert_array_equal(np.asarray(got), ((a * b) >> np.uint64(32)).astype(np.uint32))
    u8 = np.array([0, 1, 100, 200, 255], np.uint8)
    np.testing.assert_array_equal(np.asarray(lax.mulhi(u8, u8[::-1])),
                                  (u8.astype(np.int32) * u8[::-1].astype(np.int32)) >> 8)
    with pytest.raises(TypeError, match="same dtypes"):
        lax.mulhi(np.int32(3), np.uint32(3))
    with pytest.raises(TypeError, match="float32"):
        lax.mulhi(np.float32(3), np.float32(3))


# ---- bessel_i1e, i1 ---------------------------------------------------------------------------------------

def _i1_reference(x):
    """(I1(x), exp(-|x|) I1(x)) in float64: the power series (200 terms) below |x| = 30, the asymptotic series
    (20 terms, the next one under 1e-16 of the sum there) above."""
    x = np.asarray(x, np.float64)
    ax = np.abs(x)
    small = np.minimum(ax, 30.0)
    term, total = np.ones_like(x), np.ones_like(x)
    for k in range(1, 200):
        term = term * (small * small / 4) / (k * (k + 1))
        total = total + term
    series = small / 2 * total
    big = np.maximum(ax, 30.0)
    coef, poly, power = 1.0, np.ones_like(x), np.ones_like(x)
    for k in range(1, 20):
        coef *= -(4.0 - (2 * k - 1) ** 2) / (k * 8.0)
        power = power / big
        poly = poly + coef * power
    asym = poly / np.sqrt(2 * np.pi * big)
    scaled = np.sign(x) * np.where(ax > 30, asym, series * np.exp(-ax))
    with np.errstate(over="ignore"):
        full = np.sign(x) * np.where(ax > 30, asym * np.exp(big), series)
    return full, scaled


def test_i1_reference_against_known_values():
    # I1 at 1 and 10 (Abramowitz and Stegun, table 9.8)
    full, _ = _i1_reference([1.0, 10.0])
    np.testing.assert_allclose(full, [0.5651591039924851, 2670.988303701255], rtol=1e-14)


def test_bessel_i1e_over_the_float32_range():
    mags = np.concatenate([np.logspace(-30, 38, 400), np.linspace(0, 40, 801), [14.999, 15.0, 15.001]])
    x = np.concatenate([mags, -mags]).astype(np.float32)
    want = _i1_reference(x.astype(np.float64))[1]
    got = lax.bessel_i1e(x)
    assert got.dtype == np.float32
    _close(got, want, rtol=1e-6, atol=1e-44)
    _close(special.i1e(x), want, rtol=1e-6, atol=1e-44)
    assert np.isfinite(np.asarray(got)).all()


def test_i1_up_to_overflow():
    x = np.concatenate([np.linspace(-88, 88, 707), [1e-20, -3e-5]]).astype(np.float32)
    _close(special.i1(x), _i1_reference(x.astype(np.float64))[0], rtol=1e-6, atol=1e-30)
    got = np.asarray(special.i1(np.array([100.0, -100.0], np.float32)))
    assert got[0] == np.inf and got[1] == -np.inf  # past float32's range, as float32 I1


def test_bessel_i1e_gradient_against_finite_differences():
    x = np.array([-20.0, -3.0, -0.5, 0.0, 0.25, 2.0, 14.0, 16.0, 50.0])
    got = tessera.grad(lambda v: lax.bessel_i1e(v).sum())(x.astype(np.float32))
    want = finite_difference(lambda v: _i1_reference(v)[1].sum(), x, eps=1e-5)
    _close(got, want, rtol=2e-5, atol=2e-6)


# scipy.special.i0e and i1e (scipy 1.17.1, float64) at float32 values from 0 through subnormals to float32's
# largest: past 5.4e37, 2 pi x overflows float32, where exp(-x) I(x) ~ 1 / sqrt(2 pi x) is still about 2e-20.
F32_X = [0.0, 1.401298464324817e-45, 9.999999350456404e-39, 1.0000000031710769e-30, 1.000000013351432e-10, 0.5,
         14.899999618530273, 15.100000381469727, 100.0, 10000.0, 10000000000.0, 1.0000000150474662e+30,
         9.999999933815813e+36, 6.000000213819608e+37, 3.0000000054977558e+38, 3.4028234663852886e+38]
SCIPY_I0E = [1.0, 1.0, 1.0, 1.0, 0.9999999998999998, 0.64503527044915, 0.10425387418292392, 0.10354877987453613,
             0.03994437929909668, 0.0039894726746047314, 3.9894228040641945e-06, 3.9894227739989746e-16,
             1.261566265184867e-19, 5.150322601872533e-20, 2.3032943276984118e-20, 2.1626704999903773e-20]
SCIPY_I1E = [0.0, 7.006492321624087e-46, 4.999999675228203e-39, 5.000000015855385e-31, 5.000000066257161e-11,
             0.15642080318487173, 0.10069230003106164, 0.10005903106588733, 0.03974415302513025,
             0.003989273195983662, 3.989422803864723e-06, 3.9894227739989746e-16, 1.261566265184867e-19,
             5.150322601872533e-20, 2.3032943276984118e-20, 2.1626704999903773e-20]
# The same in float64, up to float64's largest value (whose 2 pi x overflows float64 too).
F64_X = [0.0, 1e-300, 1e-10, 0.5, 10.0, 1e10, 1e30, 3e38, 1e300, 2.8e307, 1.7976931348623157e+308]
SCIPY_I0E_64 = [1.0, 1.0, 0.9999999998999998, 0.64503527044915, 0.1278333371634286, 3.9894228040641945e-06,
                3.989422804014327e-16, 2.3032943298089033e-20, 3.989422804014327e-151, 7.539300438651343e-155,
                2.9754474593159e-155]
SCIPY_I1E_64 = [0.0, 5.000000000000001e-301, 4.999999999500001e-11, 0.15642080318487173, 0.1212626813844555,
                3.989422803864723e-06, 3.989422804014327e-16, 2.3032943298089033e-20, 3.989422804014327e-151,
                7.539300438651343e-155, 2.9754474593159e-155]
# And at float16 values: the power series' terms pass float16's largest value near |x| = 12.
F16_X = [0.0, 1.1920928955078125e-07, 1.0, 10.0, 14.8984375, 15.0, 100.0, 10000.0, 65504.0]
SCIPY_I0E_16 = [1.0, 0.9999998807907209, 0.46575960759364043, 0.1278333371634286, 0.10425943822961863,
                0.1038995314488227, 0.03994437929909668, 0.0039894726746047314, 0.0015587518577658448]
SCIPY_I1E_16 = [0.0, 5.960463766996377e-08, 0.2079104153497085, 0.1212626813844555, 0.10069729339765274,
                0.10037417504516664, 0.03974415302513025, 0.003989273195983662, 0.0015587399595778952]


@pytest.mark.parametrize("dtype,xs,i0e,i1e,tol", [
    (np.float32, F32_X, SCIPY_I0E, SCIPY_I1E, dict(rtol=1e-6, atol=2e-45)),
    (np.float64, F64_X, SCIPY_I0E_64, SCIPY_I1E_64, dict(rtol=1e-14, atol=1e-320)),
    (np.float16, F16_X, SCIPY_I0E_16, SCIPY_I1E_16, dict(rtol=1e-3, atol=0))])
def test_bessel_i0e_i1e_match_scipy_up_to_the_largest_float(dtype, xs, i0e, i1e, tol):
    x = np.array(xs + [-v for v in xs], dtype)
    want0, want1 = np.array(i0e + i0e), np.array(i1e + [-v for v in i1e])  # i0e is even, i1e odd
    for name, f, want in [("bessel_i0e", lax.bessel_i0e, want0), ("special.i0e", special.i0e, want0),
                          ("bessel_i1e", lax.bessel_i1e, want1), ("special.i1e", special.i1e, want1)]:
        got = f(tnp.asarray(x, dtype))
        assert np.asarray(got).dtype == dtype, name
        _close(got, want, **tol)


# ---- custom_root ------------------------------------------------------------------------------------------

def _newton(f, x0, steps=30):
    return lax.fori_loop(0, steps, lambda i, x: x - f(x) / (2 * x), x0)


def _sqrt_by_newton(a, with_while=False):
    f = lambda x: x * x - a  # noqa: E731

    def solve(f, x0):
        if with_while:
            return lax.while_loop(lambda x: tnp.abs(f(x)) > 1e-6 * a, lambda x: x - f(x) / (2 * x), x0)
        return _newton(f, x0)

    return lax.custom_root(f, tnp.asarray(1.0), solve, lambda g, y: y / g(1.0))


def _sqrt_reference(a):
    x = 1.0
    for _ in range(60):
        x = x - (x * x - a) / (2 * x)
    return x


@pytest.mark.parametrize("with_while", [False, True])
def test_custom_root_sqrt_and_its_derivative(with_while):
    for a in (0.5, 2.0, 9.0):
        _close(_sqrt_by_newton(tnp.asarray(a), with_while), math.sqrt(a))
        got = tessera.grad(lambda v: _sqrt_by_newton(v, with_while))(tnp.asarray(a))
        _close(got, 0.5 / math.sqrt(a), rtol=1e-5)  # d sqrt(a) / da
        _close(got, finite_difference(lambda v: _sqrt_reference(float(v)), a), rtol=1e-5)


def test_custom_root_under_jit_vmap_and_jvp():
    a = np.array([0.25, 3.0, 7.0], np.float32)
    grad = tessera.grad(lambda v: _sqrt_by_newton(v, True))
    _close(tessera.vmap(grad)(a), 0.5 / np.sqrt(a), rtol=1e-5)
    _close(tessera.jit(grad)(a[1]), 0.5 / math.sqrt(3.0), rtol=1e-5)
    out, tangent = tessera.jvp(lambda v: _sqrt_by_newton(v, True), (tnp.asarray(3.0),), (tnp.asarray(2.0),))
    _close(out, math.sqrt(3.0))
    _close(tangent, 1.0 / math.sqrt(3.0), rtol=1e-5)


def test_custom_root_of_a_vector_system_against_finite_differences(rng):
    # f(x) = x + p tanh(x) - t, elementwise coupled through the matrix m: x + p * tanh(m x) - t
    m = (np.eye(3) + 0.2 * rng.normal(size=(3, 3)))
    p0, t0 = np.array([0.3, 0.5, 0.2]), np.array([1.0, -0.5, 2.0])

    def root(p, t):
        f = lambda x: x + p * tnp.tanh(tnp.asarray(m, np.float32) @ x) - t  # noqa: E731

        def solve(f, x0):
            def step(i, x):
                jac = tessera.jacfwd(f)(x)
                return x - tnp.linalg.solve(jac, f(x))
            return lax.fori_loop(0, 20, step, x0)

        def tangent_solve(g, y):
            return tnp.linalg.solve(tessera.jacfwd(g)(y), y)

        return lax.custom_root(f, tnp.zeros(3), solve, tangent_solve)

    def root_reference(p, t):
        x = np.zeros(3)
        for _ in range(50):
            z = np.tanh(m @ x)
            jac = np.eye(3) + (p * (1 - z * z))[:, None] * m
            x = x - np.linalg.solve(jac, x + p * z - t)
        return x

    w = np.array([1.0, -2.0, 0.5])
    x = root(tnp.asarray(p0, np.float32), tnp.asarray(t0, np.float32))
    _close(x, root_reference(p0, t0), rtol=1e-5, atol=1e-6)
    gp, gt = tessera.grad(lambda p, t: (root(p, t) * tnp.asarray(w, np.float32)).sum(), argnums=(0, 1))(
        tnp.asarray(p0, np.float32), tnp.asarray(t0, np.float32))
    _close(gp, finite_difference(lambda p: root_reference(p, t0) @ w, p0), rtol=1e-4, atol=1e-5)
    _close(gt, finite_difference(lambda t: root_reference(p0, t) @ w, t0), rtol=1e-4, atol=1e-5)


def test_custom_root_pytree_aux_and_no_gradient_to_the_guess():
    def root(a, guess):
        f = lambda x: {"u": x["u"] ** 3 - a, "v": 2.0 * x["v"] - a}  # noqa: E731

        def solve(f, x0):
            u = lax.fori_loop(0, 40, lambda i, u: u - (u ** 3 - a) / (3 * u * u), x0["u"])
            return {"u": u, "v": a / 2.0}, tnp.asarray(40)

        def tangent_solve(g, y):
            d = g({"u": tnp.asarray(1.0), "v": tnp.asarray(1.0)})
            return {"u": y["u"] / d["u"], "v": y["v"] / d["v"]}

        return lax.custom_root(f, guess, solve, tangent_solve, has_aux=True)

    guess = {"u": tnp.asarray(1.0), "v": tnp.asarray(0.0)}
    (x, steps) = root(tnp.asarray(8.0), guess)
    _close(x["u"], 2.0)
    _close(x["v"], 4.0)
    assert int(steps) == 40
    g = tessera.grad(lambda a: root(a, guess)[0]["u"] + root(a, guess)[0]["v"])(tnp.asarray(8.0))
    _close(g, 1.0 / 12.0 + 0.5, rtol=1e-5)  # d cbrt(a) / da at 8 is 1 / (3 * 4), d (a / 2) / da is 1/2
    g_guess = tessera.grad(lambda u0: root(tnp.asarray(8.0), {"u": u0, "v": tnp.asarray(0.0)})[0]["u"])(
        tnp.asarray(1.5))
    _close(g_guess, 0.0)


def test_custom_root_checks_structures():
    with pytest.raises(TypeError, match="solve\\(\\) output pytree structure"):
        lax.custom_root(lambda x: x * x - 2.0, tnp.asarray(1.0), lambda f, x0: (x0, x0), lambda g, y: y / g(1.0))
    with pytest.raises(TypeError, match="f\\(\\) output pytree structure"):
        lax.custom_root(lambda x: (x, x), tnp.asarray(1.0), lambda f, x0: x0, lambda g, y: y)


# ---- custom_linear_solve ----------------------------------------------------------------------------------

def _system(rng, n=4, spd=False):
    a = rng.normal(size=(n, n)) + n * np.eye(n)
    if spd:
        a = a @ a.T + np.eye(n)
    return a, rng.normal(size=n)


def _direct(a, b, symmetric=False):
    a = tnp.asarray(a, np.float32)
    matvec = lambda x: a @ x  # noqa: E731
    solve = lambda mv, v: tnp.linalg.solve(a, v)  # noqa: E731
    transpose_solve = None if symmetric else (lambda vm, v: tnp.linalg.solve(a.T, v))
    return lax.custom_linear_solve(matvec, b, solve, transpose_solve, symmetric=symmetric)


def test_custom_linear_solve_values_and_gradients_against_numpy(rng):
    a, b = _system(rng)
    w = rng.normal(size=4)
    x = np.linalg.solve(a, b)
    _close(_direct(a, b.astype(np.float32)), x, rtol=1e-5, atol=1e-6)
    loss = lambda a, b: (_direct(a, b) * tnp.asarray(w, np.float32)).sum()  # noqa: E731
    ga, gb = tessera.grad(loss, argnums=(0, 1))(tnp.asarray(a, np.float32), tnp.asarray(b, np.float32))
    lam = np.linalg.solve(a.T, w)  # analytic: d/db = A^-T w, d/dA = -lam x^T
    _close(gb, lam, rtol=1e-5, atol=1e-6)
    _close(ga, -np.outer(lam, x), rtol=1e-5, atol=1e-6)
    _close(ga, finite_difference(lambda m: np.linalg.solve(m, b) @ w, a), rtol=1e-4, atol=1e-5)
    da, db = rng.normal(size=(4, 4)), rng.normal(size=4)
    _, tangent = tessera.jvp(loss, (tnp.asarray(a, np.float32), tnp.asarray(b, np.float32)),
                             (tnp.asarray(da, np.float32), tnp.asarray(db, np.float32)))
    _close(tangent, w @ np.linalg.solve(a, db - da @ x), rtol=1e-4, atol=1e-5)  # dx = A^-1 (db - dA x)


def _cg(matvec, b, steps=60):
    """Conjugate gradients in a while_loop (not differentiable by grad, as in JAX)."""
    def cond(state):
        x, r, p, rr, i = state
        return (rr > 1e-14) & (i < steps)

    def body(state):
        x, r, p, rr, i = state
        ap = matvec(p)
        alpha = rr / (p @ ap)
        x, r = x + alpha * p, r - alpha * ap
        rr_new = r @ r
        return x, r, r + (rr_new / rr) * p, rr_new, i + 1

    x0 = tnp.zeros_like(b)
    return lax.while_loop(cond, body, (x0, b, b, b @ b, tnp.asarray(0)))[0]


def test_custom_linear_solve_symmetric_conjugate_gradients(rng):
    a, b = _system(rng, 5, spd=True)
    w = rng.normal(size=5)

    def loss(scale, b):
        m = tnp.asarray(a, np.float32) * scale
        x = lax.custom_linear_solve(lambda v: m @ v, b, _cg, symmetric=True)
        return (x * tnp.asarray(w, np.float32)).sum()

    x_ref = np.linalg.solve(a, b)
    _close(lax.custom_linear_solve(lambda v: tnp.asarray(a, np.float32) @ v, b.astype(np.float32), _cg,
                                   symmetric=True), x_ref, rtol=1e-4, atol=1e-5)
    gs, gb = tessera.grad(loss, argnums=(0, 1))(tnp.asarray(1.5), tnp.asarray(b, np.float32))
    _close(gb, np.linalg.solve(1.5 * a, w), rtol=1e-4, atol=1e-5)
    _close(gs, finite_difference(lambda s: np.linalg.solve(s * a, b) @ w, 1.5), rtol=1e-4, atol=1e-5)
    _close(tessera.jit(tessera.grad(loss))(tnp.asarray(1.5), tnp.asarray(b, np.float32)), gs, rtol=1e-5)
    # forward mode transposes the backward pass: solve is run again, neither it nor transpose_solve differentiated
    db = rng.normal(size=5)
    _, tangent = tessera.jvp(loss, (tnp.asarray(1.5), tnp.asarray(b, np.float32)),
                             (tnp.asarray(0.5), tnp.asarray(db, np.float32)))
    _close(tangent, 0.5 * gs + np.linalg.solve(1.5 * a, w) @ db, rtol=1e-4, atol=1e-5)
    _close(tessera.vmap(tessera.grad(loss))(tnp.asarray([1.5, 3.0]), tnp.broadcast_to(b.astype(np.float32), (2, 5))),
           [gs, finite_difference(lambda s: np.linalg.solve(s * a, b) @ w, 3.0)], rtol=1e-4, atol=1e-5)


def test_custom_linear_solve_pytree_aux_vmap_and_without_transpose_solve(rng):
    a, b = _system(rng)
    d = np.array([2.0, 4.0], np.float32)
    af = tnp.asarray(a, np.float32)

    def matvec(x):
        return (af @ x[0], d * x[1])

    def solve(mv, v):
        return (tnp.linalg.solve(af, v[0]), v[1] / d), tnp.asarray(7)

    def transpose_solve(vm, v):
        return (tnp.linalg.solve(af.T, v[0]), v[1] / d), tnp.asarray(8)

    rhs = (b.astype(np.float32), np.array([1.0, 3.0], np.float32))
    (x, y), aux = lax.custom_linear_solve(matvec, rhs, solve, transpose_solve, has_aux=True)
    _close(x, np.linalg.solve(a, b), rtol=1e-5, atol=1e-6)
    _close(y, [0.5, 0.75])
    assert int(aux) == 7
    gb = tessera.grad(lambda r: lax.custom_linear_solve(matvec, r, solve, transpose_solve, has_aux=True)[0][0].sum())(
        rhs)
    _close(gb[0], np.linalg.solve(a.T, np.ones(4)), rtol=1e-5, atol=1e-6)
    _close(gb[1], [0.0, 0.0])
    bs = rng.normal(size=(3, 4)).astype(np.float32)
    _close(tessera.vmap(lambda v: _direct(a, v))(bs), np.linalg.solve(a, bs.T.astype(np.float64)).T, rtol=1e-5,
           atol=1e-6)
    # no transpose_solve: the derivative is the (differentiable) solve's own
    w = rng.normal(size=4)
    g = tessera.grad(lambda m: (lax.custom_linear_solve(lambda v: m @ v, b.astype(np.float32),
                                                        lambda mv, v: tnp.linalg.solve(m, v))
                                * tnp.asarray(w, np.float32)).sum())(af)
    _close(g, -np.outer(np.linalg.solve(a.T, w), np.linalg.solve(a, b)), rtol=1e-5, atol=1e-6)


def test_custom_linear_solve_checks_shapes_and_structures():
    b = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="solve\\(\\) output shapes must match b"):
        lax.custom_linear_solve(lambda v: v, b, lambda mv, v: v[:2], symmetric=True)
    with pytest.raises(TypeError, match="matvec\\(\\) output pytree structure"):
        lax.custom_linear_solve(lambda v: (v, v), b, lambda mv, v: v, symmetric=True)


# ---- initializers: JAX's truncated variance scaling ---------------------------------------------------------

TRUNCATED_STD = 0.87962566103423978  # the standard deviation of a unit normal cut at +-2


def _cut_normal_moments(a=2.0):
    """(E z^2, E z^4) of a unit normal cut at +-a, in closed form (integration by parts)."""
    density, mass = math.exp(-a * a / 2) / math.sqrt(2 * math.pi), math.erf(a / math.sqrt(2))
    return 1 - 2 * a * density / mass, 3 - 2 * (a ** 3 + 3 * a) * density / mass


def test_truncated_normal_constant_is_the_cut_normals_deviation():
    assert abs(math.sqrt(_cut_normal_moments()[0]) - TRUNCATED_STD) < 1e-15


@pytest.mark.parametrize("make,shape,variance", [
    (lambda: I.lecun_normal(), (500, 400), 1 / 500),
    (lambda: I.lecun_normal(in_axis=-1, out_axis=-2), (500, 400), 1 / 400),
    (lambda: I.glorot_normal(), (300, 500), 2 / 800),
    (lambda: I.he_normal(), (3, 3, 64, 128), 2 / (9 * 64)),
    (lambda: I.variance_scaling(0.5, "fan_out", "truncated_normal"), (200, 1000), 0.5 / 1000)])
def test_truncated_variance_scaling_std_and_bound(make, shape, variance):
    w = np.asarray(make()(random.PRNGKey(3), shape), np.float64)
    assert w.shape == shape
    assert abs(w.std() / math.sqrt(variance) - 1) < 0.01, (w.std(), math.sqrt(variance))
    bound = 2 * math.sqrt(variance) / TRUNCATED_STD
    assert np.abs(w).max() <= bound * (1 + 1e-6)
    # the samples reach the cut: truncated there, not a narrower distribution
    assert np.abs(w).max() > 0.999 * bound
    # the cut normal's kurtosis (2.37; an untruncated normal's is 3)
    m2, m4 = _cut_normal_moments()
    assert abs(np.mean(w ** 4) / np.mean(w ** 2) ** 2 - m4 / m2 ** 2) < 0.05
