"""tessera.numpy's order statistics and binning, as jax.numpy writes them: median, quantile, percentile and their
NaN-ignoring forms (on a sort, so differentiable through it), histogram, histogram_bin_edges, bincount, digitize
and interp (on searchsorted's counts and a scatter_add), all computed by engine ops."""

import builtins as _builtins
import operator as _operator

import numpy as _np

from . import _tessera as _C
from ._np_base import Array, _canonical_axis, _engine_dtype, _FLOATING, _axis_list
from ._np_creation import asarray
from ._np_elementwise import isnan, promote_types, remainder, _inexact
from ._np_layout import concatenate, flip, moveaxis, ravel
from ._np_reductions import any, max, min, sum
from ._np_composite import diff, searchsorted

_METHODS = ("linear", "lower", "higher", "midpoint", "nearest", "inverted_cdf")


# ---- quantiles --------------------------------------------------------------------------------------------


def _reduced_last(a, axis, keepdims):
    """a with the reduced axes flattened into its last one, and the shape the result's non-q dims take:
    (a', kept_shape)."""
    if axis is None:
        return ravel(a), [1] * a.ndim if keepdims else []
    axes = [_canonical_axis(i, a.ndim, "quantile") for i in _axis_list(axis)]
    if len(set(axes)) != len(axes):
        raise ValueError("repeated axis")
    kept = [d for d in range(a.ndim) if d not in axes]
    shape = [1 if d in axes else s for d, s in enumerate(a.shape)] if keepdims else [a.shape[d] for d in kept]
    moved = _C.transpose(a, kept + axes)
    return _C.reshape(moved, [a.shape[d] for d in kept] + [int(_np.prod([a.shape[d] for d in axes]))]), shape


def _weights_like(weights, a, axis):
    """The weights broadcast to a's shape: of a's shape, or (with axis) of the reduced axes' shape."""
    w = _inexact(weights)
    if tuple(w.shape) == tuple(a.shape):
        return w
    if axis is None:
        raise ValueError("Weights shape must match 'a' shape when axis is None.")
    axes = [_canonical_axis(i, a.ndim, "quantile") for i in _axis_list(axis)]
    if tuple(w.shape) != tuple(a.shape[d] for d in axes):
        raise ValueError(f"Weights shape {tuple(w.shape)} must match reduction axes "
                         f"{tuple(a.shape[d] for d in axes)}")
    expanded = [a.shape[d] if d in axes else 1 for d in range(a.ndim)]
    order = sorted(range(len(axes)), key=lambda k: axes[k])
    w = _C.transpose(w, order) if w.ndim > 1 else w
    return _C.broadcast_to(_C.reshape(w, expanded), list(a.shape))


def _quantile(a, q, axis, method, keepdims, squash_nans, weights, name):
    """jax.numpy's _quantile with the reduced axes last: sort each row, read the two order statistics around
    q * (n - 1) with take_along_axis and combine them as `method` says. q: a scalar or 1-d; the result's dims
    are q's, then a's kept ones. An empty reduced slice (n = 0) has no order statistics: ValueError naming
    the function `name` and a's shape (numpy's quantile raises IndexError there and JAX a gather's error;
    numpy's median and nanquantile return NaN with a warning)."""
    if method not in _METHODS:
        raise ValueError("method can only be 'linear', 'lower', 'higher', 'midpoint', 'nearest' or 'inverted_cdf'")
    a = _inexact(a)
    if weights is not None:
        if method != "inverted_cdf":
            raise NotImplementedError(f"{method} doesn't support weights. Only method 'inverted_cdf' supports "
                                      "weights.")
        w = _weights_like(weights, a, axis)
        dt = _engine_dtype(promote_types(a.dtype, w.dtype))
        a, w = _C.astype(a, dt), _C.astype(w, dt)
        w, _ = _reduced_last(w, axis, keepdims)
    q = asarray(q)
    if q.ndim > 1:
        raise ValueError(f"q must be have rank <= 1, got shape {tuple(q.shape)}")
    q = _C.astype(q, "f64" if q._dtype_name == "f64" else "f32")
    x, kept_shape = _reduced_last(a, axis, keepdims)
    n = x.shape[-1]
    if n == 0:
        raise ValueError(f"{name}: cannot take a quantile over an empty slice (a of shape {tuple(a.shape)}, "
                         f"axis={axis} reduces over 0 elements)")
    if squash_nans:
        x = _C.where(isnan(x), _np.nan, x)  # one NaN, sorted last
    else:
        x = _C.where(any(isnan(x), axis=-1, keepdims=True), _np.nan, x)
    if weights is not None:
        x, w = _C.sort([x, w], -1, True, 1)
    else:
        x = _C.sort([x], -1, True, 1)[0]
    # x: [rows..., n] sorted; qs: [rows..., nq] (q as a trailing dim).
    rows = list(x.shape[:-1])
    qs = _C.broadcast_to(q, rows + [q.size]) if q.ndim else _C.broadcast_to(_C.reshape(q, [1]), rows + [1])
    if method == "inverted_cdf":
        r = _inverted_cdf(x, w if weights is not None else None, q, qs, squash_nans)
    else:
        count = (_C.astype(sum(_C.logical_not(isnan(x)), axis=-1, keepdims=True), q._dtype_name)
                 if squash_nans else float(n))
        pos = qs * (count - 1)
        low, high = _C.floor(pos), _C.ceil(pos)
        high_weight = pos - low
        low_weight = 1 - high_weight
        low = _C.astype(_C.maximum(_C.minimum(low, count - 1), 0), "i32")
        high = _C.astype(_C.maximum(_C.minimum(high, count - 1), 0), "i32")
        low_value = _C.take_along_axis(x, low, -1)
        high_value = _C.take_along_axis(x, high, -1)
        if method == "linear":
            r = (_C.astype(low_value, q._dtype_name) * low_weight
                 + _C.astype(high_value, q._dtype_name) * high_weight)
        elif method == "lower":
            r = low_value
        elif method == "higher":
            r = high_value
        elif method == "nearest":
            r = _C.where(_C.less_equal(high_weight, 0.5), low_value, high_value)
        else:
            r = (low_value + high_value) * 0.5
    # r: [rows..., nq] -> q's dims first, then the kept shape.
    r = moveaxis(r, -1, 0) if q.ndim else _C.reshape(r, rows)
    return _C.astype(_C.reshape(r, list(q.shape) + kept_shape), x._dtype_name)


