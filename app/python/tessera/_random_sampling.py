"""tessera.random's samplers written with the engine's bits, uniforms and normals (random.py), as jax.random's:
integers (randint), orderings (permutation, shuffle, choice), the continuous distributions with a closed-form
inverse CDF (exponential, gumbel, laplace, logistic, cauchy, pareto, rayleigh, weibull_min, triangular,
truncated_normal), those built from normals (lognormal, maxwell, double_sided_maxwell, wald,
multivariate_normal, orthogonal, ball), the gamma family by Marsaglia and Tsang's rejection method (gamma,
loggamma, beta, dirichlet, chisquare, t, f, generalized_normal), and the discrete geometric, rademacher,
poisson, binomial and multinomial. Rejection samplers run one while loop over the whole array (every element
draws each round until all are accepted), so they trace and run under jit.

The samples are not bit for bit JAX's (the transforms are the textbook ones, and the draws per element differ);
the tests check each distribution against its CDF or moments."""

import math as _math

import numpy as _np

from . import _tessera as _C
from . import lax as _lax
from . import numpy as _tnp
from .numpy import _engine_dtype, asarray, float32, int32

_FLOATS = ("f32", "f64", "f16", "bf16")


def _random():
    from . import random
    return random


def _dims(shape):
    return () if shape is None else ((int(shape),) if isinstance(shape, int) else tuple(int(d) for d in shape))


def _float_dtype(dtype, name):
    dt = _engine_dtype(dtype)
    if dt not in _FLOATS:
        raise TypeError(f"random.{name}: dtype must be a float dtype; got {dtype}")
    return dt


def _param_shape(shape, name, *params):
    """shape, or (when None) the broadcast of the parameters' shapes; the parameters must broadcast to it."""
    shapes = [tuple(_np.shape(p)) if not isinstance(p, _tnp.Array) else tuple(p.shape) for p in params]
    joint = _np.broadcast_shapes(*shapes) if shapes else ()
    if shape is None:
        return joint
    shape = _dims(shape)
    try:
        if _np.broadcast_shapes(joint, shape) != shape:
            raise ValueError
    except ValueError:
        raise ValueError(f"random.{name}: the parameters' shapes {shapes} do not broadcast to shape {shape}") from None
    return shape


def _open_uniform(key, shape, dt):
    """Uniform in (0, 1): never 0, so its logarithm is finite."""
    tiny = float(_np.finfo(_np.float32 if dt != "f64" else _np.float64).tiny)
    return _random().uniform(key, shape, dt, minval=tiny, maxval=1.0)


def _as(x, dt):
    x = asarray(x)
    return x if x._dtype_name == dt else _C.astype(x, dt)


def _until_all_done(key, shape, dt, attempt, carry, done=None):
    """One while loop over the whole array: each round, attempt(k1, k2, carry) -> (finished, value, carry) for
    every element (two fresh keys a round); each element keeps the value of the first round it finished in, and
    the loop ends when all have. done: elements finished from the start (their value 0)."""
    rnd = _random()

    def body(state):
        key, carry, out, done = state
        key, k1, k2 = rnd.split(key, 3)
        finished, value, carry = attempt(k1, k2, carry)
        newly = _tnp.logical_and(finished, _tnp.logical_not(done))
        return key, carry, _tnp.where(newly, value, out), _tnp.logical_or(done, finished)

    def more(state):
        return _tnp.logical_not(_tnp.all(state[3]))

    done = _C.full(list(shape), False, "bool") if done is None else done
    return _lax.while_loop(more, body, (key, carry, _C.full(list(shape), 0.0, dt), done))[2]


# ---- integers and orderings -----------------------------------------------------------------------------

