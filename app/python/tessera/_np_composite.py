"""tessera.numpy's functions written with the others (no op of their own): stacking helpers, diagonals, the
NaN-ignoring reductions, more elementwise math, and numpy's dtype and shape queries; each as jax.numpy's."""

import builtins as _builtins

import numpy as _np

from . import _tessera as _C
from ._np_base import Array, float32, _canonical_axis, _FLOATING
from ._np_creation import asarray, eye, full, zeros
from ._np_elementwise import (abs, equal, exp, isnan, less, less_equal, log, log1p, logaddexp, logical_not,
                              maximum, minimum, sign, sqrt, _inexact, _promoted)
from ._np_indexing import where as where_value
from ._np_layout import broadcast_to, concatenate, expand_dims, flip, moveaxis, reshape, swapaxes
from ._np_reductions import any, argmax, argmin, max, mean, min, prod, sum, var

# ---- numpy's queries ------------------------------------------------------------------------------------

iinfo = _np.iinfo
finfo = _np.finfo
issubdtype = _np.issubdtype


def shape(a):
    return tuple(a.shape) if isinstance(a, Array) else _np.shape(a)


def ndim(a):
    return a.ndim if isinstance(a, Array) else _np.ndim(a)


def size(a, axis=None):
    s = shape(a)
    return int(_np.prod(s)) if axis is None else s[axis]


def isscalar(a):
    return (isinstance(a, Array) and a.ndim == 0) or _np.isscalar(a)


def broadcast_shapes(*shapes):
    return _np.broadcast_shapes(*shapes)


def broadcast_arrays(*arrays):
    arrays = [asarray(a) for a in arrays]
    s = broadcast_shapes(*[tuple(a.shape) for a in arrays])
    return [broadcast_to(a, s) for a in arrays]


def array_equal(a1, a2, equal_nan=False):
    a1, a2 = asarray(a1), asarray(a2)
    if tuple(a1.shape) != tuple(a2.shape):
        return asarray(False)
    eq = equal(a1, a2)
    if equal_nan:
        eq = _C.bitwise_or(eq, _C.bitwise_and(isnan(a1), isnan(a2)))
    return _C.all(eq, [], False) if a1.ndim else eq


# ---- creation and stacking ------------------------------------------------------------------------------


def empty(shape, dtype=float32):
    """zeros, as jax.numpy's (no uninitialised memory)."""
    return zeros(shape, dtype)


def empty_like(a, dtype=None):
    a = asarray(a)
    return zeros(a.shape, a.dtype if dtype is None else dtype)


def identity(n, dtype=float32):
    return eye(n, dtype=dtype)


def atleast_1d(*arys):
    out = [reshape(asarray(a), (1,)) if asarray(a).ndim == 0 else asarray(a) for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys):
    out = []
    for a in arys:
        a = asarray(a)
        out.append(reshape(a, (1, 1)) if a.ndim == 0 else expand_dims(a, 0) if a.ndim == 1 else a)
    return out[0] if len(out) == 1 else out


def atleast_3d(*arys):
    """numpy's: (N,) becomes (1, N, 1), (M, N) becomes (M, N, 1)."""
    out = []
    for a in arys:
        a = asarray(a)
        if a.ndim == 0:
            a = reshape(a, (1, 1, 1))
        elif a.ndim == 1:
            a = reshape(a, (1, a.shape[0], 1))
        elif a.ndim == 2:
            a = expand_dims(a, 2)
        out.append(a)
    return out[0] if len(out) == 1 else out


def hstack(tup):
    arrays = [atleast_1d(a) for a in tup]
    return concatenate(arrays, axis=0 if arrays[0].ndim == 1 else 1)


def vstack(tup):
    return concatenate([atleast_2d(a) for a in tup], axis=0)


row_stack = vstack


def dstack(tup):
    return concatenate([atleast_3d(a) for a in tup], axis=2)


def column_stack(tup):
    arrays = [asarray(a) for a in tup]
    return concatenate([reshape(a, (-1, 1)) if a.ndim < 2 else a for a in arrays], axis=1)


def append(arr, values, axis=None):
    if axis is None:
        return concatenate([reshape(asarray(arr), (-1,)), reshape(asarray(values), (-1,))])
    return concatenate([arr, values], axis=axis)


def fliplr(m):
    return flip(m, 1)


