"""tessera.scipy.special and tessera.scipy.stats: jax.scipy's special functions and distributions' densities,
written with tessera.numpy and tessera.lax (so they trace, differentiate and batch), and tessera.scipy.linalg's
expm. Attached to the tessera.scipy module that _lax_linalg.py makes."""

import math as _math
import sys as _sys
import types as _types

from . import _tessera as _C
from . import lax as _lax
from . import numpy as _tnp
from . import nn as _nn
from ._lax_linalg import scipy as _scipy_module
from ._lax_ops import _erfc_parts, _i1_parts, _I1_SWITCH
from ._lax_ops import bessel_i1e as i1e  # i1e: tessera.scipy.special.i1e
from ._np_grids import i0, _i0_scaled, _in_float32  # i0: tessera.scipy.special.i0
from . import _special_more

_LOG2 = _math.log(2.0)
_SQRT2 = _math.sqrt(2.0)
_LOG_SQRT_2PI = 0.5 * _math.log(2.0 * _math.pi)


def _f(x):
    x = _tnp.asarray(x)
    return x if x._dtype_name in ("f32", "f64", "f16", "bf16") else _C.astype(x, "f32")


# ---- special ----------------------------------------------------------------------------------------------

def erf(x):
    return _C.erf(_f(x))


def erfinv(x):
    return _C.erf_inv(_f(x))


erfc = _lax.erfc


def erfcx(x):
    """exp(x^2) erfc(x), without forming either factor where it over- or underflows (x >= 0 straight from the
    fit, negative x as 2 exp(x^2) - erfcx(-x))."""
    x = _f(x)
    a = _tnp.abs(x)
    t, e = _erfc_parts(a)
    pos = t * _tnp.exp(e)
    return _tnp.where(x < 0, 2.0 * _tnp.exp(x * x) - pos, pos)


def gammaln(x):
    """log |Gamma(x)|."""
    return _C.lgamma(_f(x))


def gammasgn(x):
    """The sign of Gamma(x): +1 for x > 0, (-1)^ceil(-x) between the poles of negative x (NaN at the poles)."""
    x = _f(x)
    k = _tnp.floor(x)
    negative = _tnp.where(_tnp.remainder(k, 2.0) == 0, 1.0, -1.0)
    sign = _tnp.where(x > 0, 1.0, negative)
    return _tnp.where(_tnp.logical_and(x <= 0, x == k), _tnp.nan, sign)


def gamma(x):
    """Gamma(x) = gammasgn(x) exp(gammaln(x))."""
    x = _f(x)
    return gammasgn(x) * _tnp.exp(gammaln(x))


def digamma(x):
    return _C.digamma(_f(x))


def betaln(a, b):
    """log |B(a, b)| = gammaln(a) + gammaln(b) - gammaln(a + b)."""
    a, b = _f(a), _f(b)
    return gammaln(a) + gammaln(b) - gammaln(a + b)


def beta(a, b):
    """B(a, b) for positive a and b."""
    return _tnp.exp(betaln(a, b))


def multigammaln(a, d):
    """The log of the multivariate gamma function of dimension d: d(d-1)/4 log pi + sum_j gammaln(a - j/2)."""
    a = _f(a)
    d = int(d)
    out = _C.scalar(d * (d - 1) / 4.0 * _math.log(_math.pi), a) + _tnp.zeros_like(a)
    for j in range(d):
        out = out + gammaln(a - j / 2.0)
    return out


def factorial(n, exact=False):
    """n! = Gamma(n + 1) (0 for negative n), as floats."""
    if exact:
        raise ValueError("factorial: exact=True is not supported (as jax.scipy); use math.factorial")
    n = _f(n)
    return _tnp.where(n < 0, 0.0, _tnp.exp(gammaln(n + 1.0)))


def comb(N, k, exact=False, repetition=False):
    """The binomial coefficient C(N, k) (0 outside 0 <= k <= N), as floats from gammaln."""
    if exact:
        raise ValueError("comb: exact=True is not supported (as jax.scipy); use math.comb")
    N, k = _f(N), _f(k)
    if repetition:
        N = N + k - 1.0
    out = _tnp.exp(gammaln(N + 1.0) - gammaln(k + 1.0) - gammaln(N - k + 1.0))
    return _tnp.where(_tnp.logical_and(k >= 0, k <= N), out, 0.0)


def poch(z, m):
    """The rising factorial (z)_m = Gamma(z + m) / Gamma(z)."""
    z, m = _f(z), _f(m)
    return gammasgn(z + m) * gammasgn(z) * _tnp.exp(gammaln(z + m) - gammaln(z))


