"""tessera.nn: modules in the style of Flax linen (Module, compact, Dense, Embed, LayerNorm, RMSNorm, GroupNorm,
BatchNorm, Conv, ConvTranspose, Upsample, Dropout, Sequential: tessera/linen.py), the pools, and the activation functions of jax.nn, which flax.linen
re-exports."""

import math as _math

from . import _tessera as _C
from .numpy import asarray, _engine_dtype, float32, _inexact, _axes, _no_axes

from .linen import (Module, compact, Dense, Embed, LayerNorm, RMSNorm, GroupNorm, BatchNorm, Conv, ConvTranspose,
                    Upsample, Dropout, Sequential, Variable, initializers, MultiHeadDotProductAttention,
                    dot_product_attention, make_causal_mask, DenseGeneral, Einsum, InstanceNorm, PReLU)
from ._linen_recurrent import SimpleCell, GRUCell, LSTMCell, RNN

__all__ = ["Module", "compact", "Dense", "Embed", "LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm", "Conv",
           "ConvTranspose", "Upsample", "Dropout", "Sequential", "Variable", "initializers",
           "MultiHeadDotProductAttention", "dot_product_attention", "make_causal_mask", "DenseGeneral", "Einsum",
           "InstanceNorm", "PReLU", "SimpleCell", "GRUCell", "LSTMCell", "RNN", "relu", "gelu", "sigmoid", "silu", "swish", "softmax", "log_softmax", "logsumexp", "one_hot",
           "softplus", "soft_sign", "log_sigmoid", "leaky_relu", "elu", "celu", "selu", "relu6", "hard_sigmoid",
           "hard_silu", "hard_swish", "hard_tanh", "tanh", "mish", "squareplus", "glu", "standardize",
           "max_pool", "avg_pool", "global_avg_pool", "identity", "log1mexp", "logmeanexp", "sparse_plus",
           "sparse_sigmoid"]


def relu(x):
    """Unsigned inputs are returned as they are (max(x, 0) is x), bools as int32 (jax.nn's)."""
    x = asarray(x)
    if x._dtype_name == "bool":
        return _C.astype(x, "i32")
    return x if x._dtype_name in ("u8", "u32") else _C.relu(x)


def gelu(x, approximate=True):
    """approximate=True: the tanh form (GPT-2's), as jax.nn.gelu's default."""
    return _C.gelu(_inexact(x), approximate)


def sigmoid(x):
    return _C.sigmoid(_inexact(x))


def silu(x):
    x = _inexact(x)
    return x * _C.sigmoid(x)


swish = silu


# Integer and bool inputs become float32 here (jax.numpy's promote_args_inexact), as in jax.nn.


def _single_axis(axis):
    return isinstance(axis, int) or (isinstance(axis, (tuple, list)) and len(axis) == 1)


def _masked_out(x, where, value):
    return x if where is None else _C.where(_C.broadcast_to(asarray(where, "bool"), list(x.shape)), x, value)


def softmax(x, axis=-1, where=None):
    """axis: an int, a tuple of axes or None (all), as jax.nn.softmax. where=: only those elements take part;
    the others come out 0."""
    x = _inexact(x)
    if where is not None:
        return _masked_out(softmax(_masked_out(x, where, -_math.inf), axis), where, 0.0)
    if _single_axis(axis):
        return _C.softmax(x, axis if isinstance(axis, int) else axis[0])
    return _C.exp(log_softmax(x, axis))


def log_softmax(x, axis=-1, where=None):
    """where=: only those elements take part; the others come out -inf."""
    x = _inexact(x)
    if where is not None:
        return _masked_out(log_softmax(_masked_out(x, where, -_math.inf), axis), where, -_math.inf)
    if _single_axis(axis):
        return _C.log_softmax(x, axis if isinstance(axis, int) else axis[0])
    if _no_axes(axis):
        return x - x  # each element is its own slice: log 1 (NaN where x is not finite, as JAX's)
    return x - logsumexp(x, axis, keepdims=True)


def logsumexp(x, axis=None, keepdims=False, b=None, where=None):
    """jax.nn.logsumexp (jax.scipy.special.logsumexp): over every axis when axis is None, over none for
    axis=(). Where the maximum is infinite the result is that maximum: -inf for a slice of -infs, +inf for
    one holding +inf (NaN if it also holds NaN), as JAX gets by subtracting 0 instead of a non-finite max.
    b= scales each exp (log(sum(b * exp(x))): x + log(b), NaN for negative b as JAX without return_sign);
    where= leaves the other elements out."""
    x = _inexact(x)
    if b is not None:
        b = _inexact(b)
        x = x + _C.log(_C.astype(b, x._dtype_name) if b._dtype_name != x._dtype_name else b)
    x = _masked_out(x, where, -_math.inf)
    if _no_axes(axis):
        return x
    axes = list(range(x.ndim)) if axis is None else _axes(axis)
    out = _C.logsumexp(x, axes, keepdims)
    # The engine's op subtracts the max, which gives inf - inf = NaN there.
    amax = _C.stop_gradient(_C.max(x, axes, keepdims))
    return _C.where(_C.isfinite(amax), out, _C.astype(amax, out._dtype_name))


def one_hot(x, num_classes, dtype=float32, axis=-1):
    """axis: where the class dim goes in the result (the last by default)."""
    out = _C.one_hot(asarray(x), num_classes, _engine_dtype(dtype))
    if axis in (-1, out.ndim - 1):
        return out
    from .numpy import moveaxis
    return moveaxis(out, -1, axis)