def flipud(m):
    return flip(m, 0)


def rot90(m, k=1, axes=(0, 1)):
    """Counter-clockwise by 90 degrees k times, in the plane of axes (numpy's)."""
    m = asarray(m)
    k %= 4
    if k == 0:
        return m
    if k == 2:
        return flip(flip(m, axes[0]), axes[1])
    if k == 1:
        return swapaxes(flip(m, axes[1]), axes[0], axes[1])
    return flip(swapaxes(m, axes[0], axes[1]), axes[1])


def meshgrid(*xi, indexing="xy", sparse=False, copy=True):
    xs = [reshape(asarray(x), (-1,)) for x in xi]
    n = len(xs)
    shape = [x.shape[0] for x in xs]
    if indexing == "xy" and n > 1:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, x in enumerate(xs):
        axis = i
        if indexing == "xy" and n > 1 and i < 2:
            axis = 1 - i
        s = [1] * n
        s[axis] = x.shape[0]
        x = reshape(x, s)
        out.append(x if sparse else broadcast_to(x, shape))
    return out


def diag(v, k=0):
    """The k-th diagonal of a matrix, or the matrix with a vector on its k-th diagonal."""
    v = asarray(v)
    if v.ndim == 1:
        n = v.shape[0] + _builtins.abs(k)
        rows, cols = _np.indices((n, n))
        on = asarray((cols - rows) == k)
        source = _np.clip(rows if k >= 0 else cols, 0, _builtins.max(v.shape[0] - 1, 0)).astype(_np.int32)
        if v.shape[0] == 0:
            return zeros((n, n), v.dtype)
        return where_value(on, _C.take(v, asarray(source), 0), _C.scalar(0, v))
    if v.ndim != 2:
        raise ValueError("diag: the input must be 1-d or 2-d")
    return diagonal(v, k)


def diagonal(a, offset=0, axis1=0, axis2=1):
    """The diagonal over axis1 and axis2, as the last axis of the result."""
    a = asarray(a)
    axis1, axis2 = _canonical_axis(axis1, a.ndim, "diagonal"), _canonical_axis(axis2, a.ndim, "diagonal")
    a = moveaxis(a, (axis1, axis2), (-2, -1))
    n, m = a.shape[-2], a.shape[-1]
    length = _builtins.max(0, _builtins.min(n, m - offset) if offset >= 0 else _builtins.min(n + offset, m))
    rows = _np.arange(length) + _builtins.max(-offset, 0)
    cols = _np.arange(length) + _builtins.max(offset, 0)
    flat = reshape(a, tuple(a.shape[:-2]) + (n * m,))
    return _C.take(flat, asarray((rows * m + cols).astype(_np.int32)), flat.ndim - 1)


def trace(a, offset=0, axis1=0, axis2=1, dtype=None):
    return sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


def diff(a, n=1, axis=-1, prepend=None, append=None):
    a = asarray(a)
    axis = _canonical_axis(axis, a.ndim, "diff")
    parts = [p for p in (prepend, a, append) if p is not None]
    if len(parts) > 1:
        shaped = []
        for p in parts:
            p = asarray(p)
            if p.ndim == 0:
                s = list(a.shape)
                s[axis] = 1
                p = broadcast_to(p, s)
            shaped.append(p)
        a = concatenate(shaped, axis)
    for _ in range(n):
        length = a.shape[axis]
        hi = _C.slice(a, [1 if i == axis else 0 for i in range(a.ndim)], list(a.shape), [1] * a.ndim)
        lo_limit = list(a.shape)
        lo_limit[axis] = _builtins.max(length - 1, 0)
        lo = _C.slice(a, [0] * a.ndim, lo_limit, [1] * a.ndim)
        a = _C.not_equal(hi, lo) if a._dtype_name == "bool" else hi - lo
    return a


def tri_indices(n, k, m, lower):
    rows, cols = (_np.tril_indices if lower else _np.triu_indices)(n, k, m)
    return asarray(rows.astype(_np.int32)), asarray(cols.astype(_np.int32))


def tril_indices(n, k=0, m=None):
    return tri_indices(n, k, m, True)


def triu_indices(n, k=0, m=None):
    return tri_indices(n, k, m, False)


# ---- elementwise --------------------------------------------------------------------------------------


def sinh(x):
    x = _inexact(x)
    return (exp(x) - exp(-x)) / 2.0


