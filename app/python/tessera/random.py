"""tessera.random: jax.random's names over the engine's Threefry-2x32 (engine/random): the same bits as JAX's
default PRNG. A key is a u32[2] array. The samplers beyond bits, uniform, normal, bernoulli and categorical are
compositions in _random_sampling.py."""

from . import _tessera as _C
from .numpy import _engine_dtype, asarray, bfloat16, float16, float32, float64

__all__ = ["PRNGKey", "key", "split", "fold_in", "bits", "uniform", "normal", "bernoulli", "categorical",
           "randint", "permutation", "shuffle", "choice", "exponential", "gumbel", "laplace", "logistic", "cauchy",
           "pareto", "rayleigh", "weibull_min", "triangular", "truncated_normal", "lognormal", "maxwell",
           "double_sided_maxwell", "wald", "multivariate_normal", "orthogonal", "ball", "gamma", "loggamma", "beta",
           "dirichlet", "chisquare", "t", "f", "generalized_normal", "rademacher", "geometric", "poisson", "binomial",
           "multinomial", "clone",
           "key_data", "wrap_key_data", "key_impl"]


def _shape(shape):
    dims = [shape] if isinstance(shape, int) else [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise _C.ShapeError(f"negative dimension in shape {tuple(dims)}")
    return dims


def PRNGKey(seed):
    """jax.random.PRNGKey: [seed >> 32, seed & 0xffffffff] (seeds cast to uint64 as JAX's 64-bit mode does)."""
    return _C.random_key(int(seed))


key = PRNGKey


def split(key, num=2):
    """num new keys, as a u32[num, 2] array whose rows are keys."""
    return _C.random_split(key, num)


def fold_in(key, data):
    return _C.random_fold_in(key, data)


def bits(key, shape=(), dtype="u32"):
    return _C.random_bits(key, _shape(shape), _engine_dtype(dtype))


def uniform(key, shape=(), dtype=float32, minval=0.0, maxval=1.0):
    return _C.random_uniform(key, _shape(shape), _engine_dtype(dtype), float(minval), float(maxval))


def normal(key, shape=(), dtype=float32):
    return _C.random_normal(key, _shape(shape), _engine_dtype(dtype))


def bernoulli(key, p=0.5, shape=None):
    """jax.random.bernoulli: True with probability p, which is a number or a float array broadcasting to shape
    (shape defaults to p's): uniform(key, shape, p's dtype) < p, JAX's bits."""
    if isinstance(p, (int, float)):
        return _C.random_bernoulli(key, float(p), _shape(() if shape is None else shape))
    p = asarray(p)
    if p.dtype not in (float32, float64, float16, bfloat16):
        raise _C.DTypeError(f"random.bernoulli: the probability p must have a float dtype, got {p.dtype}")
    shape = p.shape if shape is None else tuple(_shape(shape))
    if len(p.shape) > len(shape) or any(d != 1 and d != s for d, s in zip(reversed(p.shape), reversed(shape))):
        raise _C.ShapeError(f"random.bernoulli: p of shape {p.shape} does not broadcast to the requested shape "
                            f"{shape}")
    return uniform(key, shape, p.dtype) < p


def categorical(key, logits, axis=-1):
    return _C.random_categorical(key, asarray(logits), axis)


from ._random_sampling import (ball, beta, binomial, cauchy, chisquare, choice, clone, dirichlet, double_sided_maxwell,  # noqa: E402
                               exponential, f, gamma, generalized_normal, geometric, gumbel, key_data, key_impl,
                               laplace, loggamma, logistic, lognormal, maxwell, multinomial, multivariate_normal, orthogonal,
                               pareto, permutation, poisson, rademacher, randint, rayleigh, shuffle, t, triangular,
                               truncated_normal, wald, weibull_min, wrap_key_data)