def expit(x):
    """The logistic sigmoid 1 / (1 + exp(-x))."""
    return _nn.sigmoid(_f(x))


def logit(x):
    """log(x / (1 - x))."""
    x = _f(x)
    return _tnp.log(x) - _tnp.log1p(-x)


def xlogy(x, y):
    """x log(y), 0 where x is 0 (even for y 0)."""
    x, y = _f(x), _f(y)
    return _tnp.where(x == 0, 0.0, x * _tnp.log(_tnp.where(x == 0, 1.0, y)))


def xlog1py(x, y):
    """x log(1 + y), 0 where x is 0."""
    x, y = _f(x), _f(y)
    return _tnp.where(x == 0, 0.0, x * _tnp.log1p(_tnp.where(x == 0, 0.0, y)))


def entr(x):
    """-x log(x) for x > 0, 0 at 0, -inf below."""
    x = _f(x)
    return _tnp.where(x > 0, -x * _tnp.log(_tnp.where(x > 0, x, 1.0)), _tnp.where(x == 0, 0.0, -_tnp.inf))


def rel_entr(x, y):
    """x log(x / y) for x, y > 0; 0 where x is 0 and y >= 0; inf otherwise."""
    x, y = _f(x), _f(y)
    both = _tnp.logical_and(x > 0, y > 0)
    safe_x, safe_y = _tnp.where(both, x, 1.0), _tnp.where(both, y, 1.0)
    value = safe_x * (_tnp.log(safe_x) - _tnp.log(safe_y))
    return _tnp.where(both, value, _tnp.where(_tnp.logical_and(x == 0, y >= 0), 0.0, _tnp.inf))


def kl_div(x, y):
    """x log(x / y) - x + y for x, y > 0; y where x is 0 and y >= 0; inf otherwise."""
    x, y = _f(x), _f(y)
    both = _tnp.logical_and(x > 0, y > 0)
    return _tnp.where(both, rel_entr(x, y) - x + y, _tnp.where(_tnp.logical_and(x == 0, y >= 0), y, _tnp.inf))


def ndtr(x):
    """The standard normal CDF: erfc(-x / sqrt 2) / 2 (accurate in the lower tail)."""
    return 0.5 * erfc(-_f(x) / _SQRT2)


def log_ndtr(x):
    """log ndtr(x), finite far into the lower tail: from erfc's fit in log space below 0, log1p(-ndtr(-x))
    above."""
    x = _f(x)
    a = _tnp.abs(x) / _SQRT2
    t, e = _erfc_parts(a)
    lower = _tnp.log(t) - a * a + e - _LOG2  # log(erfc(|x|/sqrt2) / 2) = log ndtr(-|x|)
    return _tnp.where(x < 0, lower, _tnp.log1p(-_tnp.exp(lower)))


def ndtri(p):
    """The inverse of ndtr: sqrt 2 erfinv(2p - 1)."""
    return _SQRT2 * _C.erf_inv(2.0 * _f(p) - 1.0)


def i0e(x):
    return _i0_scaled(_f(x))


def _i1(x):
    x, ax, big, series, scaled = _i1_parts(x)
    half = _tnp.exp(big * 0.5)
    return _tnp.where(ax > _I1_SWITCH, half * scaled * half, series)


def i1(x):
    """The modified Bessel function of the first kind of order 1 (odd): its power series below |x| = 15, the
    asymptotic series times e^|x| above (as two factors e^(|x|/2), so the result overflows only where I1 does)."""
    return _in_float32(_i1, x)


def boxcox(x, lmbda):
    """(x^lmbda - 1) / lmbda, log(x) where lmbda is 0."""
    x, lmbda = _f(x), _f(lmbda)
    safe = _tnp.where(lmbda == 0, 1.0, lmbda)
    return _tnp.where(lmbda == 0, _tnp.log(x), _tnp.expm1(safe * _tnp.log(x)) / safe)


def boxcox1p(x, lmbda):
    """boxcox(1 + x, lmbda), accurate for small x."""
    x, lmbda = _f(x), _f(lmbda)
    safe = _tnp.where(lmbda == 0, 1.0, lmbda)
    return _tnp.where(lmbda == 0, _tnp.log1p(x), _tnp.expm1(safe * _tnp.log1p(x)) / safe)


_IGAMMA_STEPS = 200  # series terms and continued-fraction levels (each converges well within this for a <= 1e3)
_TINY = 1e-30