def randint(key, shape, minval, maxval, dtype=int32):
    """Integers in [minval, maxval) (broadcast to shape): two 32-bit draws per value reduced modulo the span, so
    the bias of the modulus is about span^2 / 2^64 (as JAX's); maxval <= minval gives minval."""
    dt = _engine_dtype(dtype)
    if dt not in ("i32", "u32", "u8"):
        raise TypeError(f"random.randint: dtype must be an integer dtype; got {dtype}")
    shape = _dims(shape)
    lo, hi = _as(minval, "i32"), _as(maxval, "i32")
    rnd = _random()
    k1, k2 = rnd.split(key)
    high, low = rnd.bits(k1, shape, "u32"), rnd.bits(k2, shape, "u32")
    span = _C.astype(hi - lo, "u32")
    span = _tnp.where(hi <= lo, _C.full([], 1, "u32"), span)
    span = _C.broadcast_to(span, list(shape))
    # (high * 2^32 + low) mod span, with 2^32 mod span = ((2^32 - 1) mod span + 1) mod span
    wrap = (_C.full(list(shape), 0xFFFFFFFF, "u32") % span + _C.full([], 1, "u32")) % span
    offset = ((high % span) * wrap + low % span) % span
    out = _C.astype(_C.broadcast_to(lo, list(shape)), "u32") + offset  # wraps as two's complement
    return _C.astype(_C.astype(out, "i32"), dt) if dt != "u32" else out


def _sort_rounds(n):
    """How many sorts by fresh 32-bit keys make ties between n elements unlikely enough (3 ln n / ln 2^32)."""
    return max(1, int(_np.ceil(3 * _np.log(max(n, 1)) / _np.log(2.0 ** 32 - 1))))


def _random_order(key, n):
    """A uniformly random permutation of range(n) (int32): sorts by random keys, repeated as _sort_rounds says."""
    rnd = _random()
    perm = _C.iota([n], 0, "i32")
    for _ in range(_sort_rounds(n)):
        key, sub = rnd.split(key)
        perm = _C.sort([rnd.bits(sub, (n,), "u32"), perm], 0, True, 1)[1]
    return perm


def permutation(key, x, axis=0, independent=False):
    """A random permutation of range(x) for an int x; else x shuffled along axis (one permutation for all its
    slices, or with independent=True each 1-d slice on its own)."""
    if isinstance(x, (int, _np.integer)):
        return _random_order(key, int(x))
    x = asarray(x)
    if x.ndim == 0:
        raise TypeError("random.permutation: x must be an int or an array of at least one dimension")
    axis = axis % x.ndim
    n = x.shape[axis]
    if not independent:
        return _tnp.take(x, _random_order(key, n), axis=axis)
    rnd = _random()
    for _ in range(_sort_rounds(n)):
        key, sub = rnd.split(key)
        x = _C.sort([rnd.bits(sub, tuple(x.shape), "u32"), x], axis, True, 1)[1]
    return x


def shuffle(key, x, axis=0):
    """x with its slices along axis in a random order (permutation with independent=True)."""
    return permutation(key, x, axis, independent=True)


def choice(key, a, shape=(), replace=True, p=None, axis=0):
    """Samples of a (an int n: range(n)) along axis: with replacement uniformly or by the probabilities p (the
    inverse of p's cumulative sum); without, the first of a random permutation, or with p the largest of
    log(p) + Gumbel noise (a weighted draw without replacement)."""
    shape = _dims(shape)
    count = int(_np.prod(shape))
    if isinstance(a, (int, _np.integer)):
        n, arr = int(a), None
    else:
        arr = asarray(a)
        if arr.ndim == 0:
            raise ValueError("random.choice: a must be an int or an array of at least one dimension")
        axis = axis % arr.ndim
        n = arr.shape[axis]
    if n <= 0 and count:
        raise ValueError("random.choice: a must be greater than 0 unless no samples are taken")
    if not replace and count > n:
        raise ValueError(f"random.choice: cannot take {count} samples without replacement from {n} elements")
    if p is not None:
        p = _as(p, "f32")
        if p.ndim != 1 or p.shape[0] != n:
            raise ValueError(f"random.choice: p must be 1-d with {n} probabilities; got shape {tuple(p.shape)}")
    if replace and p is None:
        ind = randint(key, (count,), 0, n)
    elif replace:
        cdf = _tnp.cumsum(p)
        u = _random().uniform(key, (count,), "f32") * cdf[-1]
        ind = _tnp.minimum(_tnp.searchsorted(cdf, u, side="right"), n - 1)
    elif p is None:
        ind = _random_order(key, n)[:count]
    else:
        scores = gumbel(key, (n,)) + _tnp.log(p)
        ind = _C.astype(_lax.top_k(scores, count)[1], "i32") if count else _C.full([0], 0, "i32")
    if arr is None:
        return _tnp.reshape(ind, shape)
    taken = _tnp.take(arr, ind, axis=axis)
    return _tnp.reshape(taken, arr.shape[:axis] + shape + arr.shape[axis + 1:])


