"""The rest of tessera.scipy.special: exponential, sine and cosine, Fresnel and Dawson integrals, the dilogarithm,
Bessel J of integer order, the confluent and Gauss hypergeometric functions, Owen's T, Bernoulli numbers and the
real loggamma. Elementwise compositions of tessera.numpy and tessera.lax (series and continued fractions as
fixed-length loops), so they trace, batch and differentiate; _scipy.py lists them in tessera.scipy.special."""

import math as _math
import operator as _operator
from fractions import Fraction as _Fraction

from . import _tessera as _C
from . import lax as _lax
from . import numpy as _tnp
from ._transforms import custom_jvp as _custom_jvp

_EULER = 0.57721566490153286061
_PI = _math.pi
_SQRT_PI = _math.sqrt(_math.pi)
_TINY = 1e-30
_BIG = 1.0 / _TINY


def _float(*xs):
    """The arguments as arrays of one floating dtype (float64 if any array is, else float32), broadcast together.
    Python numbers are converted straight to that dtype (through float32 they would lose digits)."""
    kinds = {_tnp.asarray(x)._dtype_name for x in xs if not isinstance(x, (int, float))}
    dtype = "f64" if "f64" in kinds else "f32"
    xs = [_tnp.asarray(x, dtype=_tnp.float64 if dtype == "f64" else _tnp.float32) for x in xs]
    return _tnp.broadcast_arrays(*xs) if len(xs) > 1 else xs


def _lgamma(x):
    return _C.lgamma(x)


def _gamma_sign(x):
    """The sign of Gamma(x) (+1 at the poles, whose values are dealt with apart)."""
    k = _tnp.floor(x)
    negative = _tnp.where(_tnp.remainder(k, 2.0) == 0, 1.0, -1.0)
    return _tnp.where(x > 0, 1.0, negative)


def _rgamma(x):
    """1 / Gamma(x), 0 at the poles (x = 0, -1, -2, ...)."""
    pole = _tnp.logical_and(x <= 0, x == _tnp.floor(x))
    safe = _tnp.where(pole, 1.0, x)
    return _tnp.where(pole, 0.0, _gamma_sign(safe) * _tnp.exp(-_lgamma(safe)))


def _nonpositive_integer(x):
    return _tnp.logical_and(x <= 0, x == _tnp.floor(x))


def _cdiv(ar, ai, br, bi):
    """(ar + i ai) / (br + i bi) by Smith's method, which never forms |b|^2 (it overflows float32 for the
    continued fractions' large b)."""
    wide = _tnp.abs(br) >= _tnp.abs(bi)
    r = _tnp.where(wide, bi / _tnp.where(wide, br, 1.0), br / _tnp.where(wide, 1.0, bi))
    den = _tnp.where(wide, br + bi * r, bi + br * r)
    re = _tnp.where(wide, ar + ai * r, ar * r + ai) / den
    im = _tnp.where(wide, ai - ar * r, ai * r - ar) / den
    return re, im


def _complex_lentz(br, bi, step, coefficient, levels):
    """1 / (b + a_1 / (b + step + a_2 / (b + 2 step + ...))) for a complex b = br + i bi and real a_k =
    coefficient(k) (k an array), by the modified Lentz method: one fori_loop of `levels` levels. Returns (re, im)."""
    zero = _tnp.zeros_like(br)

    def body(i, carry):
        br, bi, cr, ci, dr, di, hr, hi = carry
        a = coefficient(_C.astype(i, br._dtype_name) + 1.0)
        br = br + step
        dr, di = _cdiv(1.0, 0.0, a * dr + br, a * di + bi)
        qr, qi = _cdiv(a, 0.0, cr, ci)
        cr, ci = br + qr, bi + qi
        er, ei = cr * dr - ci * di, cr * di + ci * dr
        return br, bi, cr, ci, dr, di, hr * er - hi * ei, hr * ei + hi * er

    dr, di = _cdiv(1.0, 0.0, br, bi)
    carry = (br, bi, zero + _BIG, zero, dr, di, dr, di)
    carry = _lax.fori_loop(0, levels, body, carry)
    return carry[6], carry[7]


# ---- loggamma, bernoulli ------------------------------------------------------------------------------------

def _loggamma(x):
    return _tnp.where(x > 0, _lgamma(_tnp.where(x > 0, x, 1.0)), _tnp.nan)


def loggamma(x):
    """log Gamma(x) for real x > 0 (NaN elsewhere: the real part of scipy's complex result is not taken)."""
    return _lowp(_loggamma, x)


def _bernoulli_fractions(n):
    """B_0 .. B_n exactly (B_1 = -1/2), from the recurrence sum_k C(m + 1, k) B_k = 0."""
    b = []
    for m in range(n + 1):
        total = sum(_math.comb(m + 1, k) * b[k] for k in range(m))
        b.append(_Fraction(1) if m == 0 else -total / (m + 1))
    return b


def bernoulli(n):
    """The Bernoulli numbers B_0 .. B_n (B_1 = -1/2) as an array of n + 1 floats, computed exactly on the host
    (n is a static integer, as in JAX)."""
    n = _operator.index(n)
    if n < 0:
        raise ValueError(f"bernoulli: n must be a non-negative integer, got {n}")
    return _tnp.asarray([float(v) for v in _bernoulli_fractions(n)])