def _igamma_series(a, x):
    """P(a, x) = x^a e^-x / Gamma(a + 1) sum_n x^n / ((a + 1) ... (a + n)), for x < a + 1 (one fori_loop)."""
    def body(i, carry):
        term, total, ap = carry
        ap = ap + 1.0
        term = term * x / ap
        return term, total + term, ap

    one = _tnp.ones_like(x)
    _, total, _ = _lax.fori_loop(0, _IGAMMA_STEPS, body, (one, one, a))
    return _tnp.exp(xlogy(a, x) - x - gammaln(a + 1.0)) * total


def _igammac_fraction(a, x):
    """Q(a, x) by its continued fraction (the modified Lentz method), for x >= a + 1 (one fori_loop)."""
    def body(i, carry):
        b, c, d, h = carry
        n = _C.astype(i, x._dtype_name) + 1.0
        an = -n * (n - a)
        b = b + 2.0
        d = an * d + b
        d = _tnp.where(_tnp.abs(d) < _TINY, _TINY, d)
        c = b + an / c
        c = _tnp.where(_tnp.abs(c) < _TINY, _TINY, c)
        d = 1.0 / d
        return b, c, d, h * d * c

    b = x + 1.0 - a
    d = 1.0 / b
    _, _, _, h = _lax.fori_loop(0, _IGAMMA_STEPS, body, (b, _tnp.full_like(x, 1.0 / _TINY), d, d))
    return _tnp.exp(xlogy(a, x) - x - gammaln(a)) * h


def _igamma_parts(a, x):
    """(a, x, where the series is used, P by the series, Q by the fraction), each branch fed arguments in its
    own range so that the other's NaNs never reach a result or a gradient."""
    a, x = _f(a), _f(x)
    a, x = _tnp.broadcast_arrays(a, x)
    small = x < a + 1.0
    # The series is fed values inside its range and away from 0, whose log (in x^a) has a derivative in a of
    # -inf: times a where's zero, NaN. P(a, 0) is 0.
    inside = 0.5 * (a + 1.0)
    xs = _tnp.where(small, x, inside)
    zero = xs == 0
    ps = _tnp.where(zero, 0.0, _igamma_series(a, _tnp.where(zero, inside, xs)))
    qf = _igammac_fraction(a, _tnp.where(small, a + 1.0, x))
    return a, x, small, ps, qf


def gammainc(a, x):
    """The regularized lower incomplete gamma function P(a, x): the series below x = a + 1, one minus the
    continued fraction above (Numerical Recipes' split); NaN for a <= 0 or x < 0."""
    a, x, small, ps, qf = _igamma_parts(a, x)
    out = _tnp.where(small, ps, 1.0 - qf)
    return _tnp.where(_tnp.logical_or(a <= 0, x < 0), _tnp.nan, out)


def gammaincc(a, x):
    """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x), from the side that keeps its
    digits."""
    a, x, small, ps, qf = _igamma_parts(a, x)
    out = _tnp.where(small, 1.0 - ps, qf)
    return _tnp.where(_tnp.logical_or(a <= 0, x < 0), _tnp.nan, out)


def _betainc_fraction(a, b, x):
    """The continued fraction of I_x(a, b) (the modified Lentz method, Numerical Recipes' betacf), for
    x < (a + 1) / (a + b + 2), where it converges fast; one fori_loop over its levels."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0

    def clamp(v):
        return _tnp.where(_tnp.abs(v) < _TINY, _TINY, v)

    def body(i, carry):
        c, d, h = carry
        m = _C.astype(i, x._dtype_name) + 1.0
        m2 = 2.0 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 / clamp(1.0 + aa * d)
        c = clamp(1.0 + aa / c)
        h = h * d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 / clamp(1.0 + aa * d)
        c = clamp(1.0 + aa / c)
        return c, d, h * d * c

    d = 1.0 / clamp(1.0 - qab * x / qap)
    _, _, h = _lax.fori_loop(0, _IGAMMA_STEPS, body, (_tnp.ones_like(x), d, d))
    front = _tnp.exp(xlogy(a, x) + xlog1py(b, -x) - betaln(a, b)) / a
    return front * h


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b): the continued fraction where it converges fast, and
    1 - I_{1-x}(b, a) on the other side; 0 at x = 0, 1 at x = 1, NaN for a or b <= 0 or x outside [0, 1]."""
    a, b, x = _f(a), _f(b), _f(x)
    a, b, x = _tnp.broadcast_arrays(a, b, x)
    direct = x < (a + 1.0) / (a + b + 2.0)
    inside = _tnp.clip(x, 1e-30, 1.0 - 1e-7)
    lower = _betainc_fraction(a, b, _tnp.where(direct, inside, 0.5 * (a + 1.0) / (a + b + 2.0)))
    upper = _betainc_fraction(b, a, _tnp.where(direct, 0.5 * (b + 1.0) / (a + b + 2.0), 1.0 - inside))
    out = _tnp.where(direct, lower, 1.0 - upper)
    out = _tnp.where(x <= 0, 0.0, _tnp.where(x >= 1, 1.0, out))
    bad = _tnp.logical_or(_tnp.logical_or(a <= 0, b <= 0), _tnp.logical_or(x < 0, x > 1))
    return _tnp.where(bad, _tnp.nan, out)