def _inverted_cdf(x, w, q, qs, squash_nans):
    """The first sorted element whose cumulative weight reaches q times the total (numpy's inverted_cdf). NaN
    where a weight is negative or NaN, and where the row has a NaN (squash_nans: is all NaN)."""
    nan_data = isnan(x)
    w = _C.full(list(x.shape), 1.0, x._dtype_name) if w is None else w
    bad = _C.bitwise_or(_C.less(w, 0), isnan(w))
    clean = _C.where(_C.bitwise_or(bad, nan_data), 0.0, w)
    cum = _C.cumsum(clean, -1, False)
    total = _C.slice(cum, [0] * (cum.ndim - 1) + [cum.shape[-1] - 1], list(cum.shape), [1] * cum.ndim)
    target = _C.astype(qs, x._dtype_name) * total  # [rows..., nq]
    # idx: how many cumulative weights lie below each target, [rows..., nq].
    idx = sum(_C.astype(_C.less(_C.expand_dims(cum, -2), _C.expand_dims(target, -1)), "i32"), axis=-1)
    valid = (sum(_C.astype(_C.logical_not(nan_data), "i32"), axis=-1, keepdims=True) if squash_nans
             else x.shape[-1])
    idx = _C.maximum(_C.minimum(idx, valid - 1), 0)
    r = _C.take_along_axis(x, idx, -1)
    if squash_nans:
        force = _C.bitwise_or(any(bad, axis=-1, keepdims=True), _C.equal(valid, 0))
    else:
        force = _C.bitwise_or(any(bad, axis=-1, keepdims=True), any(nan_data, axis=-1, keepdims=True))
    return _C.where(force, _np.nan, r)


def _check_unsupported(out, overwrite_input, name):
    if overwrite_input or out is not None:
        raise ValueError(f"jax.numpy.{name} does not support overwrite_input=True or out != None")


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *, weights=None):
    """The q-th quantiles (q in [0, 1], a scalar or 1-d) over axis (None: all; an int or a tuple), the result's
    dims being q's then a's kept ones. method: 'linear' (default), 'lower', 'higher', 'midpoint', 'nearest'
    (the lower one at exactly half, as jax.numpy), 'inverted_cdf' (which alone takes weights=). A NaN in a
    slice makes its quantiles NaN. Integers give float32. An empty reduced axis raises ValueError (as numpy's
    quantile raises; no quantile exists to give)."""
    _check_unsupported(out, overwrite_input, "quantile")
    return _quantile(a, q, axis, method, keepdims, False, weights, "quantile")


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
                weights=None):
    """quantile with the NaNs left out; NaN where a slice is all NaN. An empty reduced axis raises ValueError
    (numpy returns NaN with a warning: a slice of no elements is an error here, as in JAX)."""
    _check_unsupported(out, overwrite_input, "nanquantile")
    return _quantile(a, q, axis, method, keepdims, True, weights, "nanquantile")