# ---- exponential integrals ----------------------------------------------------------------------------------

_EXPN_TERMS = 30  # the series for x <= 1: x^30 / 30! is under 1e-32
_EXPN_LEVELS = 120  # the continued fraction for x > 1: 1e-15 at x = 1 for every n


def _expn_series(n, x):
    """E_n(x) for 0 < x <= 1: (-x)^(n-1) / (n-1)! (psi(n) - log x) - sum_{k != n-1} (-x)^k / ((k - n + 1) k!),
    the psi(n) = -gamma + H_(n-1) of the term k = n - 1 summed along with it."""
    nm1 = n - 1.0
    logx = _tnp.log(x)
    start = _tnp.where(nm1 == 0, -logx - _EULER, 1.0 / _tnp.where(nm1 == 0, 1.0, nm1))

    def body(i, carry):
        total, fact, harmonic = carry
        k = _C.astype(i, x._dtype_name) + 1.0
        fact = -fact * x / k
        harmonic = harmonic + 1.0 / k
        at = k == nm1
        term = _tnp.where(at, fact * (-logx - _EULER + harmonic), -fact / _tnp.where(at, 1.0, k - nm1))
        return total + term, fact, harmonic

    total, _, _ = _lax.fori_loop(0, _EXPN_TERMS, body, (start, _tnp.ones_like(x), _tnp.zeros_like(x)))
    return total


def _expn_fraction(n, x):
    """E_n(x) for x > 1: e^-x / (x + n - 1 n / (x + n + 2 - 2 (n + 1) / (x + n + 4 - ...))) (modified Lentz)."""
    nm1 = n - 1.0

    def body(i, carry):
        b, c, d, h = carry
        k = _C.astype(i, x._dtype_name) + 1.0
        a = -k * (nm1 + k)
        b = b + 2.0
        d = 1.0 / (a * d + b)
        c = b + a / c
        return b, c, d, h * c * d

    b = x + n
    d = 1.0 / b
    _, _, _, h = _lax.fori_loop(0, _EXPN_LEVELS, body, (b, _tnp.full_like(x, _BIG), d, d))
    return h * _tnp.exp(-x)


def _expn_impl(n, x):
    n, x = _float(n, x)
    small = x <= 1.0
    series = _expn_series(n, _tnp.where(_tnp.logical_and(small, x > 0), x, 0.5))
    fraction = _expn_fraction(n, _tnp.where(small, 2.0, _tnp.where(_tnp.isinf(x), 2.0, x)))
    out = _tnp.where(small, series, fraction)
    out = _tnp.where(x == _tnp.inf, 0.0, out)
    out = _tnp.where(n == 0, _tnp.exp(-x) / x, out)
    at_zero = _tnp.where(n <= 1, _tnp.inf, 1.0 / _tnp.where(n <= 1, 1.0, n - 1.0))
    out = _tnp.where(x == 0, at_zero, out)
    return _tnp.where(_tnp.logical_or(n < 0, x < 0), _tnp.nan, out)


@_custom_jvp
def _expn(n, x):
    return _expn_impl(n, x)


_expn.defjvps(None, lambda t, out, n, x: -_expn_impl(n - 1.0, x) * t)


def expn(n, x):
    """The generalized exponential integral E_n(x) = int_1^inf e^(-x t) / t^n dt for integer n >= 0 and x >= 0:
    its power series for x <= 1, its continued fraction above (120 levels); E_0(x) = e^-x / x, E_n(0) =
    1 / (n - 1) (inf for n <= 1); NaN for n < 0 or x < 0. d/dx E_n = -E_(n-1)."""
    return _lowp(_expn, n, x)


def exp1(x):
    """E_1(x) = int_x^inf e^-t / t dt (x >= 0; NaN below): expn(1, x)."""
    return expn(1.0, x)


_EI_TERMS = 120  # sum x^k / (k k!) for x < 40: the terms past k = 120 are under 1e-17 of the sum
_EI_ASYMPTOTIC = 40.0  # from here e^x / x sum k! / x^k to k = 40, whose smallest term is under 1e-16


def _expi_positive(x):
    """Ei(x) for x > 0: gamma + log x + sum_k x^k / (k k!) below 40, the asymptotic series above."""
    small = x < _EI_ASYMPTOTIC
    xs = _tnp.where(small, x, 1.0)

    def body(i, carry):
        total, term = carry
        k = _C.astype(i, x._dtype_name) + 1.0
        term = term * xs / k
        return total + term / k, term

    total, _ = _lax.fori_loop(0, _EI_TERMS, body, (_tnp.zeros_like(x), _tnp.ones_like(x)))
    series = _EULER + _tnp.log(xs) + total
    xa = _tnp.where(small, _EI_ASYMPTOTIC, x)
    tail, term = _tnp.ones_like(x), _tnp.ones_like(x)
    for k in range(1, int(_EI_ASYMPTOTIC) + 1):
        term = term * (k / xa)
        tail = tail + term
    # e^x / x as one exponential, so that it overflows only where Ei does.
    asymptotic = _tnp.exp(xa - _tnp.log(xa)) * tail
    return _tnp.where(small, series, asymptotic)


