"""tessera.numpy's ranges, grids and windows written with the others, as jax.numpy's: logspace, geomspace,
indices, ix_, mgrid, ogrid, s_, index_exp, fromfunction; the *_indices_from helpers and mask_indices; the
window functions bartlett, blackman, hamming, hanning and kaiser, and the Bessel function i0 that kaiser needs."""

import builtins as _builtins
import math as _math
import operator as _operator

import numpy as _np

from . import _tessera as _C
from ._np_base import float32, int32, _engine_dtype
from ._np_creation import arange, asarray, linspace, ones
from ._np_elementwise import abs, cos, exp, greater, sqrt, _inexact
from ._np_layout import broadcast_to, reshape, stack
from ._np_indexing import nonzero, where
from ._np_composite import tril_indices, triu_indices

s_ = _np.s_
index_exp = _np.index_exp


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    """base ** linspace(start, stop, num): num values spaced evenly on a log scale."""
    if axis != 0:
        raise NotImplementedError("logspace: only axis=0 (scalar start and stop)")
    out = _C.power(_C.full([num], float(base), "f32"), linspace(start, stop, num, endpoint))
    return out if dtype is None else _C.astype(out, _engine_dtype(dtype))


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """num values spaced evenly on a log scale from start to stop (a geometric progression); both of one sign,
    neither zero. The ends are start and stop exactly, as numpy's."""
    if axis != 0:
        raise NotImplementedError("geomspace: only axis=0 (scalar start and stop)")
    if start == 0 or stop == 0:
        raise ValueError("geomspace: geometric sequence cannot include zero")
    if (start < 0) != (stop < 0):
        raise ValueError("geomspace: start and stop must have one sign (the sequence would pass through zero)")
    s = -1.0 if start < 0 else 1.0
    out = s * _C.power(_C.full([num], 10.0, "f32"),
                       linspace(_math.log10(_builtins.abs(start)), _math.log10(_builtins.abs(stop)), num, endpoint))
    if num > 0:
        ends = _np.zeros(num, bool)
        ends[0] = True
        fixed = _np.zeros(num, _np.float32)
        fixed[0] = start
        if endpoint and num > 1:
            ends[-1] = True
            fixed[-1] = stop
        out = where(asarray(ends), asarray(fixed), out)
    return out if dtype is None else _C.astype(out, _engine_dtype(dtype))


def indices(dimensions, dtype=int32, sparse=False):
    """An array of the index along each dim of a grid of shape dimensions (stacked: [len(dims), *dims]), or with
    sparse=True a tuple of arrays of shape (1, .., n_i, .., 1)."""
    dims = tuple(_operator.index(d) for d in dimensions)
    dt = _engine_dtype(dtype)
    parts = []
    for i, n in enumerate(dims):
        shape = [1] * len(dims)
        shape[i] = n
        parts.append(_C.iota(shape, i, dt) if n else _C.full(shape, 0, dt))
    if sparse:
        return tuple(parts)
    if not dims:
        return _C.full([0], 0, dt)
    return stack([broadcast_to(p, dims) for p in parts], 0)


def fromfunction(function, shape, *, dtype=float32, **kwargs):
    """function(*indices) over a grid of shape, each index array of dtype."""
    return function(*indices(shape, dtype), **kwargs)


def ix_(*args):
    """An open mesh from 1-d sequences (bools become the indices where they are True): the i-th of shape
    (1, .., n_i, .., 1), for indexing the cross product."""
    out = []
    for i, a in enumerate(args):
        a = asarray(a)
        if a.ndim != 1:
            raise ValueError(f"ix_: cross index must be 1 dimensional; argument {i} has shape {tuple(a.shape)}")
        if a._dtype_name == "bool":
            (a,) = nonzero(a)
        shape = [1] * len(args)
        shape[i] = a.shape[0]
        out.append(reshape(a, tuple(shape)))
    return tuple(out)