# More of jax.nn's activations, written as jax.nn writes them.
def softplus(x):
    from .numpy import logaddexp
    return logaddexp(_inexact(x), 0.0)


def soft_sign(x):
    x = _inexact(x)
    return x / (_C.abs(x) + 1.0)


def log_sigmoid(x):
    return -softplus(-_inexact(x))


def leaky_relu(x, negative_slope=0.01):
    x = _inexact(x)
    return _C.where(_C.greater_equal(x, 0.0), x, negative_slope * x)


def elu(x, alpha=1.0):
    x = _inexact(x)
    positive = _C.greater(x, 0.0)
    return _C.where(positive, x, alpha * _C.expm1(_C.where(positive, 0.0, x)))


def celu(x, alpha=1.0):
    x = _inexact(x)
    return _C.maximum(x, 0.0) + alpha * _C.expm1(_C.minimum(x, 0.0) / alpha)


def selu(x):
    return 1.0507009873554804934193349852946 * elu(x, 1.6732632423543772848170429916717)


def relu6(x):
    return _C.minimum(_C.maximum(_inexact(x), 0.0), 6.0)


def hard_sigmoid(x):
    return relu6(_inexact(x) + 3.0) / 6.0


def hard_silu(x):
    x = _inexact(x)
    return x * hard_sigmoid(x)


hard_swish = hard_silu


def hard_tanh(x):
    x = _inexact(x)
    return _C.where(_C.greater(x, 1.0), _C.scalar(1.0, x), _C.where(_C.less(x, -1.0), _C.scalar(-1.0, x), x))


def tanh(x):
    return _C.tanh(_inexact(x))


def mish(x):
    x = _inexact(x)
    return x * _C.tanh(softplus(x))


def squareplus(x, b=4):
    x = _inexact(x)
    return (x + _C.sqrt(x * x + b)) / 2.0


def glu(x, axis=-1):
    """The first half along axis times the sigmoid of the second."""
    from .numpy import split
    a, g = split(_inexact(x), 2, axis)
    return a * _C.sigmoid(g)


def identity(x):
    """x itself (the identity activation)."""
    return asarray(x)


def log1mexp(x):
    """log(1 - exp(-x)) for x > 0 without cancellation: log1p(-exp(-x)) above log 2, log(-expm1(-x)) below
    (Maechler's split)."""
    x = _inexact(x)
    from .numpy import expm1, exp, log, log1p, where
    return where(x > _math.log(2.0), log1p(-exp(-x)), log(-expm1(-x)))


def logmeanexp(x, axis=None, where=None, keepdims=False):
    """log(mean(exp(x))) over axis (every axis when None), only where where= holds: logsumexp less the log of
    the count."""
    from .numpy import log, sum as _sum
    x = _inexact(x)
    lse = logsumexp(x, axis=axis, keepdims=keepdims, where=where)
    if where is None:
        axes = range(x.ndim) if axis is None else [a % x.ndim for a in _axes(axis)]
        count = 1
        for a in axes:
            count *= x.shape[a]
        return lse - _math.log(count)
    w = _C.broadcast_to(asarray(where), list(x.shape))
    count = _sum(_C.astype(w, x._dtype_name), axis=axis, keepdims=keepdims)
    return lse - log(count)


def sparse_plus(x):
    """0 below -1, (x + 1)^2 / 4 between -1 and 1, x above 1: a softplus whose gradient (sparse_sigmoid) is
    exactly 0 and 1 outside [-1, 1]."""
    x = _inexact(x)
    from .numpy import where
    return where(x <= -1.0, 0.0, where(x >= 1.0, x, (x + 1.0) * (x + 1.0) * 0.25))


def sparse_sigmoid(x):
    """0 below -1, (x + 1) / 2 between -1 and 1, 1 above: the gradient of sparse_plus."""
    x = _inexact(x)
    from .numpy import clip
    return clip((x + 1.0) * 0.5, 0.0, 1.0)


def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5, where=None):
    """(x - mean) / sqrt(variance + epsilon), the statistics over axis (E[x^2] - E[x]^2, as jax.nn)."""
    from . import numpy as tnp
    x = _inexact(x)
    if mean is None:
        mean = tnp.mean(x, axis, keepdims=True, where=where)
    if variance is None:
        variance = tnp.mean(x * x, axis, keepdims=True, where=where) - mean * mean
    return (x - mean) * _C.rsqrt(variance + epsilon)


def _pool_padding(padding):
    return padding if isinstance(padding, str) else [(int(lo), int(hi)) for lo, hi in padding]


def max_pool(inputs, window_shape, strides=None, padding="VALID"):
    """flax.linen.max_pool: inputs [batch..., window dims..., features]; padding "SAME", "VALID" or one
    (low, high) pair per window dim."""
    return _C.max_pool(asarray(inputs), list(window_shape), list(strides or []), _pool_padding(padding))


def avg_pool(inputs, window_shape, strides=None, padding="VALID", count_include_pad=True):
    """flax.linen.avg_pool: the window mean; count_include_pad=True divides by the full window size (padding
    counts as zeros), False by the positions inside the inputs."""
    return _C.avg_pool(asarray(inputs), list(window_shape), list(strides or []), _pool_padding(padding),
                       count_include_pad)


def global_avg_pool(inputs):
    """The mean over the spatial dims of channels-last inputs [N, spatial..., C] -> [N, C] (a ResNet's head)."""
    x = asarray(inputs)
    from .numpy import mean
    return mean(x, axis=tuple(range(1, x.ndim - 1)))