# ---- closed-form inverse CDFs ---------------------------------------------------------------------------

def exponential(key, shape=(), dtype=float32):
    """Exponential(1): -log(1 - u)."""
    dt = _float_dtype(dtype, "exponential")
    return -_tnp.log1p(-_random().uniform(key, _dims(shape), dt))


def gumbel(key, shape=(), dtype=float32, mode="low"):
    """The standard Gumbel distribution: -log(-log u)."""
    dt = _float_dtype(dtype, "gumbel")
    return -_tnp.log(-_tnp.log(_open_uniform(key, _dims(shape), dt)))


def laplace(key, shape=(), dtype=float32):
    """Laplace(0, 1): -sign(v) log(1 - |v|) for v uniform in (-1, 1)."""
    dt = _float_dtype(dtype, "laplace")
    eps = float(_np.finfo(_np.float32).eps)
    v = _random().uniform(key, _dims(shape), dt, minval=-1.0 + eps, maxval=1.0)
    return -_tnp.sign(v) * _tnp.log1p(-_tnp.abs(v))


def logistic(key, shape=(), dtype=float32):
    """The standard logistic distribution: log(u / (1 - u))."""
    dt = _float_dtype(dtype, "logistic")
    u = _open_uniform(key, _dims(shape), dt)
    return _tnp.log(u) - _tnp.log1p(-u)


def cauchy(key, shape=(), dtype=float32):
    """The standard Cauchy distribution: tan(pi (u - 1/2))."""
    dt = _float_dtype(dtype, "cauchy")
    u = _open_uniform(key, _dims(shape), dt)
    return _tnp.tan(_math.pi * (u - 0.5))


def pareto(key, b, shape=None, dtype=float32):
    """Pareto(b) on [1, inf): exp(exponential / b)."""
    dt = _float_dtype(dtype, "pareto")
    shape = _param_shape(shape, "pareto", b)
    return _tnp.exp(exponential(key, shape, dt) / _as(b, dt))


def rayleigh(key, scale=1.0, shape=None, dtype=float32):
    """Rayleigh(scale): scale sqrt(2 exponential)."""
    dt = _float_dtype(dtype, "rayleigh")
    shape = _param_shape(shape, "rayleigh", scale)
    return _tnp.sqrt(2.0 * exponential(key, shape, dt)) * _as(scale, dt)


def weibull_min(key, scale, concentration, shape=(), dtype=float32):
    """Weibull(scale, concentration): scale exponential^(1/concentration)."""
    dt = _float_dtype(dtype, "weibull_min")
    e = exponential(key, _dims(shape), dt)
    return _as(scale, dt) * _tnp.power(e, 1.0 / _as(concentration, dt))


def triangular(key, left, mode, right, shape=None, dtype=float32):
    """The triangular distribution on [left, right] with its peak at mode, by its inverse CDF."""
    dt = _float_dtype(dtype, "triangular")
    shape = _param_shape(shape, "triangular", left, mode, right)
    left, mode, right = _as(left, dt), _as(mode, dt), _as(right, dt)
    u = _random().uniform(key, shape, dt)
    width = right - left
    cut = (mode - left) / width
    below = left + _tnp.sqrt(u * width * (mode - left))
    above = right - _tnp.sqrt((1.0 - u) * width * (right - mode))
    return _tnp.where(u < cut, below, above)