class _Grid:
    """mgrid (dense) and ogrid (open): grid[a:b:step, ...] like arange along each dim, or with a complex step
    (5j) like linspace with that many points, its end included."""

    def __init__(self, sparse):
        self._sparse = sparse

    @staticmethod
    def _axis(key):
        if not isinstance(key, slice):
            raise TypeError(f"mgrid/ogrid take slices (a:b:step), not {key!r}")
        start = 0 if key.start is None else key.start
        step = 1 if key.step is None else key.step
        if isinstance(step, complex):
            return linspace(start, key.stop, int(_builtins.abs(step.imag)), True)
        values = _np.arange(start, key.stop, step)
        floating = any(isinstance(v, float) for v in (start, key.stop, step))
        return asarray(values.astype(_np.float32 if floating else _np.int32))

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self._axis(key)
        axes = [self._axis(k) for k in key]
        if any(a._dtype_name == "f32" for a in axes):
            axes = [_C.astype(a, "f32") for a in axes]
        n = len(axes)
        shaped = []
        for i, a in enumerate(axes):
            shape = [1] * n
            shape[i] = a.shape[0]
            shaped.append(reshape(a, tuple(shape)))
        if self._sparse:
            return tuple(shaped)
        full = tuple(a.shape[0] for a in axes)
        return stack([broadcast_to(s, full) for s in shaped], 0)


mgrid = _Grid(sparse=False)
ogrid = _Grid(sparse=True)


def tril_indices_from(arr, k=0):
    """tril_indices for the last two dims of arr."""
    a = asarray(arr)
    if a.ndim != 2:
        raise ValueError(f"tril_indices_from: input array must be 2-d; got shape {tuple(a.shape)}")
    return tril_indices(a.shape[0], k, a.shape[1])


def triu_indices_from(arr, k=0):
    """triu_indices for the last two dims of arr."""
    a = asarray(arr)
    if a.ndim != 2:
        raise ValueError(f"triu_indices_from: input array must be 2-d; got shape {tuple(a.shape)}")
    return triu_indices(a.shape[0], k, a.shape[1])


def diag_indices_from(arr):
    """The indices of the main diagonal of arr, whose dims must all be equal."""
    a = asarray(arr)
    if a.ndim < 2 or len(set(a.shape)) != 1:
        raise ValueError(f"diag_indices_from: all dimensions of input must be of equal length; got {tuple(a.shape)}")
    i = arange(a.shape[0], dtype="int32")
    return (i,) * a.ndim


def mask_indices(n, mask_func, k=0, *, size=None):
    """The indices where mask_func(ones((n, n)), k) is nonzero (triu, tril, ...)."""
    return nonzero(mask_func(ones((n, n), dtype="int32"), k), size=size)


# ---- windows --------------------------------------------------------------------------------------------

def _window_positions(M, name):
    M = _operator.index(M)
    if M < 0:
        raise ValueError(f"{name}: M must be non-negative; got {M}")
    return M, _C.iota([M], 0, "f32")


def _cosine_window(M, name, coefficients):
    """sum_j c_j cos(2 pi j n / (M - 1)) with alternating signs, n = 0 .. M-1 (1 for M = 1)."""
    M, n = _window_positions(M, name)
    if M <= 1:
        return _C.full([M], 1.0, "f32")
    out = _C.full([M], coefficients[0], "f32")
    for j, c in enumerate(coefficients[1:], start=1):
        out = out + ((-1) ** j) * c * cos(n * (2.0 * _math.pi * j / (M - 1)))
    return out


def hanning(M):
    """The Hann window: 0.5 - 0.5 cos(2 pi n / (M - 1))."""
    return _cosine_window(M, "hanning", (0.5, 0.5))


def hamming(M):
    """The Hamming window: 0.54 - 0.46 cos(2 pi n / (M - 1))."""
    return _cosine_window(M, "hamming", (0.54, 0.46))


def blackman(M):
    """The Blackman window: 0.42 - 0.5 cos(2 pi n / (M - 1)) + 0.08 cos(4 pi n / (M - 1))."""
    return _cosine_window(M, "blackman", (0.42, 0.5, 0.08))