def _percent(q):
    return _inexact(q) / 100


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
               weights=None):
    """quantile at q / 100."""
    _check_unsupported(out, overwrite_input, "percentile")
    return _quantile(a, _percent(q), axis, method, keepdims, False, weights, "percentile")


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
                  weights=None):
    """nanquantile at q / 100."""
    _check_unsupported(out, overwrite_input, "nanpercentile")
    return _quantile(a, _percent(q), axis, method, keepdims, True, weights, "nanpercentile")


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """quantile(a, 0.5, method='midpoint'), as jax.numpy: the mean of the two middle elements (the gradient
    goes half to each, all to the one middle element of an odd count). An empty reduced axis raises ValueError
    (numpy returns NaN with a warning, JAX fails in its gather)."""
    _check_unsupported(out, overwrite_input, "median")
    return _quantile(a, 0.5, axis, "midpoint", keepdims, False, None, "median")


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """median with the NaNs left out (nanquantile at 0.5, 'midpoint')."""
    _check_unsupported(out, overwrite_input, "nanmedian")
    return _quantile(a, 0.5, axis, "midpoint", keepdims, True, None, "nanmedian")


# ---- binning ----------------------------------------------------------------------------------------------


def _ndim(v):
    return v.ndim if isinstance(v, Array) else _np.ndim(v)


def _at(v, i):
    """v[i] of a 1-d array, 0-d."""
    i %= v.shape[0]
    return _C.reshape(_C.slice(v, [i], [i + 1], [1]), [])


def _jax_linspace(start, stop, num, dt):
    """num points from start to stop (0-d arrays of dtype dt), written as jax.numpy's linspace (start (1 - t) +
    stop t, the last point stop itself), so that edges match JAX's bit for bit."""
    if num == 1:
        return _C.reshape(start, [1])
    t = _C.astype(_C.iota([num - 1], 0, "f32") / float(num - 1), dt)
    body = _C.reshape(start, [1]) * (1 - t) + _C.reshape(stop, [1]) * t
    return _C.concatenate([body, _C.reshape(stop, [1])], 0)


def histogram_bin_edges(a, bins=10, range=None, weights=None):
    """bins a 1-d array: the edges as given (a's floating dtype); an int: bins + 1 evenly spaced edges over
    range (default a's min and max; an empty range is widened by 0.5 on each side)."""
    if isinstance(bins, str):
        raise NotImplementedError("string values for `bins` not implemented.")
    a = _inexact(a)
    dt = a._dtype_name
    if _ndim(bins) == 1:
        return _C.astype(asarray(bins), dt)
    n_bins = _operator.index(bins)
    if range is None:
        lo, hi = min(a), max(a)
    else:
        bounds = [asarray(r) for r in range] if not isinstance(range, Array) else [range[0], range[1]]
        if len(bounds) != 2 or _builtins.any(b.ndim for b in bounds) or (isinstance(range, Array) and
                                                                        tuple(range.shape) != (2,)):
            raise ValueError(f"`range` must be either None or a sequence of scalars, got {range}")
        lo, hi = (_C.astype(b, dt) for b in bounds)
    empty = _C.equal(hi, lo)
    lo, hi = _C.where(empty, lo - 0.5, lo), _C.where(empty, hi + 0.5, hi)
    return _jax_linspace(lo, hi, n_bins + 1, dt)


def histogram(a, bins=10, range=None, weights=None, density=None):
    """(counts, bin_edges): the (weighted) count of a's elements in each bin, half-open [e_i, e_i+1) but the
    last closed; elements outside the edges are left out. Counts are floating, as jax.numpy's. density=True
    divides by the bin widths and the total."""
    if isinstance(bins, str):
        raise TypeError(f"histogram: bins must be an int or an array of edges, not the string {bins!r}")
    if weights is None:
        a = _inexact(a)
        w = _C.full(list(a.shape), 1.0, a._dtype_name)
    else:
        a, w = asarray(a), asarray(weights)
        if tuple(a.shape) != tuple(w.shape):
            raise ValueError("weights should have the same shape as a.")
        dt = _engine_dtype(promote_types(_inexact(a).dtype, _inexact(w).dtype))
        a, w = _C.astype(a, dt), _C.astype(w, dt)
    edges = histogram_bin_edges(a, bins, range, weights)
    n = edges.shape[0]
    index = _C.where(_C.equal(ravel(a), _at(edges, -1)), n - 1, searchsorted(edges, ravel(a), side="right"))
    counts = _C.scatter_add(_C.full([n], 0.0, w._dtype_name), index, ravel(w), 0, 0)
    counts = _C.slice(counts, [1], [n], [1])
    if density:
        counts = counts / diff(edges) / _C.sum(counts, [], False)
    return counts, edges