def truncated_normal(key, lower, upper, shape=None, dtype=float32):
    """The standard normal restricted to [lower, upper]: the normal CDF's inverse (erfinv) of a uniform between
    the CDF's values at the bounds, clipped to them against rounding."""
    dt = _float_dtype(dtype, "truncated_normal")
    shape = _param_shape(shape, "truncated_normal", lower, upper)
    lo, hi = _as(lower, dt), _as(upper, dt)
    sqrt2 = _math.sqrt(2.0)
    a, b = _lax.erf(lo / sqrt2), _lax.erf(hi / sqrt2)
    u = _random().uniform(key, shape, dt, minval=0.0, maxval=1.0)
    out = sqrt2 * _lax.erf_inv(a + u * (b - a))
    return _tnp.clip(out, lo, hi)


# ---- from normals ---------------------------------------------------------------------------------------

def lognormal(key, sigma=1.0, shape=None, dtype=float32):
    """exp(sigma normal)."""
    dt = _float_dtype(dtype, "lognormal")
    shape = _param_shape(shape, "lognormal", sigma)
    return _tnp.exp(_random().normal(key, shape, dt) * _as(sigma, dt))


def maxwell(key, shape=(), dtype=float32):
    """The Maxwell distribution: the length of a standard normal 3-vector."""
    dt = _float_dtype(dtype, "maxwell")
    n = _random().normal(key, _dims(shape) + (3,), dt)
    return _tnp.sqrt(_tnp.sum(n * n, axis=-1))


def double_sided_maxwell(key, loc, scale, shape=(), dtype=float32):
    """loc + scale * maxwell with a random sign."""
    dt = _float_dtype(dtype, "double_sided_maxwell")
    k1, k2 = _random().split(key)
    shape = _dims(shape)
    sign = _C.astype(rademacher(k2, shape), dt)
    return _as(loc, dt) + _as(scale, dt) * sign * maxwell(k1, shape, dt)


def wald(key, mean, shape=None, dtype=float32):
    """The Wald (inverse Gaussian) distribution with unit shape, by Michael, Schucany and Haas's transform of a
    squared normal and a uniform."""
    dt = _float_dtype(dtype, "wald")
    shape = _param_shape(shape, "wald", mean)
    k1, k2 = _random().split(key)
    mu = _as(mean, dt)
    y = _random().normal(k1, shape, dt)
    y = y * y
    x = mu + mu * mu * y / 2 - mu / 2 * _tnp.sqrt(4 * mu * y + mu * mu * y * y)
    u = _random().uniform(k2, shape, dt)
    return _tnp.where(u <= mu / (mu + x), x, mu * mu / x)


def multivariate_normal(key, mean, cov, shape=None, dtype=float32, method="cholesky"):
    """mean + A z for z standard normal and A A^T = cov (A from cholesky, or eigh or svd for semi-definite
    covariances). shape: the batch shape (default mean's and cov's broadcast batch)."""
    dt = _float_dtype(dtype, "multivariate_normal")
    mean, cov = _as(mean, dt), _as(cov, dt)
    if mean.ndim < 1 or cov.ndim < 2 or cov.shape[-1] != cov.shape[-2] or cov.shape[-1] != mean.shape[-1]:
        raise ValueError(f"random.multivariate_normal: mean [..., n] and cov [..., n, n] expected; got shapes "
                         f"{tuple(mean.shape)} and {tuple(cov.shape)}")
    batch = _np.broadcast_shapes(tuple(mean.shape[:-1]), tuple(cov.shape[:-2]))
    shape = batch if shape is None else _dims(shape)
    if method == "cholesky":
        factor = _tnp.linalg.cholesky(cov)
    elif method == "eigh":
        w, v = _tnp.linalg.eigh(cov)
        factor = v * _tnp.sqrt(_tnp.maximum(w, 0.0))[..., None, :]
    elif method == "svd":
        u, s, _ = _tnp.linalg.svd(cov)
        factor = u * _tnp.sqrt(s)[..., None, :]
    else:
        raise ValueError(f"random.multivariate_normal: method must be 'cholesky', 'eigh' or 'svd', not {method!r}")
    z = _random().normal(key, shape + (mean.shape[-1],), dt)
    return mean + _tnp.einsum("...ij,...j->...i", factor, z)