# The Euler-Maclaurin tail of the Hurwitz zeta function: B_2j / (2j)! as the reciprocals of these.
_ZETA_EM = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
            -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
            1.8152105401943546773e17, -7.1661652561756670113e18)
_ZETA_TERMS = 10


def zeta(x, q=None):
    """The Hurwitz zeta function sum_k (q + k)^-x (q=None: 1, Riemann's), for x > 1 and q > 0: ten terms summed,
    the rest by the Euler-Maclaurin formula to twelve Bernoulli terms. x = 1 gives inf; x < 1 or q <= 0, NaN."""
    x = _f(x)
    q = _tnp.ones_like(x) if q is None else _f(q)
    x, q = _tnp.broadcast_arrays(x, q)
    total = _tnp.zeros_like(x)
    for k in range(_ZETA_TERMS):
        total = total + (q + float(k)) ** (-x)
    # The tail from the last term summed, w = q + 9: the integral of t^-x from w, less half of w^-x (counted
    # in the sum and by the integral's trapezoid), then the derivative terms.
    w = q + float(_ZETA_TERMS - 1)
    b = w ** (-x)
    total = total + b * w / (x - 1.0) - 0.5 * b
    a, k = _tnp.ones_like(x), 0.0
    for coefficient in _ZETA_EM:
        a = a * (x + k)
        b = b / w
        total = total + a * b / coefficient
        k += 1.0
        a = a * (x + k)
        b = b / w
        k += 1.0
    total = _tnp.where(x == 1.0, _tnp.inf, total)
    return _tnp.where(_tnp.logical_or(x < 1.0, q <= 0), _tnp.nan, total)


def polygamma(n, x):
    """The n-th derivative of digamma: digamma for n = 0, else (-1)^(n+1) n! zeta(n + 1, x). n a non-negative
    integer (array or number)."""
    n, x = _f(n), _f(x)
    n, x = _tnp.broadcast_arrays(n, x)
    sign = _tnp.where(_tnp.remainder(n, 2.0) == 1.0, 1.0, -1.0)
    out = sign * _tnp.exp(gammaln(n + 1.0)) * zeta(n + 1.0, x)
    return _tnp.where(n == 0, digamma(x), out)


logsumexp = _nn.logsumexp
softmax = _nn.softmax
log_softmax = _nn.log_softmax

_SPECIAL = ("erf", "erfc", "erfcx", "erfinv", "gammaln", "gammasgn", "gamma", "gammainc", "gammaincc", "digamma",
            "beta", "betaln", "betainc",
            "multigammaln", "factorial", "comb", "poch", "expit", "logit", "xlogy", "xlog1py", "entr", "rel_entr",
            "kl_div", "ndtr", "log_ndtr", "ndtri", "i0", "i0e", "i1", "i1e", "boxcox", "boxcox1p", "logsumexp",
            "softmax", "log_softmax", "zeta", "polygamma")
# From _special_more.py (bernoulli there is the numbers; stats' bernoulli here is the distribution).
_SPECIAL_MORE = ("loggamma", "bernoulli", "exp1", "expi", "expn", "dawsn", "sici", "fresnel", "spence", "bessel_jn",
                 "hyp1f1", "hyp2f1", "owens_t")


# ---- stats ------------------------------------------------------------------------------------------------

def _standardized(x, loc, scale):
    x, loc, scale = _f(x), _f(loc), _f(scale)
    return (x - loc) / scale, scale


def _distribution(name, doc, **functions):
    m = _types.ModuleType(f"tessera.scipy.stats.{name}", doc)
    for fname, fn in functions.items():
        fn.__name__ = fn.__qualname__ = fname
        setattr(m, fname, fn)
    return m


