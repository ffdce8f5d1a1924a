"""tessera.nn: modules in the style of Flax linen (Module, compact, Dense, Embed, LayerNorm, RMSNorm, GroupNorm,
BatchNorm, Conv, ConvTranspose, Upsample, Dropout, Sequential: tessera/linen.py), the pools, and the activation functions of jax.nn, which flax.linen
re-exports."""

from . import _tessera as _C
from .numpy import asarray, _engine_dtype, float32, _inexact, _axes, _no_axes

from .linen import (Module, compact, Dense, Embed, LayerNorm, RMSNorm, GroupNorm, BatchNorm, Conv, ConvTranspose,
                    Upsample, Dropout, Sequential, Variable, initializers, MultiHeadDotProductAttention,
                    dot_product_attention, make_causal_mask)

__all__ = ["Module", "compact", "Dense", "Embed", "LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm", "Conv",
           "ConvTranspose", "Upsample", "Dropout", "Sequential", "Variable", "initializers",
           "MultiHeadDotProductAttention", "dot_product_attention", "make_causal_mask", "relu", "gelu", "sigmoid", "silu", "swish", "softmax", "log_softmax", "logsumexp", "one_hot",
           "max_pool", "avg_pool", "global_avg_pool"]


def relu(x):
    return _C.relu(x)


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


def softmax(x, axis=-1):
    """axis: an int, a tuple of axes or None (all), as jax.nn.softmax."""
    x = _inexact(x)
    if _single_axis(axis):
        return _C.softmax(x, axis if isinstance(axis, int) else axis[0])
    return _C.exp(log_softmax(x, axis))


def log_softmax(x, axis=-1):
    x = _inexact(x)
    if _single_axis(axis):
        return _C.log_softmax(x, axis if isinstance(axis, int) else axis[0])
    if _no_axes(axis):
        return x - x  # each element is its own slice: log 1 (NaN where x is not finite, as JAX's)
    return x - logsumexp(x, axis, keepdims=True)


def logsumexp(x, axis=None, keepdims=False):
    """jax.nn.logsumexp (jax.scipy.special.logsumexp): over every axis when axis is None, over none for
    axis=(). Where the maximum is infinite the result is that maximum: -inf for a slice of -infs, +inf for
    one holding +inf (NaN if it also holds NaN), as JAX gets by subtracting 0 instead of a non-finite max."""
    x = _inexact(x)
    if _no_axes(axis):
        return x
    axes = list(range(x.ndim)) if axis is None else _axes(axis)
    out = _C.logsumexp(x, axes, keepdims)
    # The engine's op subtracts the max, which gives inf - inf = NaN there.
    amax = _C.stop_gradient(_C.max(x, axes, keepdims))
    return _C.where(_C.isfinite(amax), out, _C.astype(amax, out._dtype_name))


def one_hot(x, num_classes, dtype=float32):
    return _C.one_hot(asarray(x), num_classes, _engine_dtype(dtype))


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