def orthogonal(key, n, shape=(), dtype=float32):
    """A random n x n orthogonal matrix (Haar measure): the Q of a standard normal matrix's QR, its columns'
    signs set by R's diagonal."""
    dt = _float_dtype(dtype, "orthogonal")
    z = _random().normal(key, _dims(shape) + (n, n), dt)
    q, r = _tnp.linalg.qr(z)
    d = _tnp.diagonal(r, axis1=-2, axis2=-1)
    return q * _tnp.where(d < 0, -1.0, 1.0)[..., None, :]


def ball(key, d, p=2, shape=(), dtype=float32):
    """Points uniform in the d-dimensional unit p-ball: a generalized normal vector normalized, times
    u^(1/d)."""
    dt = _float_dtype(dtype, "ball")
    k1, k2 = _random().split(key)
    g = generalized_normal(k1, p, _dims(shape) + (d,), dt)
    norm = _tnp.power(_tnp.sum(_tnp.power(_tnp.abs(g), float(p)), axis=-1, keepdims=True), 1.0 / p)
    u = _tnp.power(_open_uniform(k2, _dims(shape), dt), 1.0 / d)
    return g / norm * u[..., None]


# ---- the gamma family -----------------------------------------------------------------------------------

def _gamma_at_least_one(key, alpha, dt):
    """Gamma(alpha) for alpha >= 1 (broadcast already), by Marsaglia and Tsang's method: d = alpha - 1/3,
    c = 1/sqrt(9d); accept d v with v = (1 + c x)^3 for x normal when log u < x^2/2 + d - d v + d log v. One
    while loop draws for every element until all are accepted (about 1.05 rounds on average at alpha = 1)."""
    rnd = _random()
    d = alpha - 1.0 / 3.0
    c = 1.0 / _tnp.sqrt(9.0 * d)
    shape = tuple(alpha.shape)

    def attempt(kx, ku, carry):
        x = rnd.normal(kx, shape, dt)
        v = 1.0 + c * x
        v = v * v * v
        u = _open_uniform(ku, shape, dt)
        ok = _tnp.logical_and(v > 0, _tnp.log(u) < 0.5 * x * x + d - d * v + d * _tnp.log(_tnp.maximum(v, 1e-30)))
        return ok, d * v, carry

    return _until_all_done(key, shape, dt, attempt, _C.full([], 0.0, dt))


def gamma(key, a, shape=None, dtype=float32):
    """Gamma(a) with unit scale. a < 1 draws Gamma(a + 1) u^(1/a) (Marsaglia and Tsang's boost)."""
    dt = _float_dtype(dtype, "gamma")
    shape = _param_shape(shape, "gamma", a)
    a = _C.broadcast_to(_as(a, dt), list(shape))
    k1, k2 = _random().split(key)
    boosted = _gamma_at_least_one(k1, _tnp.where(a < 1.0, a + 1.0, a), dt)
    u = _open_uniform(k2, shape, dt)
    return _tnp.where(a < 1.0, boosted * _tnp.power(u, 1.0 / a), boosted)


def loggamma(key, a, shape=None, dtype=float32):
    """log of a Gamma(a) sample, computed without forming tiny values for small a: log Gamma(a + 1) + log(u)/a."""
    dt = _float_dtype(dtype, "loggamma")
    shape = _param_shape(shape, "loggamma", a)
    a = _C.broadcast_to(_as(a, dt), list(shape))
    k1, k2 = _random().split(key)
    boosted = _tnp.log(_gamma_at_least_one(k1, _tnp.where(a < 1.0, a + 1.0, a), dt))
    u = _open_uniform(k2, shape, dt)
    return _tnp.where(a < 1.0, boosted + _tnp.log(u) / a, boosted)