def _norm_logpdf(x, loc=0.0, scale=1.0):
    z, scale = _standardized(x, loc, scale)
    return -0.5 * z * z - _LOG_SQRT_2PI - _tnp.log(scale)


norm = _distribution(
    "norm", "The normal distribution N(loc, scale^2).",
    logpdf=_norm_logpdf,
    pdf=lambda x, loc=0.0, scale=1.0: _tnp.exp(_norm_logpdf(x, loc, scale)),
    cdf=lambda x, loc=0.0, scale=1.0: ndtr(_standardized(x, loc, scale)[0]),
    logcdf=lambda x, loc=0.0, scale=1.0: log_ndtr(_standardized(x, loc, scale)[0]),
    sf=lambda x, loc=0.0, scale=1.0: ndtr(-_standardized(x, loc, scale)[0]),
    logsf=lambda x, loc=0.0, scale=1.0: log_ndtr(-_standardized(x, loc, scale)[0]),
    ppf=lambda q, loc=0.0, scale=1.0: _f(loc) + _f(scale) * ndtri(q),
    isf=lambda q, loc=0.0, scale=1.0: _f(loc) - _f(scale) * ndtri(q),
)


def _expon_logpdf(x, loc=0.0, scale=1.0):
    z, scale = _standardized(x, loc, scale)
    return _tnp.where(z >= 0, -z - _tnp.log(scale), -_tnp.inf)


expon = _distribution(
    "expon", "The exponential distribution on [loc, inf) with mean loc + scale.",
    logpdf=_expon_logpdf,
    pdf=lambda x, loc=0.0, scale=1.0: _tnp.exp(_expon_logpdf(x, loc, scale)),
    cdf=lambda x, loc=0.0, scale=1.0: -_tnp.expm1(-_tnp.maximum(_standardized(x, loc, scale)[0], 0.0)),
    sf=lambda x, loc=0.0, scale=1.0: _tnp.exp(-_tnp.maximum(_standardized(x, loc, scale)[0], 0.0)),
    ppf=lambda q, loc=0.0, scale=1.0: _f(loc) - _f(scale) * _tnp.log1p(-_f(q)),
)


def _laplace_logpdf(x, loc=0.0, scale=1.0):
    z, scale = _standardized(x, loc, scale)
    return -_tnp.abs(z) - _LOG2 - _tnp.log(scale)


def _laplace_cdf(x, loc=0.0, scale=1.0):
    z = _standardized(x, loc, scale)[0]
    return _tnp.where(z < 0, 0.5 * _tnp.exp(_tnp.minimum(z, 0.0)), 1.0 - 0.5 * _tnp.exp(-_tnp.maximum(z, 0.0)))


laplace = _distribution(
    "laplace", "The Laplace distribution with location loc and scale scale.",
    logpdf=_laplace_logpdf,
    pdf=lambda x, loc=0.0, scale=1.0: _tnp.exp(_laplace_logpdf(x, loc, scale)),
    cdf=_laplace_cdf,
)


def _logistic_logpdf(x, loc=0.0, scale=1.0):
    z, scale = _standardized(x, loc, scale)
    return -z - 2.0 * _nn.softplus(-z) - _tnp.log(scale)


logistic = _distribution(
    "logistic", "The logistic distribution.",
    logpdf=_logistic_logpdf,
    pdf=lambda x, loc=0.0, scale=1.0: _tnp.exp(_logistic_logpdf(x, loc, scale)),
    cdf=lambda x, loc=0.0, scale=1.0: expit(_standardized(x, loc, scale)[0]),
    ppf=lambda q, loc=0.0, scale=1.0: _f(loc) + _f(scale) * logit(q),
)


def _cauchy_logpdf(x, loc=0.0, scale=1.0):
    z, scale = _standardized(x, loc, scale)
    return -_math.log(_math.pi) - _tnp.log(scale) - _tnp.log1p(z * z)


cauchy = _distribution(
    "cauchy", "The Cauchy distribution.",
    logpdf=_cauchy_logpdf,
    pdf=lambda x, loc=0.0, scale=1.0: _tnp.exp(_cauchy_logpdf(x, loc, scale)),
    cdf=lambda x, loc=0.0, scale=1.0: 0.5 + _tnp.arctan(_standardized(x, loc, scale)[0]) / _math.pi,
    ppf=lambda q, loc=0.0, scale=1.0: _f(loc) + _f(scale) * _tnp.tan(_math.pi * (_f(q) - 0.5)),
)