def _expi_impl(x):
    (x,) = _float(x)
    positive = _expi_positive(_tnp.where(x > 0, x, 1.0))
    negative = -_expn_impl(_tnp.ones_like(x), _tnp.where(x < 0, -x, 1.0))
    return _tnp.where(x > 0, positive, _tnp.where(x < 0, negative, -_tnp.inf))


@_custom_jvp
def _expi(x):
    return _expi_impl(x)


_expi.defjvps(lambda t, out, x: _tnp.exp(x) / x * t)


def expi(x):
    """The exponential integral Ei(x) = -int_-x^inf e^-t / t dt: its power series below 40, its asymptotic
    series above, -E_1(-x) for x < 0; -inf at 0. d/dx Ei = e^x / x."""
    return _lowp(_expi, x)


# ---- Dawson's integral --------------------------------------------------------------------------------------

_DAWSN_H = 0.25  # Rybicki's step: the error is about exp(-(pi / (2 h))^2), 1e-17
_DAWSN_REACH = 27  # odd offsets to +-27 steps: the terms left out are under exp(-42)


def _dawsn_positive(x):
    """F(x) for x >= 0: its Taylor series x sum (-2 x^2)^k / (2k + 1)!! below 0.2, Rybicki's sum
    1/sqrt(pi) sum_(n odd) e^-(x - n h)^2 / n (centred on the even n0 nearest x / h) below 10, the asymptotic
    series 1/(2x) sum (2k - 1)!! / (2 x^2)^k above."""
    small, large = x < 0.2, x >= 10.0
    xs = _tnp.where(small, x, 0.1)
    term, series = xs, xs
    for k in range(1, 10):
        term = term * (-2.0 * xs * xs / (2 * k + 1))
        series = series + term
    xm = _tnp.where(_tnp.logical_or(small, large), 1.0, x)
    n0 = 2.0 * _tnp.round(xm / (2.0 * _DAWSN_H))
    offset = xm - n0 * _DAWSN_H
    rybicki = _tnp.zeros_like(x)
    for i in range(-_DAWSN_REACH, _DAWSN_REACH + 1, 2):
        rybicki = rybicki + _tnp.exp(-(offset - i * _DAWSN_H) ** 2) / (n0 + float(i))
    rybicki = rybicki / _SQRT_PI
    xl = _tnp.where(large, x, 10.0)
    w = 1.0 / (2.0 * xl * xl)
    term, tail = _tnp.ones_like(x), _tnp.ones_like(x)
    for k in range(1, 11):
        term = term * ((2 * k - 1) * w)
        tail = tail + term
    asymptotic = tail / (2.0 * xl)
    return _tnp.where(small, series, _tnp.where(large, asymptotic, rybicki))


@_custom_jvp
def _dawsn(x):
    return _tnp.sign(x) * _dawsn_positive(_tnp.abs(x))


_dawsn.defjvps(lambda t, out, x: (1.0 - 2.0 * x * out) * t)


def dawsn(x):
    """Dawson's integral F(x) = e^(-x^2) int_0^x e^(t^2) dt (odd). F' = 1 - 2 x F."""
    return _lowp(_dawsn, x)


# ---- sine and cosine integrals, Fresnel integrals -----------------------------------------------------------

_SICI_SWITCH = 4.0
_SICI_LEVELS = 60  # the continued fraction of E_1(i x) to 1e-15 from x = 4