def beta(key, a, b, shape=None, dtype=float32):
    """Beta(a, b): x / (x + y) for x ~ Gamma(a), y ~ Gamma(b), formed from their logarithms."""
    dt = _float_dtype(dtype, "beta")
    shape = _param_shape(shape, "beta", a, b)
    k1, k2 = _random().split(key)
    lx, ly = loggamma(k1, a, shape, dt), loggamma(k2, b, shape, dt)
    m = _tnp.maximum(lx, ly)
    x, y = _tnp.exp(lx - m), _tnp.exp(ly - m)
    return x / (x + y)


def dirichlet(key, alpha, shape=None, dtype=float32):
    """Dirichlet(alpha) over alpha's last axis: Gamma(alpha_i) samples normalized (from their logarithms)."""
    dt = _float_dtype(dtype, "dirichlet")
    alpha = _as(alpha, dt)
    if alpha.ndim < 1:
        raise ValueError("random.dirichlet: alpha must have at least one dimension")
    batch = tuple(alpha.shape[:-1]) if shape is None else _dims(shape)
    lg = loggamma(key, alpha, batch + (alpha.shape[-1],), dt)
    lg = lg - _tnp.max(lg, axis=-1, keepdims=True)
    g = _tnp.exp(lg)
    return g / _tnp.sum(g, axis=-1, keepdims=True)


def chisquare(key, df, shape=None, dtype=float32):
    """Chi-square(df): 2 Gamma(df / 2)."""
    dt = _float_dtype(dtype, "chisquare")
    shape = _param_shape(shape, "chisquare", df)
    return 2.0 * gamma(key, _as(df, dt) / 2.0, shape, dt)


def t(key, df, shape=(), dtype=float32):
    """Student's t(df): normal / sqrt(chisquare(df) / df)."""
    dt = _float_dtype(dtype, "t")
    shape = _param_shape(shape, "t", df)
    k1, k2 = _random().split(key)
    df = _as(df, dt)
    return _random().normal(k1, shape, dt) * _tnp.sqrt(df / chisquare(k2, df, shape, dt))


def f(key, dfnum, dfden, shape=(), dtype=float32):
    """F(dfnum, dfden): the ratio of two chi-squares, each over its degrees of freedom."""
    dt = _float_dtype(dtype, "f")
    shape = _param_shape(shape, "f", dfnum, dfden)
    k1, k2 = _random().split(key)
    num, den = _as(dfnum, dt), _as(dfden, dt)
    return (chisquare(k1, num, shape, dt) / num) / (chisquare(k2, den, shape, dt) / den)


def generalized_normal(key, p, shape=(), dtype=float32):
    """The generalized normal distribution with density proportional to exp(-|x|^p): a random sign times
    Gamma(1/p)^(1/p)."""
    dt = _float_dtype(dtype, "generalized_normal")
    k1, k2 = _random().split(key)
    shape = _dims(shape)
    g = gamma(k1, 1.0 / float(p), shape, dt)
    return _C.astype(rademacher(k2, shape), dt) * _tnp.power(g, 1.0 / float(p))


# ---- discrete -------------------------------------------------------------------------------------------

def rademacher(key, shape=(), dtype=int32):
    """-1 or 1 with equal probability."""
    b = _random().bernoulli(key, 0.5, _dims(shape))
    return _C.astype(2 * _C.astype(b, "i32") - 1, _engine_dtype(dtype))


def geometric(key, p, shape=None, dtype=int32):
    """The number of Bernoulli(p) trials up to the first success (1, 2, ...): floor(log u / log(1 - p)) + 1."""
    shape = _param_shape(shape, "geometric", p)
    p = _as(p, "f32")
    u = _open_uniform(key, shape, "f32")
    return _C.astype(_tnp.floor(_tnp.log(u) / _tnp.log1p(-p)) + 1.0, _engine_dtype(dtype))