def cosh(x):
    x = _inexact(x)
    return (exp(x) + exp(-x)) / 2.0


def arcsinh(x):
    x = _inexact(x)
    a = abs(x)
    # log1p(a + a^2 / (1 + sqrt(1 + a^2))) is exact near 0; past 1e8, where a^2 + 1 is a^2, log(2a).
    big = _C.greater(a, 1e8)
    small = where_value(big, 0.0, a)
    r = where_value(big, log(a) + _np.log(2.0), log1p(small + small * small / (1.0 + sqrt(1.0 + small * small))))
    return where_value(_C.less(x, 0.0), -r, r)


def arccosh(x):
    x = _inexact(x)
    big = _C.greater(x, 1e8)  # x^2 - 1 is x^2 there (and would overflow): log(2x)
    small = where_value(big, 1.0, x)
    return where_value(big, log(x) + _np.log(2.0), log(small + sqrt(small * small - 1.0)))


def arctanh(x):
    x = _inexact(x)
    return 0.5 * (log1p(x) - log1p(-x))


def cbrt(x):
    x = _inexact(x)
    return sign(x) * _C.power(abs(x), 1.0 / 3.0)


def trunc(x):
    x = asarray(x)
    if x._dtype_name not in _FLOATING:
        return x
    return where_value(less(x, 0.0), _C.ceil(x), _C.floor(x))


def rint(x):
    from ._np_elementwise import round
    return round(_inexact(x))


def signbit(x):
    """True where the sign bit is set (-0.0 and NaNs with the bit included, as numpy): the bits read as an
    integer of the same width are negative. bf16 and f16 widen to f32 first, which keeps the sign."""
    x = asarray(x)
    if x._dtype_name not in _FLOATING:
        return less(x, 0)
    if x._dtype_name == "f64":
        return less(_C.bitcast(x, "i64"), 0)
    return less(_C.bitcast(_C.astype(x, "f32") if x._dtype_name != "f32" else x, "i32"), 0)


def copysign(x1, x2):
    x1 = _inexact(x1)
    return where_value(signbit(x2), -abs(x1), abs(x1))


def fmax(x1, x2):
    """The maximum ignoring NaNs (a NaN only where both are)."""
    x1, x2 = asarray(x1), asarray(x2)
    return where_value(isnan(x1), x2, where_value(isnan(x2), x1, maximum(x1, x2)))


def fmin(x1, x2):
    x1, x2 = asarray(x1), asarray(x2)
    return where_value(isnan(x1), x2, where_value(isnan(x2), x1, minimum(x1, x2)))


def fmod(x1, x2):
    """The remainder with the dividend's sign (C's fmod)."""
    x1, x2 = _promoted(asarray(x1), asarray(x2))
    if x1._dtype_name not in _FLOATING:
        x2 = where_value(equal(x2, 0), _C.scalar(1, x2), x2)
    return _C.rem(x1, x2)


def hypot(x1, x2):
    x1, x2 = abs(_inexact(x1)), abs(_inexact(x2))
    hi, lo = maximum(x1, x2), minimum(x1, x2)
    safe = where_value(equal(hi, 0.0), 1.0, hi)
    r = hi * sqrt(1.0 + (lo / safe) * (lo / safe))
    r = where_value(equal(hi, 0.0), 0.0, r)
    return where_value(_C.bitwise_or(equal(x1, _np.inf), equal(x2, _np.inf)), _np.inf, r)  # inf even with a NaN


def logaddexp2(x1, x2):
    ln2 = _np.log(2.0)
    return logaddexp(_inexact(x1) * ln2, _inexact(x2) * ln2) / ln2


def deg2rad(x):
    return _inexact(x) * (_np.pi / 180.0)


def rad2deg(x):
    return _inexact(x) * (180.0 / _np.pi)


radians, degrees = deg2rad, rad2deg


def sinc(x):
    """sin(pi x) / (pi x), 1 at 0."""
    x = _inexact(x)
    zero = equal(x, 0.0)
    px = _np.pi * where_value(zero, 1.0, x)
    return where_value(zero, 1.0, _C.sin(px) / px)


def float_power(x1, x2):
    return _C.power(_inexact(x1), _inexact(x2))


def invert(x):
    """Bitwise not; logical not for bools."""
    return _C.logical_not(asarray(x))