def _sici_positive(x):
    """(Si(x), Ci(x)) for x > 0: the power series to 4, above it E_1(i x) = -Ci(x) + i (Si(x) - pi/2) by its
    continued fraction 1/(1 + i x - 1/(3 + i x - 4/(5 + i x - ...))) times e^(-i x)."""
    small = x <= _SICI_SWITCH
    xs = _tnp.where(small, x, 1.0)
    # x^k / k! for k = 1, 2, ...: odd k into Si (/ k), even k into Ci (/ k), alternating in pairs.
    power, si, ci = xs, xs, _tnp.zeros_like(x)
    for k in range(2, 32):
        power = power * xs / k
        sign = -1.0 if (k // 2) % 2 else 1.0
        if k % 2:
            si = si + sign * power / k
        else:
            ci = ci + sign * power / k
    ci = ci + _EULER + _tnp.log(xs)
    xf = _tnp.where(small, 2.0 * _SICI_SWITCH, x)
    hr, hi = _complex_lentz(_tnp.ones_like(x), xf, 2.0, lambda k: -k * k, _SICI_LEVELS)
    c, s = _tnp.cos(xf), _tnp.sin(xf)
    er, ei = hr * c + hi * s, hi * c - hr * s
    return _tnp.where(small, si, 0.5 * _PI + ei), _tnp.where(small, ci, -er)


def _sici_impl(x):
    ax = _tnp.abs(x)
    si, ci = _sici_positive(_tnp.where(_tnp.logical_or(ax == 0, _tnp.isinf(ax)), 1.0, ax))
    si = _tnp.where(_tnp.isinf(ax), 0.5 * _PI, si)
    ci = _tnp.where(_tnp.isinf(ax), 0.0, ci)
    si = _tnp.where(ax == 0, 0.0, _tnp.sign(x) * si)
    ci = _tnp.where(ax == 0, -_tnp.inf, _tnp.where(x == -_tnp.inf, _tnp.nan, ci))
    return si, ci


@_custom_jvp
def _sici(x):
    return _sici_impl(x)


def _sici_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    safe = _tnp.where(x == 0, 1.0, x)
    # Ci' = cos x / x is infinite at 0: the dtype's largest value there, so that a zero cotangent of Ci (grad of
    # Si alone) contributes 0 rather than 0 * inf.
    largest = 1.7976931348623157e308 if x._dtype_name == "f64" else 3.4028234663852886e38
    ci_slope = _tnp.where(x == 0, largest, _tnp.cos(x) / safe)
    return _sici_impl(x), (_tnp.where(x == 0, 1.0, _tnp.sin(safe) / safe) * t, ci_slope * t)


_sici.defjvp(_sici_jvp)


def sici(x):
    """(Si(x), Ci(x)) = (int_0^x sin t / t dt, gamma + log|x| + int_0^|x| (cos t - 1) / t dt), as scipy's for
    real x (Ci even). Si' = sin x / x, Ci' = cos x / x."""
    return _lowp(_sici, x)


_FRESNEL_SWITCH = 1.5
_FRESNEL_LEVELS = 60  # 1e-15 from x = 1.5


def _fresnel_positive(x):
    """(S(x), C(x)) for x >= 0: the power series to 1.5, above it erfc's continued fraction at
    sqrt(pi)/2 (1 - i) x: C + i S = (1 + i)/2 (1 - e^(i pi x^2 / 2) (1 - i) x h), h = 1/(1 - i pi x^2
    - 1 2/(5 - i pi x^2 - 3 4/(9 - i pi x^2 - ...)))."""
    small = x < _FRESNEL_SWITCH
    xs = _tnp.where(small, x, 1.0)
    # t^n / n! with t = pi x^2 / 2: even n into C, odd n into S, each divided by 2n + 1 and alternating in pairs.
    t = 0.5 * _PI * xs * xs
    power, c, s = _tnp.ones_like(x), _tnp.ones_like(x), _tnp.zeros_like(x)
    for n in range(1, 34):
        power = power * t / n
        sign = -1.0 if (n // 2) % 2 else 1.0
        if n % 2:
            s = s + sign * power / (2 * n + 1)
        else:
            c = c + sign * power / (2 * n + 1)
    xf = _tnp.where(small, 2.0 * _FRESNEL_SWITCH, x)
    hr, hi = _complex_lentz(_tnp.ones_like(x), -_PI * xf * xf, 4.0, lambda k: -(2.0 * k - 1.0) * (2.0 * k),
                            _FRESNEL_LEVELS)
    hr, hi = (hr + hi) * xf, (hi - hr) * xf  # h (1 - i) x
    phase = 0.5 * _PI * xf * xf
    cs, sn = _tnp.cos(phase), _tnp.sin(phase)
    gr, gi = 1.0 - (cs * hr - sn * hi), -(cs * hi + sn * hr)
    cf, sf = 0.5 * (gr - gi), 0.5 * (gr + gi)
    return _tnp.where(small, xs * s, sf), _tnp.where(small, xs * c, cf)


@_custom_jvp
def _fresnel(x):
    ax = _tnp.abs(x)
    huge = _tnp.isinf(ax * ax)
    s, c = _fresnel_positive(_tnp.where(huge, 1.0, ax))
    sign = _tnp.sign(x)
    return sign * _tnp.where(huge, 0.5, s), sign * _tnp.where(huge, 0.5, c)


def _fresnel_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    phase = 0.5 * _PI * x * x
    return _fresnel(x), (_tnp.sin(phase) * t, _tnp.cos(phase) * t)


_fresnel.defjvp(_fresnel_jvp)


def fresnel(x):
    """The Fresnel integrals (S(x), C(x)) = (int_0^x sin(pi t^2 / 2) dt, int_0^x cos(pi t^2 / 2) dt), odd in x.
    S' = sin(pi x^2 / 2), C' = cos(pi x^2 / 2)."""
    return _lowp(_fresnel, x)


# ---- the dilogarithm ----------------------------------------------------------------------------------------

# Li2(z) = sum_n B_n u^(n+1) / (n+1)! with u = -log(1 - z): u - u^2/4 + sum_k B_2k u^(2k+1) / (2k+1)!, the
# coefficients of u^3, u^5, ... here (for |u| <= log 2 the term past these is under 1e-22).
_LI2_COEFFICIENTS = tuple(float(b / _math.factorial(2 * k + 1))
                          for k, b in enumerate(_bernoulli_fractions(30)[::2]) if k > 0)


def _li2_of_u(u):
    """Li2(1 - e^-u) for |u| <= log 2."""
    u2 = u * u
    total = _tnp.zeros_like(u)
    for coefficient in reversed(_LI2_COEFFICIENTS):
        total = total * u2 + coefficient
    return u - 0.25 * u2 + u * u2 * total


def _spence(x):
    """Spence's function int_1^x log t / (1 - t) dt = Li2(1 - x) for x >= 0 (NaN below): the Bernoulli series
    of Li2 in u = -log(1 - z) for x in [0.5, 2], Li2's reflection z -> 1 - z below 0.5 and its inversion
    z -> 1/z above 2, each fed an argument in its own range (so no branch's NaN reaches a gradient)."""
    (x,) = _float(x)
    low, high = x < 0.5, x > 2.0
    mid = _li2_of_u(-_tnp.log(_tnp.where(_tnp.logical_or(low, high), 1.0, x)))
    xl = _tnp.where(_tnp.logical_and(low, x > 0), x, 0.25)
    below = _PI * _PI / 6.0 - _tnp.log(xl) * _tnp.log1p(-xl) - _li2_of_u(-_tnp.log1p(-xl))
    below = _tnp.where(x == 0, _PI * _PI / 6.0, below)
    xh = _tnp.where(high, x, 4.0)
    above = -_PI * _PI / 6.0 - 0.5 * _tnp.log(xh - 1.0) ** 2 - _li2_of_u(_tnp.log1p(-1.0 / xh))
    out = _tnp.where(low, below, _tnp.where(high, above, mid))
    return _tnp.where(x < 0, _tnp.nan, out)


def spence(x):
    return _lowp(_spence, x)


spence.__doc__ = _spence.__doc__


# ---- Bessel J of integer order ------------------------------------------------------------------------------

def bessel_jn(z, *, v, n_iter=50):
    """J_0(z) .. J_v(z), shape (v + 1, *z.shape), by Miller's backward recurrence
    f_k = 2 (k + 1) / z f_(k+1) - f_(k+2) from k = n_iter down to 0, normalized by J_0 + 2 J_2 + 2 J_4 + ... = 1
    (Zhang and Jin's BJNDD, as JAX's). n_iter must exceed |z| comfortably (50 serves |z| up to about 25). The
    values are rescaled whenever they pass 1e15, so a small z does not overflow; J_k(0) is 1 for k = 0, else 0."""
    v, n_iter = _operator.index(v), _operator.index(n_iter)
    if v < 0 or v > n_iter:
        raise ValueError(f"bessel_jn: the order v must be in [0, n_iter = {n_iter}], got {v}")
    return _lowp(lambda z: _bessel_jn(z, v, n_iter), z)


def _bessel_jn(z, v, n_iter):
    zs = _tnp.where(z == 0, 1.0, z)
    after, current = _tnp.zeros_like(zs), _tnp.ones_like(zs)  # f_(n_iter + 2), f_(n_iter + 1)
    norm = _tnp.zeros_like(zs)
    kept = []
    for k in range(n_iter, -1, -1):
        f = 2.0 * (k + 1) / zs * current - after
        if k % 2 == 0:
            norm = norm + (2.0 if k else 1.0) * f
        if k <= v:
            kept.append(f)
        scale = _tnp.where(_tnp.abs(f) > 1e15, 1e-15, 1.0)
        after, current, norm = current * scale, f * scale, norm * scale
        kept = [g * scale for g in kept]
    values = [g / norm for g in reversed(kept)]
    values = [_tnp.where(z == 0, 1.0 if k == 0 else 0.0, g) for k, g in enumerate(values)]
    return _tnp.stack(values, axis=0)


# ---- confluent hypergeometric 1F1 ---------------------------------------------------------------------------

_HYP1F1_TERMS = 300  # the series to |x| = 100, where its terms peak near k = x
_HYP1F1_ASYMPTOTIC = 100.0
_HYP1F1_ASYMPTOTIC_TERMS = 30


def _hyp_series(a, b, c, x, terms):
    """sum_k (a)_k (b)_k / (c)_k x^k / k! (b = None: 1F1's sum_k (a)_k / (c)_k x^k / k!) to `terms` terms; a
    non-positive integer a ends it (its terms become exact zeros)."""
    def body(i, carry):
        total, term = carry
        k = _C.astype(i, x._dtype_name)
        ratio = (a + k) / (c + k) * x / (k + 1.0)
        # A term that reached 0 stays 0 (past it a pole of (c)_k would give 0 / 0).
        term = _tnp.where(term == 0, 0.0, term * (ratio if b is None else ratio * (b + k)))
        return total + term, term

    one = _tnp.ones_like(x)
    total, _ = _lax.fori_loop(0, terms, body, (one, one))
    return total


def _terminates_before(a, b):
    """Where a is a non-positive integer above b: a series whose denominators (b)_k reach 0 ends first."""
    return _tnp.logical_and(_nonpositive_integer(a), a > b)


def _hyp1f1_impl(a, b, x):
    # Kummer's transformation puts x >= 0, where the series' terms share one sign:
    # 1F1(a; b; x) = e^x 1F1(b - a; b; -x).
    negative = x < 0
    a1, x1 = _tnp.where(negative, b - a, a), _tnp.abs(x)
    shift = _tnp.where(negative, x, 0.0)
    series_side = _tnp.logical_or(x1 < _HYP1F1_ASYMPTOTIC, _nonpositive_integer(a1))
    series = _hyp_series(a1, None, b, _tnp.where(series_side, x1, 0.0), _HYP1F1_TERMS) * _tnp.exp(shift)
    # Gamma(b) / Gamma(a) e^x x^(a - b) sum_k (b - a)_k (1 - a)_k / (k! x^k) (the other, e^-x smaller, term left
    # out), its prefactor as one exponential.
    aa, xa = _tnp.where(series_side, 0.5, a1), _tnp.where(series_side, _HYP1F1_ASYMPTOTIC, x1)
    term, tail = _tnp.ones_like(x), _tnp.ones_like(x)
    for k in range(_HYP1F1_ASYMPTOTIC_TERMS):
        term = term * ((b - aa + k) * (1.0 - aa + k) / ((k + 1) * xa))
        tail = tail + term
    log_front = _lgamma(b) - _lgamma(aa) + xa + shift + (aa - b) * _tnp.log(xa)
    asymptotic = _gamma_sign(b) * _gamma_sign(aa) * _tnp.exp(log_front) * tail
    out = _tnp.where(series_side, series, asymptotic)
    pole = _tnp.logical_and(_nonpositive_integer(b), _tnp.logical_not(_terminates_before(a, b)))
    out = _tnp.where(pole, _tnp.inf, out)
    return _tnp.where(a == 0, 1.0, out)


def hyp1f1(a, b, x):
    """Kummer's confluent hypergeometric function 1F1(a; b; x) = sum_k (a)_k / (b)_k x^k / k!: for x < 0 through
    Kummer's transformation e^x 1F1(b - a; b; -x), then the series (300 terms) below 100 and the asymptotic
    series above. 1 where a = 0; inf where b is a non-positive integer not preceded by a's. Differentiable in
    a, b and x (through the series)."""
    return _lowp(_hyp1f1_impl, a, b, x)


# ---- Gauss hypergeometric 2F1 -------------------------------------------------------------------------------

# The series directly to w = 3/4 (0.75^300 is 3e-38, room for terms that grow as a power of k first); past it the
# connection to 1 - w, whose Gamma(d) Gamma(-d) terms cancel where d = c - a - b is near an integer, a cancellation
# kept to the region where the series would need thousands of terms.
_HYP2F1_SWITCH = 0.75
_HYP2F1_TERMS = 300
_HYP2F1_SLOW_TERMS = 400  # the direct series that gives the derivatives where c - a - b is an integer
_HYP2F1_GAP_TERMS = 64  # the limit formula's finite sum: c - a - b an integer up to 64 past w = 3/4


def _hyp2f1_integer_gap(a, b, m, s):
    """2F1(a, b; a + b + m; 1 - s) / Gamma(a + b + m) for an integer m >= 0 and 0 < s < 1/4 (DLMF 15.8.10):
    rgamma(a + m) rgamma(b + m) sum_(k<m) (a)_k (b)_k (m - k - 1)! / k! (-s)^k
    - (-s)^m rgamma(a) rgamma(b) sum_k (a + m)_k (b + m)_k / (k! (k + m)!) s^k
    (log s - psi(k + 1) - psi(k + m + 1) + psi(a + k + m) + psi(b + k + m))."""
    dtype = s._dtype_name

    def finite(i, carry):
        total, term = carry
        k = _C.astype(i, dtype)
        total = total + _tnp.where(k < m, term, 0.0)
        gap = m - k - 1.0
        term = term * (a + k) * (b + k) / ((k + 1.0) * _tnp.where(gap > 0, gap, 1.0)) * -s
        return total, term

    start = _tnp.exp(_lgamma(_tnp.maximum(m, 1.0)))  # (m - 1)!
    head, _ = _lax.fori_loop(0, _HYP2F1_GAP_TERMS, finite, (_tnp.zeros_like(s), start))
    am, bm = a + m, b + m
    safe_am = _tnp.where(_nonpositive_integer(am), 0.5, am)
    safe_bm = _tnp.where(_nonpositive_integer(bm), 0.5, bm)

    def infinite(i, carry):
        total, term, psi1, psim, psia, psib = carry
        k = _C.astype(i, dtype)
        total = total + term * (_tnp.log(s) - psi1 - psim + psia + psib)
        term = term * (am + k) * (bm + k) / ((k + 1.0) * (k + m + 1.0)) * s
        return (total, term, psi1 + 1.0 / (k + 1.0), psim + 1.0 / (k + m + 1.0),
                psia + 1.0 / (safe_am + k), psib + 1.0 / (safe_bm + k))

    one = _tnp.ones_like(s)
    carry = (_tnp.zeros_like(s), _tnp.exp(-_lgamma(m + 1.0)), one * -_EULER, _C.digamma(m + 1.0),
             _C.digamma(safe_am), _C.digamma(safe_bm))
    tail = _lax.fori_loop(0, _HYP2F1_TERMS, infinite, carry)[0]
    sign_m = _tnp.where(_tnp.remainder(m, 2.0) == 0, 1.0, -1.0)
    return _rgamma(am) * _rgamma(bm) * head - sign_m * s ** m * _rgamma(a) * _rgamma(b) * tail



def _hyp2f1_unit(a, b, c, w):
    """2F1(a, b; c; w) for 0 <= w < 1 and a c that is no pole: the series to w = 3/4 (or when a is a
    non-positive integer), beyond it the connection to 1 - w: for a non-integer d = c - a - b,
    Gamma(c) [Gamma(d) rgamma(c - a) rgamma(c - b) 2F1(a, b; 1 - d; 1 - w)
    + (1 - w)^d Gamma(-d) rgamma(a) rgamma(b) 2F1(c - a, c - b; 1 + d; 1 - w)],
    for an integer d the limit of that (after Euler's transformation for d < 0)."""
    direct = _tnp.logical_or(w <= _HYP2F1_SWITCH, _nonpositive_integer(a))
    series = _hyp_series(a, b, c, _tnp.where(direct, w, 0.0), _HYP2F1_TERMS)
    s = _tnp.where(direct, 0.5 * (1.0 - _HYP2F1_SWITCH), 1.0 - w)
    d = c - a - b
    rd = _tnp.round(d)
    eps = 50.0 * (2.2e-16 if w._dtype_name == "f64" else 1.2e-7)
    integer = _tnp.abs(d - rd) < eps
    dn = _tnp.where(integer, 0.5, d)
    gamma_c = _gamma_sign(c) * _tnp.exp(_lgamma(c))
    first = (_gamma_sign(dn) * _tnp.exp(_lgamma(dn)) * _rgamma(c - a) * _rgamma(c - b)
             * _hyp_series(a, b, 1.0 - dn, s, _HYP2F1_TERMS))
    second = (s ** dn * _gamma_sign(-dn) * _tnp.exp(_lgamma(-dn)) * _rgamma(a) * _rgamma(b)
              * _hyp_series(c - a, c - b, 1.0 + dn, s, _HYP2F1_TERMS))
    connected = gamma_c * (first + second)
    # Integer d: Euler's transformation 2F1(a, b; c; w) = (1 - w)^d 2F1(c - a, c - b; c; w) makes it >= 0.
    # The limit holds c - a - b at its integer, so it has no derivative in a, b or c: those come from the direct
    # series (as all of JAX's do), through a term whose value is zero. Its 400 terms serve w up to about 0.9.
    a0, b0, c0 = _lax.stop_gradient(a), _lax.stop_gradient(b), _lax.stop_gradient(c)
    flip = rd < 0
    a2, b2 = _tnp.where(flip, c0 - a0, a0), _tnp.where(flip, c0 - b0, b0)
    gamma_c0 = _gamma_sign(c0) * _tnp.exp(_lgamma(c0))
    gap = gamma_c0 * _hyp2f1_integer_gap(a2, b2, _tnp.abs(rd), s) * _tnp.where(flip, s ** rd, 1.0)
    slow = _hyp_series(a, b, c, _lax.stop_gradient(_tnp.where(integer, w, 0.0)), _HYP2F1_SLOW_TERMS)
    gap = gap + _tnp.where(_tnp.isfinite(slow), slow - _lax.stop_gradient(slow), 0.0)
    return _tnp.where(direct, series, _tnp.where(integer, gap, connected))


def _hyp2f1_impl(a, b, c, x):
    # A non-positive integer b becomes a (the series in a then ends, through every transformation below).
    swap = _tnp.logical_and(_nonpositive_integer(b), _tnp.logical_not(_nonpositive_integer(a)))
    a, b = _tnp.where(swap, b, a), _tnp.where(swap, a, b)
    polynomial = _nonpositive_integer(a)
    # Pfaff's transformation takes x < 0 into (0, 1): 2F1(a, b; c; x) = (1 - x)^-a 2F1(a, c - b; c; x / (x - 1)).
    xs = _tnp.where(x < 1, x, 0.0)
    negative = xs < 0
    w = _tnp.where(negative, xs / (xs - 1.0), xs)
    bw = _tnp.where(negative, c - b, b)
    pole = _tnp.logical_and(_nonpositive_integer(c), _tnp.logical_not(_terminates_before(a, c)))
    safe_c = _tnp.where(pole, 0.5, c)
    inside = _hyp2f1_unit(a, bw, safe_c, w) * _tnp.where(negative, (1.0 - xs) ** -a, 1.0)
    # Past 1 only a polynomial is real (scipy's inf elsewhere).
    beyond = _hyp_series(a, b, safe_c, _tnp.where(x > 1, x, 0.0), _HYP2F1_TERMS)
    out = _tnp.where(x > 1, _tnp.where(polynomial, beyond, _tnp.inf), inside)
    d = c - a - b
    dp = _tnp.where(d > 0, d, 1.0)
    gauss = (_gamma_sign(safe_c) * _gamma_sign(dp) * _tnp.exp(_lgamma(safe_c) + _lgamma(dp))
             * _rgamma(c - a) * _rgamma(c - b))
    out = _tnp.where(x == 1, _tnp.where(d > 0, gauss, _tnp.inf), out)
    out = _tnp.where(pole, _tnp.inf, out)
    return _tnp.where(_tnp.logical_or(x == 0, _tnp.logical_and(_tnp.logical_or(a == 0, b == 0), c != 0)),
                      1.0, out)


def hyp2f1(a, b, c, x):
    """The Gauss hypergeometric function 2F1(a, b; c; x) = sum_k (a)_k (b)_k / (c)_k x^k / k! for real x <= 1:
    Pfaff's transformation for x < 0, then the series to 3/4 and the connection formulas to 1 - x above it
    (their limit, with digammas, where c - a - b is an integer); at x = 1 Gauss's sum (inf unless
    c - a - b > 0); past 1 inf unless the series is a polynomial; inf where c is a pole. Differentiable in
    a, b, c and x (through the series; where c - a - b is an integer and the argument past 3/4, the derivatives
    in a, b and c are the direct series', accurate to about 0.9)."""
    return _lowp(_hyp2f1_impl, a, b, c, x)


# ---- Owen's T -----------------------------------------------------------------------------------------------

def _gauss_legendre(n):
    """Nodes and weights of n-point Gauss-Legendre quadrature on [0, 1] (Newton's method on P_n)."""
    nodes, weights = [], []
    for i in range(1, n + 1):
        t = _math.cos(_PI * (i - 0.25) / (n + 0.5))
        for _ in range(100):
            p0, p1 = 1.0, t
            for k in range(2, n + 1):
                p0, p1 = p1, ((2 * k - 1) * t * p1 - (k - 1) * p0) / k
            dp = n * (t * p1 - p0) / (t * t - 1.0)
            step = p1 / dp
            t -= step
            if abs(step) < 1e-16:
                break
        nodes.append(0.5 * (1.0 - t))
        weights.append(1.0 / ((1.0 - t * t) * dp * dp))
    return tuple(nodes), tuple(weights)


_OWENS_NODES, _OWENS_WEIGHTS = _gauss_legendre(48)
_OWENS_REACH = 10.0  # the integrand's factor e^(-h^2 u^2 / 2) is under e^-50 past u = 10 / h


def _erfc(y):
    """erfc(y) for y >= 0 to the dtype's precision: 1 - erf below 2 (at most 2.5 digits lost), above it
    e^(-y^2) / sqrt(pi) / (y + (1/2) / (y + 1 / (y + (3/2) / (y + ...)))) evaluated from 60 levels up."""
    yc = _tnp.where(y < 2.0, 2.0, y)
    t = _tnp.zeros_like(y)
    for k in range(60, 0, -1):
        t = (0.5 * k) / (yc + t)
    fraction = _tnp.exp(-yc * yc) / _SQRT_PI / (yc + t)
    return _tnp.where(y < 2.0, 1.0 - _C.erf(_tnp.where(y < 2.0, y, 0.0)), fraction)


def _owens_t_inner(h, a):
    """T(h, a) for h >= 0 and 0 <= a <= 1: e^(-h^2/2) / (2 pi) int_0^L e^(-h^2 u^2 / 2) / (1 + u^2) du, L =
    min(a, 10 / h) (where the integrand still matters), by 48-point Gauss-Legendre quadrature."""
    reach = _tnp.minimum(a, _OWENS_REACH / _tnp.where(h > 0, h, 1.0))
    reach = _tnp.where(h > 0, reach, a)
    total = _tnp.zeros_like(h)
    for node, weight in zip(_OWENS_NODES, _OWENS_WEIGHTS):
        u = reach * node
        total = total + weight * _tnp.exp(-0.5 * h * h * u * u) / (1.0 + u * u)
    return _tnp.exp(-0.5 * h * h) / (2.0 * _PI) * reach * total


def _owens_t_impl(h, a):
    ah, aa = _tnp.abs(h), _tnp.abs(a)
    wide = aa > 1.0
    inv = 1.0 / _tnp.where(wide, aa, 1.0)
    narrow = _owens_t_inner(ah, _tnp.where(wide, 0.5, aa))
    # T(h, a) = (Phi(h) + Phi(a h)) / 2 - Phi(h) Phi(a h) - T(a h, 1/a) for a > 1, written with erfc (or, where
    # both erfs are small, erf) so that no digits cancel.
    ha = _tnp.where(wide, aa * ah, 0.0)
    e1, e2 = _erfc(ah / _math.sqrt(2.0)), _erfc(ha / _math.sqrt(2.0))
    both = 0.25 * (e1 + e2 - e1 * e2)
    small = 0.25 - 0.25 * _C.erf(ah / _math.sqrt(2.0)) * _C.erf(ha / _math.sqrt(2.0))
    reflected = _tnp.where(ha <= 0.67, small, both) - _owens_t_inner(ha, inv)
    reflected = _tnp.where(_tnp.isinf(aa), 0.25 * e1, reflected)  # T(h, inf) = erfc(|h| / sqrt 2) / 4
    return _tnp.sign(a) * _tnp.where(wide, reflected, narrow)


@_custom_jvp
def _owens_t(h, a):
    return _owens_t_impl(h, a)


_owens_t.defjvps(
    lambda t, out, h, a: -_tnp.exp(-0.5 * h * h) * _C.erf(a * h / _math.sqrt(2.0)) / (2.0 * _math.sqrt(2 * _PI)) * t,
    lambda t, out, h, a: _tnp.exp(-0.5 * (1.0 + a * a) * h * h) / (2.0 * _PI * (1.0 + a * a)) * t)


def owens_t(h, a):
    """Owen's T function (1 / 2 pi) int_0^a e^(-h^2 (1 + u^2) / 2) / (1 + u^2) du: Gauss-Legendre quadrature
    over the part of [0, min(|a|, 1)] where the integrand matters, the reflection to 1/a for |a| > 1."""
    return _lowp(_owens_t, h, a)


def _lowp(fn, *args):
    """fn of the arguments as one floating dtype (that of the array arguments; Python numbers follow them),
    computed in float32 for float16 or bfloat16, as JAX does, and cast back (each output of a tuple)."""
    names = {_tnp.asarray(x)._dtype_name for x in args if not isinstance(x, (int, float))}
    low = next((n for n in ("bf16", "f16") if n in names and not names & {"f32", "f64"}), None)
    if low is None:
        return fn(*_float(*args))
    out = fn(*_float(*[_C.astype(_tnp.asarray(x), "f32") for x in args]))
    return tuple(_C.astype(o, low) for o in out) if isinstance(out, tuple) else _C.astype(out, low)