_POISSON_SWITCH = 10.0


def poisson(key, lam, shape=None, dtype=int32):
    """Poisson(lam). Below lam = 10, Knuth's method (multiply uniforms until the product falls below e^-lam);
    from 10, Hormann's transformed rejection with squeeze (PTRS), about 1.1 rounds per value. Both run in one
    while loop over the whole array."""
    rnd = _random()
    shape = _param_shape(shape, "poisson", lam)
    lam = _C.broadcast_to(_as(lam, "f32"), list(shape))
    small = lam < _POISSON_SWITCH
    # PTRS constants (for lam >= 10; computed for all and used where lam is large)
    big = _tnp.maximum(lam, _POISSON_SWITCH)
    log_lam = _tnp.log(big)
    b = 0.931 + 2.53 * _tnp.sqrt(big)
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    v_r = 0.9277 - 3.6224 / (b - 2)
    limit = _tnp.exp(-_tnp.where(small, lam, 0.0))

    def attempt(k1, k2, carry):
        count, product = carry
        u = rnd.uniform(k1, shape, "f32")
        # Knuth: one more factor of the product per round
        product = product * u
        knuth_done = product < limit
        # PTRS: one attempt per round
        uu = u - 0.5
        v = _open_uniform(k2, shape, "f32")
        us = 0.5 - _tnp.abs(uu)
        k = _tnp.floor((2 * a / us + b) * uu + big + 0.43)
        squeeze = _tnp.logical_and(us >= 0.07, v <= v_r)
        reject = _tnp.logical_or(k < 0, _tnp.logical_and(us < 0.013, v > us))
        log_ratio = _tnp.log(v * inv_alpha / (a / (us * us) + b))
        exact = log_ratio <= -big + k * log_lam - _lax.lgamma(_tnp.maximum(k, 0.0) + 1.0)
        accept = _tnp.logical_or(squeeze, _tnp.logical_and(_tnp.logical_not(reject), exact))
        return _tnp.where(small, knuth_done, accept), _tnp.where(small, count, k), (count + 1.0, product)

    carry = (_C.full(list(shape), 0.0, "f32"), _C.full(list(shape), 1.0, "f32"))
    return _C.astype(_until_all_done(key, shape, "f32", attempt, carry), _engine_dtype(dtype))


_BINOMIAL_SWITCH = 10.0