bitwise_not = invert
bitwise_invert = invert


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    x = asarray(x)
    if x._dtype_name not in _FLOATING:
        return x
    big = float(_np.finfo(_np.float32 if x._dtype_name in ("f32", "bf16") else
                          _np.float16 if x._dtype_name == "f16" else _np.float64).max)
    if x._dtype_name == "bf16":
        big = 3.3895313892515355e38
    x = where_value(isnan(x), nan, x)
    x = where_value(equal(x, _np.inf), big if posinf is None else posinf, x)
    return where_value(equal(x, -_np.inf), -big if neginf is None else neginf, x)


def heaviside(x1, x2):
    x1 = _inexact(x1)
    r = where_value(less(x1, 0.0), 0.0, where_value(equal(x1, 0.0), x2, 1.0))
    return where_value(isnan(x1), x1, r)


def isin(element, test_elements, invert=False):
    """Whether each element is in test_elements (a comparison against each of them)."""
    element, tests = asarray(element), reshape(asarray(test_elements), (-1,))
    found = any(equal(expand_dims(element, -1), tests), axis=-1)
    return logical_not(found) if invert else found


def select(condlist, choicelist, default=0):
    """The choice of the first true condition, default where none is."""
    if len(condlist) != len(choicelist):
        raise ValueError("select: condlist and choicelist must have the same length")
    out = default
    for cond, choice in reversed(list(zip(condlist, choicelist))):
        out = where_value(cond, choice, out)
    return asarray(out)


# ---- reductions ---------------------------------------------------------------------------------------


def count_nonzero(a, axis=None, keepdims=False):
    a = asarray(a)
    nz = a if a._dtype_name == "bool" else _C.not_equal(a, 0)
    return sum(nz, axis=axis, keepdims=keepdims)