def bartlett(M):
    """The Bartlett (triangular) window: 1 - |2 n / (M - 1) - 1|."""
    M, n = _window_positions(M, "bartlett")
    if M <= 1:
        return _C.full([M], 1.0, "f32")
    return 1.0 - abs(n * (2.0 / (M - 1)) - 1.0)


def kaiser(M, beta):
    """The Kaiser window: i0(beta sqrt(1 - (2 n / (M - 1) - 1)^2)) / i0(beta)."""
    M, n = _window_positions(M, "kaiser")
    if M <= 1:
        return _C.full([M], 1.0, "f32")
    beta = _inexact(beta)
    r = n * (2.0 / (M - 1)) - 1.0
    return i0(beta * sqrt(_C.maximum(1.0 - r * r, _C.scalar(0.0, r)))) / i0(beta)


# The power series of I0 converges for every x, but in float32 its terms cancel nothing (all positive) and it
# needs about x/2 + 10 terms; past x = 15 the asymptotic series (six terms, relative error about 5e-8 there)
# is used instead.
_I0_SERIES_TERMS = 40
_I0_SWITCH = 15.0
_I0_ASYMPTOTIC = (1.0, 1.0 / 8, 9.0 / 128, 225.0 / 3072, 11025.0 / 98304, 893025.0 / 3932160)


def _series_and_tail(small, big, terms, ratio, coefficients):
    """The two halves of a Bessel function: sum_k t_k with t_0 = 1 and t_k = t_{k-1} (small^2 / 4) / ratio(k),
    and the asymptotic factor sum_j c_j big^-j / sqrt(2 pi big) (the polynomial by Horner's rule), elementwise.
    sqrt(2 pi big) is taken as sqrt(big) sqrt(2 pi): 2 pi big overflows past a sixth of the dtype's largest
    value (5.4e37 in float32), where the factor is still about 2e-20."""
    q = small * small * 0.25
    term = _C.full(list(small.shape), 1.0, small._dtype_name)
    total = term
    for k in range(1, terms):
        term = term * q / float(ratio(k))
        total = total + term
    inv = 1.0 / big
    poly = _C.full(list(big.shape), coefficients[-1], big._dtype_name)
    for c in reversed(coefficients[:-1]):
        poly = poly * inv + c
    return total, poly / (sqrt(big) * _math.sqrt(2.0 * _math.pi))


def _in_float32(fn, x):
    """fn(x) computed in float32 for a float16 or bfloat16 x and cast back, as JAX computes these functions: the
    power series' terms pass float16's largest value (65504) near |x| = 12, before exp(-|x|) scales them down,
    and bfloat16 would keep 8 bits of a 40-term sum."""
    x = _inexact(x)
    if x._dtype_name in ("f16", "bf16"):
        return _C.astype(fn(_C.astype(x, "f32")), x._dtype_name)
    return fn(x)


def _i0_parts(x):
    """(|x|, the power series at min(|x|, 15), the asymptotic factor at max(|x|, 15) without its e^x)."""
    x = abs(x)
    small = _C.minimum(x, _C.scalar(_I0_SWITCH, x))
    big = _C.maximum(x, _C.scalar(_I0_SWITCH, x))
    total, scaled = _series_and_tail(small, big, _I0_SERIES_TERMS, lambda k: k * k, _I0_ASYMPTOTIC)
    return x, total, big, scaled


def _i0(x):
    x, series, big, scaled = _i0_parts(x)
    return where(greater(x, _I0_SWITCH), exp(big) * scaled, series)


def i0(x):
    """The modified Bessel function of the first kind of order 0, elementwise (float): its power series
    sum_k ((x/2)^k / k!)^2 below |x| = 15, its asymptotic expansion e^x / sqrt(2 pi x) (1 + 1/(8x) + ...) above."""
    return _in_float32(_i0, x)


def _i0e(x):
    x, series, _, scaled = _i0_parts(x)
    return where(greater(x, _I0_SWITCH), scaled, series * exp(-x))


def _i0_scaled(x):
    """exp(-|x|) i0(x), finite where i0 overflows (lax.bessel_i0e)."""
    return _in_float32(_i0e, x)