def binomial(key, n, p, shape=None, dtype=float32):
    """Binomial(n, p), as floats (jax.random's dtype). With q = min(p, 1 - p) and n q below 10, the waiting-time
    method (successes counted while geometric gaps fit in n trials, about n q + 1 rounds); from 10, Hormann's
    transformed rejection (BTRS), about 1.2 rounds. p above 1/2 samples n - Binomial(n, 1 - p). One while loop
    over the whole array."""
    dt = _float_dtype(dtype, "binomial")
    shape = _param_shape(shape, "binomial", n, p)
    n = _C.broadcast_to(_as(n, "f32"), list(shape))
    p = _C.broadcast_to(_as(p, "f32"), list(shape))
    flip = p > 0.5
    q = _tnp.where(flip, 1.0 - p, p)
    q_safe = _tnp.clip(q, 1e-7, 0.5)
    small = n * q < _BINOMIAL_SWITCH
    log_miss = _tnp.log1p(-q_safe)
    # BTRS constants (used where n q >= 10)
    spq = _tnp.sqrt(n * q_safe * (1.0 - q_safe))
    b = 1.15 + 2.53 * spq
    a = -0.0873 + 0.0248 * b + 0.01 * q_safe
    c = n * q_safe + 0.5
    v_r = 0.92 - 4.2 / b
    alpha = (2.83 + 5.1 / b) * spq
    lpq = _tnp.log(q_safe / (1.0 - q_safe))
    m = _tnp.floor((n + 1.0) * q_safe)
    h = _lax.lgamma(m + 1.0) + _lax.lgamma(n - m + 1.0)

    def attempt(k1, k2, carry):
        count, trials = carry
        u1 = _open_uniform(k1, shape, "f32")
        # waiting time: the next success comes after a geometric number of trials
        trials = trials + _tnp.floor(_tnp.log(u1) / log_miss) + 1.0
        wait_done = trials > n
        # BTRS: one attempt
        u = u1 - 0.5
        v = _open_uniform(k2, shape, "f32")
        us = 0.5 - _tnp.abs(u)
        k = _tnp.floor((2.0 * a / us + b) * u + c)
        inside = _tnp.logical_and(k >= 0, k <= n)
        squeeze = _tnp.logical_and(us >= 0.07, v <= v_r)
        kk = _tnp.clip(k, 0.0, n)
        bound = h - _lax.lgamma(kk + 1.0) - _lax.lgamma(n - kk + 1.0) + (kk - m) * lpq
        exact = _tnp.log(v * alpha / (a / (us * us) + b)) <= bound
        accept = _tnp.logical_and(inside, _tnp.logical_or(squeeze, exact))
        return _tnp.where(small, wait_done, accept), _tnp.where(small, count, k), (count + 1.0, trials)

    zeros = _C.full(list(shape), 0.0, "f32")
    # q = 0 (or n = 0) has nothing to sample: done from the start, with 0 successes
    trivial = _tnp.logical_or(q <= 0.0, n <= 0.0)
    out = _until_all_done(key, shape, "f32", attempt, (zeros, zeros), trivial)
    out = _tnp.where(flip, n - out, out)
    return _C.astype(out, dt)


def multinomial(key, n, p, *, shape=None, dtype=float32, unroll=1):
    """Counts of n draws over the categories of p's last axis: one binomial per category, of the draws left
    over the probability left."""
    dt = _float_dtype(dtype, "multinomial")
    p = _as(p, "f32")
    if p.ndim < 1:
        raise ValueError("random.multinomial: p must have at least one dimension (the categories)")
    batch = _np.broadcast_shapes(tuple(p.shape[:-1]), tuple(_np.shape(n)) if not isinstance(n, _tnp.Array)
                                 else tuple(n.shape)) if shape is None else _dims(shape)[:-1] if shape else ()
    left = _C.broadcast_to(_as(n, "f32"), list(batch))
    mass = _tnp.ones(batch, dtype="float32")
    keys = _random().split(key, p.shape[-1])
    counts = []
    for i in range(p.shape[-1]):
        pi = _C.broadcast_to(p[..., i], list(batch))
        if i == p.shape[-1] - 1:
            x = left
        else:
            frac = _tnp.clip(pi / _tnp.maximum(mass, 1e-30), 0.0, 1.0)
            x = binomial(keys[i], left, frac, batch)
        counts.append(x)
        left = left - x
        mass = mass - pi
    return _C.astype(_tnp.stack(counts, -1), dt)


# ---- keys -----------------------------------------------------------------------------------------------

def clone(key):
    """The key itself: keys are immutable arrays, so a copy is never needed."""
    return key


def key_data(keys):
    """The raw u32 words of keys: keys are their raw data here (u32[..., 2])."""
    return asarray(keys)


def wrap_key_data(key_bits_array, *, impl=None):
    """A key from its raw u32[..., 2] words (threefry2x32 only)."""
    if impl not in (None, "threefry2x32"):
        raise ValueError(f"random.wrap_key_data: only the threefry2x32 implementation exists, not {impl!r}")
    k = asarray(key_bits_array)
    if k._dtype_name != "u32" or k.ndim < 1 or k.shape[-1] != 2:
        raise TypeError(f"random.wrap_key_data: a u32[..., 2] array expected; got {k._dtype_name}{list(k.shape)}")
    return k


def key_impl(keys):
    """The PRNG implementation's name: threefry2x32 (JAX's default)."""
    return "threefry2x32"