def _uniform_logpdf(x, loc=0.0, scale=1.0):
    x, loc, scale = _f(x), _f(loc), _f(scale)
    inside = _tnp.logical_and(x >= loc, x <= loc + scale)
    return _tnp.where(inside, -_tnp.log(scale), -_tnp.inf)


uniform = _distribution(
    "uniform", "The uniform distribution on [loc, loc + scale].",
    logpdf=_uniform_logpdf,
    pdf=lambda x, loc=0.0, scale=1.0: _tnp.exp(_uniform_logpdf(x, loc, scale)),
    cdf=lambda x, loc=0.0, scale=1.0: _tnp.clip(_standardized(x, loc, scale)[0], 0.0, 1.0),
    ppf=lambda q, loc=0.0, scale=1.0: _f(loc) + _f(scale) * _f(q),
)


def _gamma_logpdf(x, a, loc=0.0, scale=1.0):
    z, scale = _standardized(x, loc, scale)
    a = _f(a)
    value = xlogy(a - 1.0, z) - z - gammaln(a) - _tnp.log(scale)
    return _tnp.where(z >= 0, value, -_tnp.inf)


gamma_dist = _distribution(
    "gamma", "The gamma distribution with shape a.",
    logpdf=_gamma_logpdf,
    pdf=lambda x, a, loc=0.0, scale=1.0: _tnp.exp(_gamma_logpdf(x, a, loc, scale)),
    cdf=lambda x, a, loc=0.0, scale=1.0: gammainc(a, _tnp.maximum(_standardized(x, loc, scale)[0], 0.0)),
    sf=lambda x, a, loc=0.0, scale=1.0: gammaincc(a, _tnp.maximum(_standardized(x, loc, scale)[0], 0.0)),
)


def _chi2_logpdf(x, df, loc=0.0, scale=1.0):
    z, scale = _standardized(x, loc, scale)
    return _gamma_logpdf(z / 2.0, _f(df) / 2.0) - _LOG2 - _tnp.log(scale)


chi2 = _distribution(
    "chi2", "The chi-square distribution with df degrees of freedom.",
    logpdf=_chi2_logpdf,
    pdf=lambda x, df, loc=0.0, scale=1.0: _tnp.exp(_chi2_logpdf(x, df, loc, scale)),
    cdf=lambda x, df, loc=0.0, scale=1.0: gammainc(_f(df) / 2.0,
                                                   _tnp.maximum(_standardized(x, loc, scale)[0], 0.0) / 2.0),
    sf=lambda x, df, loc=0.0, scale=1.0: gammaincc(_f(df) / 2.0,
                                                   _tnp.maximum(_standardized(x, loc, scale)[0], 0.0) / 2.0),
)


def _beta_logpdf(x, a, b, loc=0.0, scale=1.0):
    z, scale = _standardized(x, loc, scale)
    a, b = _f(a), _f(b)
    value = xlogy(a - 1.0, z) + xlog1py(b - 1.0, -z) - betaln(a, b) - _tnp.log(scale)
    return _tnp.where(_tnp.logical_and(z >= 0, z <= 1), value, -_tnp.inf)


beta_dist = _distribution(
    "beta", "The beta distribution with shapes a and b.",
    logpdf=_beta_logpdf,
    pdf=lambda x, a, b, loc=0.0, scale=1.0: _tnp.exp(_beta_logpdf(x, a, b, loc, scale)),
    cdf=lambda x, a, b, loc=0.0, scale=1.0: betainc(a, b, _tnp.clip(_standardized(x, loc, scale)[0], 0.0, 1.0)),
)


def _t_logpdf(x, df, loc=0.0, scale=1.0):
    z, scale = _standardized(x, loc, scale)
    df = _f(df)
    return (gammaln((df + 1.0) / 2.0) - gammaln(df / 2.0) - 0.5 * _tnp.log(df * _math.pi) - _tnp.log(scale)
            - (df + 1.0) / 2.0 * _tnp.log1p(z * z / df))


t = _distribution(
    "t", "Student's t distribution with df degrees of freedom.",
    logpdf=_t_logpdf,
    pdf=lambda x, df, loc=0.0, scale=1.0: _tnp.exp(_t_logpdf(x, df, loc, scale)),
    cdf=lambda x, df, loc=0.0, scale=1.0: _t_cdf(_standardized(x, loc, scale)[0], _f(df)),
)


def _t_cdf(z, df):
    """P(T <= z) = 1 - I_{df / (df + z^2)}(df / 2, 1 / 2) / 2 for z >= 0, by symmetry below."""
    tail = 0.5 * betainc(df / 2.0, _tnp.full_like(df, 0.5), df / (df + z * z))
    return _tnp.where(z >= 0, 1.0 - tail, tail)