def bincount(x, weights=None, minlength=0, *, length=None):
    """The count (or the summed weights) of each value 0, 1, ... in the 1-d integer x: length entries (default
    max(minlength, x.max() + 1), which needs x's values: a traced x needs length=). Negative values count as 0;
    values >= length are left out."""
    x = asarray(x)
    if x._dtype_name == "bool":
        x = _C.astype(x, "i32")
    if x._dtype_name in _FLOATING:
        raise TypeError(f"x argument to bincount must have an integer type; got {x.dtype}")
    if x.ndim != 1:
        raise ValueError("only 1-dimensional input supported.")
    minlength = _operator.index(minlength)
    if length is None:
        if x.is_tracer:
            raise _C.ConcretizationError(
                f"bincount: the length of the result depends on the values of the traced x ({x._dtype_name}"
                f"{list(x.shape)}); pass a static length= argument")
        length = _builtins.max(minlength, x.size and int(max(_C.maximum(x, 0))) + 1)
    else:
        length = _operator.index(length)
    if weights is None:
        w = _C.full(list(x.shape), 1, "i32")
    else:
        w = asarray(weights)
        if tuple(w.shape) != tuple(x.shape):
            raise ValueError(f"type of weights must match type of x. Got x {x._dtype_name}{list(x.shape)} and "
                             f"weights {w._dtype_name}{list(w.shape)}")
    return _C.scatter_add(_C.full([length], 0, w._dtype_name), _C.maximum(x, 0), w, 0, 0)


def digitize(x, bins, right=False, *, method=None):
    """The index of the bin each x falls in (int32): bins 1-d, increasing or decreasing; right=True makes the
    bins closed on the right instead of the left. method: searchsorted's."""
    x, bins = asarray(x), asarray(bins)
    if bins.ndim != 1:
        raise ValueError(f"digitize: bins must be a 1-dimensional array; got bins={bins}")
    n = bins.shape[0]
    if n == 0:
        return _C.full(list(x.shape), 0, "i32")
    side = "left" if right else "right"
    increasing = _C.greater_equal(_at(bins, -1), _at(bins, 0))
    up = searchsorted(bins, x, side=side, method=method)
    down = n - searchsorted(flip(bins, 0), x, side=side, method=method)
    return _C.where(increasing, up, down)


def interp(x, xp, fp, left=None, right=None, period=None):
    """Linear interpolation of (xp, fp) (xp increasing) at x. Outside xp: left/right (default fp's ends), or
    'extrapolate' to continue the end segments; period: x and xp are taken modulo it (left and right unused)."""
    x, xp, fp = asarray(x), asarray(xp), asarray(fp)
    if tuple(xp.shape) != tuple(fp.shape) or xp.ndim != 1:
        raise ValueError("xp and fp must be one-dimensional arrays of equal size")
    dt = _engine_dtype(promote_types(_inexact(x).dtype, _inexact(xp).dtype))
    x, xp, fp = _C.astype(x, dt), _C.astype(xp, dt), _inexact(fp)
    extrapolate = {}
    for name, value in (("left", left), ("right", right)):
        if isinstance(value, str) and value != "extrapolate":
            raise ValueError(f"the only valid string value of `{name}` is 'extrapolate', but got: {value!r}")
        extrapolate[name] = isinstance(value, str)
    if period is not None:
        if _np.ndim(period) != 0:
            raise ValueError(f"period must be a scalar; got {period}")
        period = _C.abs(asarray(period))
        x, xp = remainder(x, period), remainder(xp, period)
        xp, fp = _C.sort([xp, fp], 0, True, 1)
        n = xp.shape[0]
        xp = concatenate([_C.slice(xp, [n - 1], [n], [1]) - period, xp, _C.slice(xp, [0], [1], [1]) + period])
        fp = concatenate([_C.slice(fp, [n - 1], [n], [1]), fp, _C.slice(fp, [0], [1], [1])])
    n = xp.shape[0]
    i = _C.clip(searchsorted(xp, x, side="right"), 1, n - 1)
    fp_lo, fp_hi = _C.take(fp, i - 1, 0), _C.take(fp, i, 0)
    xp_lo, xp_hi = _C.take(xp, i - 1, 0), _C.take(xp, i, 0)
    df, dx, delta = fp_hi - fp_lo, xp_hi - xp_lo, x - xp_lo
    epsilon = float(_np.spacing(_np.finfo(_np.float64 if dt == "f64" else _np.float32).eps))
    if dt in ("f16", "bf16"):
        epsilon = float(_np.spacing(_np.finfo(_np.float16).eps)) if dt == "f16" else 2.0 ** -14
    dx0 = _C.less_equal(_C.abs(dx), epsilon)  # no NaN gradient where two xp coincide
    f = _C.where(dx0, fp_lo, fp_lo + (delta / _C.where(dx0, 1, dx)) * df)
    if period is None:
        if not extrapolate["left"]:
            f = _C.where(_C.less(x, _at(xp, 0)), _at(fp, 0) if left is None else left, f)
        if not extrapolate["right"]:
            f = _C.where(_C.greater(x, _at(xp, -1)), _at(fp, -1) if right is None else right, f)
    return f
