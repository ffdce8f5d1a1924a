"""tessera.image, as jax.image: resize with nearest or (bi/tri)linear interpolation, half-pixel centres.

Each resized axis is one matmul with a [out, in] weight matrix built on the host, so resize is differentiable,
batches under vmap and runs under jit like any other op. Linear weights are a triangle of one input pixel's
width, widened by the scale when shrinking (antialiasing, as jax.image.resize's default), and renormalised
where they fall outside the image (so an upsampled edge repeats its edge pixel)."""

import math

import numpy as _np

from . import numpy as _tnp
from .numpy import asarray

__all__ = ["resize"]

_METHODS = {"nearest": "nearest", "linear": "linear", "bilinear": "linear", "trilinear": "linear"}


def _weights(in_size, out_size, method, antialias=True):
    """[out_size, in_size] float32: output position o reads input i with weight w[o, i]."""
    w = _np.zeros((out_size, in_size), _np.float32)
    scale = in_size / out_size
    if method == "nearest":
        src = _np.minimum(_np.floor((_np.arange(out_size) + 0.5) * scale).astype(_np.int64), in_size - 1)
        w[_np.arange(out_size), src] = 1.0
        return w
    width = max(scale, 1.0) if antialias else 1.0  # the triangle's half-width in input pixels
    centres = (_np.arange(out_size) + 0.5) * scale - 0.5
    taps = _np.arange(in_size)
    w = _np.maximum(0.0, 1.0 - _np.abs(centres[:, None] - taps[None, :]) / width).astype(_np.float32)
    w /= _np.maximum(w.sum(axis=1, keepdims=True), 1e-12)
    return w


def resize(image, shape, method="linear", antialias=True, precision=None):
    """jax.image.resize: image resized to `shape` (same rank; every axis may change, batch and channel axes are
    usually given as they are). method: "nearest", "linear" (also "bilinear", "trilinear"). antialias=False
    keeps the linear triangle one input pixel wide when shrinking (plain interpolation)."""
    x = asarray(image)
    shape = tuple(int(d) for d in shape)
    if len(shape) != x.ndim:
        raise ValueError(f"resize: shape {shape} has {len(shape)} dims but the image has {x.ndim}")
    if method not in _METHODS:
        raise ValueError(f"resize: method must be one of {sorted(_METHODS)}, got {method!r}")
    if any(d <= 0 for d in shape):
        raise ValueError(f"resize: every size must be positive, got {shape}")
    for axis, (n_in, n_out) in enumerate(zip(x.shape, shape)):
        if n_in == n_out:
            continue
        w = _tnp.asarray(_weights(n_in, n_out, _METHODS[method], antialias), dtype=x.dtype)
        moved = _tnp.swapaxes(x, axis, -1)  # [..., in]
        x = _tnp.swapaxes(moved @ _tnp.transpose(w), axis, -1)
    return x