def _pareto_logpdf(x, b, loc=0.0, scale=1.0):
    z, scale = _standardized(x, loc, scale)
    b = _f(b)
    return _tnp.where(z >= 1, _tnp.log(b) - xlogy(b + 1.0, z) - _tnp.log(scale), -_tnp.inf)


pareto = _distribution(
    "pareto", "The Pareto distribution with shape b on [loc + scale, inf).",
    logpdf=_pareto_logpdf,
    pdf=lambda x, b, loc=0.0, scale=1.0: _tnp.exp(_pareto_logpdf(x, b, loc, scale)),
)


def _poisson_logpmf(k, mu, loc=0):
    k, mu = _f(k) - _f(loc), _f(mu)
    value = xlogy(k, mu) - mu - gammaln(k + 1.0)
    return _tnp.where(_tnp.logical_and(k >= 0, k == _tnp.floor(k)), value, -_tnp.inf)


poisson = _distribution(
    "poisson", "The Poisson distribution with mean mu.",
    logpmf=_poisson_logpmf,
    pmf=lambda k, mu, loc=0: _tnp.exp(_poisson_logpmf(k, mu, loc)),
    cdf=lambda k, mu, loc=0: _poisson_cdf(k, mu, loc),
)


def _poisson_cdf(k, mu, loc=0):
    """P(K <= k) = Q(floor(k) + 1, mu); 0 below 0."""
    k = _tnp.floor(_f(k) - _f(loc))
    return _tnp.where(k < 0, 0.0, gammaincc(_tnp.maximum(k, 0.0) + 1.0, _f(mu)))


def _bernoulli_logpmf(k, p, loc=0):
    k, p = _f(k) - _f(loc), _f(p)
    value = xlogy(k, p) + xlog1py(1.0 - k, -p)
    return _tnp.where(_tnp.logical_or(k == 0, k == 1), value, -_tnp.inf)


bernoulli = _distribution(
    "bernoulli", "The Bernoulli distribution with success probability p.",
    logpmf=_bernoulli_logpmf,
    pmf=lambda k, p, loc=0: _tnp.exp(_bernoulli_logpmf(k, p, loc)),
)


def _geom_logpmf(k, p, loc=0):
    k, p = _f(k) - _f(loc), _f(p)
    value = xlog1py(k - 1.0, -p) + _tnp.log(p)
    return _tnp.where(_tnp.logical_and(k >= 1, k == _tnp.floor(k)), value, -_tnp.inf)


geom = _distribution(
    "geom", "The geometric distribution: the number of trials up to the first success.",
    logpmf=_geom_logpmf,
    pmf=lambda k, p, loc=0: _tnp.exp(_geom_logpmf(k, p, loc)),
)


def _mvn_logpdf(x, mean, cov, allow_singular=None):
    """log N(x; mean, cov) over the last axis, by the Cholesky factor of cov."""
    x, mean, cov = _f(x), _f(mean), _f(cov)
    n = cov.shape[-1]
    chol = _tnp.linalg.cholesky(cov)
    from ._lax_linalg import solve_triangular
    d = x - mean
    shape = _tnp.broadcast_shapes(tuple(d.shape[:-1]), tuple(chol.shape[:-2]))
    y = solve_triangular(_tnp.broadcast_to(chol, shape + (n, n)), _tnp.broadcast_to(d, shape + (n,)), lower=True)
    log_det = 2.0 * _tnp.sum(_tnp.log(_tnp.diagonal(chol, axis1=-2, axis2=-1)), axis=-1)
    return -0.5 * _tnp.sum(y * y, axis=-1) - 0.5 * log_det - n * _LOG_SQRT_2PI


multivariate_normal = _distribution(
    "multivariate_normal", "The multivariate normal distribution N(mean, cov).",
    logpdf=_mvn_logpdf,
    pdf=lambda x, mean, cov, allow_singular=None: _tnp.exp(_mvn_logpdf(x, mean, cov)),
)


def _dirichlet_logpdf(x, alpha):
    x, alpha = _f(x), _f(alpha)
    norm_ = _tnp.sum(gammaln(alpha), axis=-1) - gammaln(_tnp.sum(alpha, axis=-1))
    return _tnp.sum(xlogy(alpha - 1.0, x), axis=-1) - norm_