def average(a, axis=None, weights=None, returned=False, keepdims=False):
    a = _inexact(a)
    if weights is None:
        avg = mean(a, axis, keepdims=keepdims)
        scl = full(avg.shape, float(a.size // _builtins.max(avg.size, 1)), avg.dtype)
    else:
        w = _inexact(weights)
        if w.ndim == 1 and a.ndim > 1:
            if axis is None:
                raise ValueError("average: 1-d weights for an n-d array need an axis")
            s = [1] * a.ndim
            s[_canonical_axis(axis, a.ndim, "average")] = w.shape[0]
            w = reshape(w, s)
        scl = sum(broadcast_to(w, a.shape), axis, keepdims=keepdims)
        avg = sum(a * w, axis, keepdims=keepdims) / scl
    return (avg, scl) if returned else avg


def _nan_masked(a, fill):
    a = asarray(a)
    return where_value(isnan(a), fill, a) if a._dtype_name in _FLOATING else a


def nansum(a, axis=None, dtype=None, keepdims=False):
    return sum(_nan_masked(a, 0.0), axis, dtype, keepdims=keepdims)


def nanprod(a, axis=None, dtype=None, keepdims=False):
    return prod(_nan_masked(a, 1.0), axis, dtype, keepdims=keepdims)


def _nan_extreme(reduce, identity, a, axis, keepdims):
    """reduce (max or min) ignoring NaNs (each taken as identity); NaN where a slice is all NaN."""
    a = asarray(a)
    r = reduce(_nan_masked(a, identity), axis, keepdims=keepdims)
    if a._dtype_name not in _FLOATING:
        return r
    all_nan = _C.logical_not(any(logical_not(isnan(a)), axis=axis, keepdims=keepdims))
    return where_value(all_nan, _np.nan, r)


def nanmax(a, axis=None, keepdims=False):
    """The maximum ignoring NaNs; NaN where a slice is all NaN."""
    return _nan_extreme(max, -_np.inf, a, axis, keepdims)


def nanmin(a, axis=None, keepdims=False):
    """The minimum ignoring NaNs; NaN where a slice is all NaN."""
    return _nan_extreme(min, _np.inf, a, axis, keepdims)


def nanmean(a, axis=None, keepdims=False):
    a = _inexact(a)
    return mean(a, axis, keepdims=keepdims, where=logical_not(isnan(a)))


def nanvar(a, axis=None, ddof=0, keepdims=False):
    a = _inexact(a)
    return var(a, axis, ddof=ddof, keepdims=keepdims, where=logical_not(isnan(a)))


def nanstd(a, axis=None, ddof=0, keepdims=False):
    return sqrt(nanvar(a, axis, ddof, keepdims))


def _nan_arg(arg, fill, a, axis, keepdims):
    """argmax/argmin ignoring NaNs; -1 where a slice is all NaN (jax.numpy's)."""
    a = asarray(a)
    r = arg(_nan_masked(a, fill), axis, keepdims=keepdims)
    if a._dtype_name not in _FLOATING:
        return r
    all_nan = _C.logical_not(any(logical_not(isnan(a)), axis=axis, keepdims=keepdims))
    return where_value(all_nan, _C.scalar(-1, r), r)


def nanargmax(a, axis=None, keepdims=False):
    return _nan_arg(argmax, -_np.inf, a, axis, keepdims)


def nanargmin(a, axis=None, keepdims=False):
    return _nan_arg(argmin, _np.inf, a, axis, keepdims)


def _cumulative(name, scan, identity, x, axis, dtype, include_initial):
    """The Array API's cumulative_sum/cumulative_prod: axis required beyond 1-d; include_initial puts the
    operation's identity first."""
    x = asarray(x)
    if axis is None:
        if x.ndim > 1:
            raise ValueError(f"{name}: axis is required for arrays of more than one dimension")
        axis = 0
    r = scan(x, axis, dtype)
    if include_initial:
        s = list(r.shape)
        s[_canonical_axis(axis, r.ndim, name)] = 1
        r = concatenate([full(s, identity, r._dtype_name), r], axis)
    return r


def cumulative_sum(x, axis=None, dtype=None, include_initial=False):
    from ._np_reductions import cumsum
    return _cumulative("cumulative_sum", cumsum, 0, x, axis, dtype, include_initial)


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    from ._np_reductions import cumprod
    return _cumulative("cumulative_prod", cumprod, 1, x, axis, dtype, include_initial)


_SEARCH_METHODS = (None, "scan", "scan_unrolled", "sort", "compare_all")


def searchsorted(a, v, side="left", sorter=None, *, method=None):
    """Insertion points (int32) of v into the sorted 1-d a: how many elements are < v (side="left") or <= v. NaN
    is larger than every number, as in numpy's and JAX's sort order. method: 'compare_all' compares every pair
    (a.size * v.size booleans); 'sort' ranks a and v together with one stable argsort (linear memory; 'scan'
    and 'scan_unrolled', JAX's binary searches, give the same values and run it too); None takes 'compare_all'
    up to 2**20 pairs, else 'sort'."""
    a, v = asarray(a), asarray(v)
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', not {side!r}")
    if method not in _SEARCH_METHODS:
        raise ValueError(f"invalid method={method!r} for searchsorted; expected one of {_SEARCH_METHODS[1:]}")
    if a.ndim != 1:
        raise ValueError("a should be 1-dimensional")
    if sorter is not None:
        a = _C.take(a, asarray(sorter), 0)
    if method is None:
        method = "compare_all" if a.size * v.size <= 1 << 20 else "sort"
    if method != "compare_all":
        return _searchsorted_by_rank(a, v, side)
    col = expand_dims(v, -1)
    below = (less if side == "left" else less_equal)(a, col)
    if a._dtype_name in _FLOATING or v._dtype_name in _FLOATING:
        nan_v = isnan(col)
        below = _C.bitwise_or(below, nan_v if side == "right" else _C.bitwise_and(nan_v, logical_not(isnan(a))))
    return sum(_C.astype(below, "i32"), axis=-1)


def _searchsorted_by_rank(a, v, side):
    """jax.numpy's 'sort' method: each query's rank among a and the queries (queries before equal elements of
    a for side="left", after them for "right"), less its rank among the queries alone."""
    a, v = _promoted(a, v)
    q = _C.reshape(v, [-1])

    def rank(x):  # rank[i]: where x[i] lands in the stable sort of x
        n = x.shape[0]
        return _C.scatter(_C.full([n], 0, "i32"), _C.argsort(x, 0), _C.iota([n], 0, "i32"), 0, 0)

    if side == "left":
        index = _C.slice(rank(_C.concatenate([q, a], 0)), [0], [q.size], [1])
    else:
        index = _C.slice(rank(_C.concatenate([a, q], 0)), [a.size], [a.size + q.size], [1])
    return _C.reshape(index - rank(q), list(v.shape))