dirichlet = _distribution(
    "dirichlet", "The Dirichlet distribution over the last axis.",
    logpdf=_dirichlet_logpdf,
    pdf=lambda x, alpha: _tnp.exp(_dirichlet_logpdf(x, alpha)),
)


# ---- linalg.expm ------------------------------------------------------------------------------------------

# Pade (13, 13) coefficients of exp (Higham 2005, "The scaling and squaring method for the matrix exponential
# revisited"): b_k = (26 - k)! 13! / (26! k! (13 - k)!).
_PADE13 = tuple(_math.factorial(26 - k) * _math.factorial(13) / (_math.factorial(26) * _math.factorial(k)
                                                                   * _math.factorial(13 - k)) for k in range(14))
_THETA13 = 5.371920351148152  # the largest 1-norm for which the [13/13] approximant is accurate in double


def expm(A, *, upper_triangular=False, max_squarings=16):
    """The matrix exponential of A [..., n, n] by scaling and squaring with the [13/13] Pade approximant
    (Higham's method): A / 2^s with s from A's 1-norm, the approximant (one solve), squared s times. s is
    computed on the device and the squarings applied as max_squarings masked steps, so it traces under jit and
    differentiates through grad. One degree for every norm (JAX switches between degrees 3 to 13 by the norm;
    a batch would need every branch): the same accuracy at a few more products. A matrix that needs more than
    max_squarings squarings gives NaNs, as JAX's. upper_triangular is accepted and changes no result."""
    A = _f(A)
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"expm: a square matrix [..., n, n] is expected; got shape {tuple(A.shape)}")
    n = A.shape[-1]
    norm1 = _tnp.max(_tnp.sum(_tnp.abs(A), axis=-2), axis=-1, initial=0.0)  # 0 for a [0, 0] matrix
    needed = _tnp.ceil(_tnp.log2(_tnp.maximum(norm1 / _THETA13, 1.0)))
    s = _tnp.minimum(needed, max_squarings)
    scaled = A / _tnp.power(2.0, s)[..., None, None]
    eye = _tnp.broadcast_to(_tnp.eye(n, dtype=A.dtype), A.shape)
    A2 = scaled @ scaled
    A4 = A2 @ A2
    A6 = A4 @ A2
    b = _PADE13
    U = scaled @ (A6 @ (b[13] * A6 + b[11] * A4 + b[9] * A2) + b[7] * A6 + b[5] * A4 + b[3] * A2 + b[1] * eye)
    V = A6 @ (b[12] * A6 + b[10] * A4 + b[8] * A2) + b[6] * A6 + b[4] * A4 + b[2] * A2 + b[0] * eye
    R = _tnp.linalg.solve(V - U, V + U)
    for i in range(max_squarings):
        R = _tnp.where((i < s)[..., None, None], R @ R, R)
    return _tnp.where((needed > max_squarings)[..., None, None], _tnp.nan, R)


# ---- the modules --------------------------------------------------------------------------------------------

special = _types.ModuleType("tessera.scipy.special",
                            "jax.scipy.special: " + ", ".join(_SPECIAL + _SPECIAL_MORE) + ".")
for _name in _SPECIAL:
    setattr(special, _name, globals()[_name])
for _name in _SPECIAL_MORE:
    setattr(special, _name, getattr(_special_more, _name))

stats = _types.ModuleType("tessera.scipy.stats",
                          "jax.scipy.stats: the densities (logpdf, pdf; logpmf, pmf) and, where closed-form, CDFs of "
                          "norm, expon, laplace, logistic, cauchy, uniform, gamma, chi2 (and their cdf, sf), beta, t "
                          "(and their cdf), "
                          "pareto, poisson (and its cdf), "
                          "bernoulli, geom, multivariate_normal, dirichlet.")
for _name, _dist in (("norm", norm), ("expon", expon), ("laplace", laplace), ("logistic", logistic),
                     ("cauchy", cauchy), ("uniform", uniform), ("gamma", gamma_dist), ("chi2", chi2),
                     ("beta", beta_dist), ("t", t), ("pareto", pareto), ("poisson", poisson),
                     ("bernoulli", bernoulli), ("geom", geom), ("multivariate_normal", multivariate_normal),
                     ("dirichlet", dirichlet)):
    setattr(stats, _name, _dist)
    _sys.modules[f"tessera.scipy.stats.{_name}"] = _dist

_scipy_module.special = special
_scipy_module.stats = stats
_scipy_module.linalg.expm = expm
_sys.modules["tessera.scipy.special"] = special
_sys.modules["tessera.scipy.stats"] = stats
