"""tessera.numpy's functions of sequences and samples written with the others, as jax.numpy's: convolve and
correlate (one convolution op); polynomials (polyval, polyfit, vander, poly, polyadd, polysub, polymul, polydiv,
polyder, polyint); gradient, ediff1d and trapezoid; cov and corrcoef; histogram2d."""

import operator as _operator

import numpy as _np

from . import _tessera as _C
from ._np_base import Array, _canonical_axis, _engine_dtype, _FLOATING
from ._np_creation import asarray
from ._np_elementwise import clip, divide, equal, sqrt, _inexact, _operands, _promoted
from ._np_layout import broadcast_to, concatenate, flip, moveaxis, ravel, reshape, stack
from ._np_reductions import cumprod, sum
from ._np_indexing import where
from ._np_linalg import dot, linalg, outer
from ._np_composite import diagonal, rint, searchsorted
from ._np_stats import histogram_bin_edges


# ---- convolution ----------------------------------------------------------------------------------------

def _convolve_full(a, v):
    """The full discrete convolution of the 1-d floating a and v (length n + m - 1): one convolution op with v
    reversed (lax's convolution correlates)."""
    from . import lax as _lax
    n, m = a.shape[0], v.shape[0]
    lhs = reshape(a, (1, 1, n))
    rhs = reshape(flip(v, 0), (1, 1, m))
    return reshape(_lax.conv_general_dilated(lhs, rhs, (1,), [(m - 1, m - 1)]), (n + m - 1,))


def _convolution(name, a, v, mode):
    a, v = _promoted(*_operands(a, v))
    if a.ndim != 1 or v.ndim != 1:
        raise ValueError(f"{name}: only 1-d arrays are supported; got shapes {tuple(a.shape)} and {tuple(v.shape)}")
    if a.shape[0] == 0 or v.shape[0] == 0:
        raise ValueError(f"{name}: inputs cannot be empty; got shapes {tuple(a.shape)} and {tuple(v.shape)}")
    if mode not in ("full", "same", "valid"):
        raise ValueError(f"{name}: mode must be one of 'full', 'same' or 'valid', not {mode!r}")
    dtype = a._dtype_name
    if dtype not in _FLOATING:  # integer sequences convolve in float32 and come back as integers
        a, v = _C.astype(a, "f32"), _C.astype(v, "f32")
    return a, v, dtype


def _as_dtype(x, dtype):
    if dtype in _FLOATING or dtype == x._dtype_name:
        return x
    return _C.astype(rint(x), dtype)


def _mode_slice(full, n, m, mode):
    """full convolution of lengths n and m cut to numpy's mode: same, max(n, m) centred; valid, the positions
    where one sequence lies wholly inside the other."""
    if mode == "full":
        return full
    if mode == "same":
        length, start = max(n, m), (min(n, m) - 1) // 2
    else:
        length, start = max(n, m) - min(n, m) + 1, min(n, m) - 1
    return full[start:start + length]


def convolve(a, v, mode="full"):
    """The discrete linear convolution of the 1-d a and v; mode full (n + m - 1 values), same (max(n, m),
    centred) or valid (max - min + 1)."""
    a, v, dtype = _convolution("convolve", a, v, mode)
    out = _mode_slice(_convolve_full(a, v), a.shape[0], v.shape[0], mode)
    return _as_dtype(out, dtype)


def correlate(a, v, mode="valid"):
    """The cross-correlation of the 1-d a and v, c[k] = sum_n a[n + k] v[n] (real arrays: no conjugate), as
    numpy's: the convolution of a with v reversed, and, where v is the longer, the same reversed."""
    a, v, dtype = _convolution("correlate", a, v, mode)
    n, m = a.shape[0], v.shape[0]
    if m > n:
        out = flip(_mode_slice(_convolve_full(v, flip(a, 0)), m, n, mode), 0)
    else:
        out = _mode_slice(_convolve_full(a, flip(v, 0)), n, m, mode)
    return _as_dtype(out, dtype)


# ---- polynomials ----------------------------------------------------------------------------------------

def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of the 1-d x: columns x**(N-1), ..., x, 1 (or increasing powers), as running
    products (exact for integer x, and no pow of negative bases)."""
    x = asarray(x)
    if x.ndim != 1:
        raise ValueError(f"vander: x must be one-dimensional; got shape {tuple(x.shape)}")
    N = x.shape[0] if N is None else _operator.index(N)
    if N < 0:
        raise ValueError(f"vander: N must be non-negative; got {N}")
    n = x.shape[0]
    if N == 0:
        return _C.full([n, 0], 0, x._dtype_name)
    ones = _C.full([n, 1], 1, x._dtype_name)
    if N == 1:
        cols = ones
    else:
        powers = cumprod(broadcast_to(reshape(x, (n, 1)), (n, N - 1)), axis=1)
        cols = concatenate([ones, powers if powers._dtype_name == x._dtype_name else _C.astype(powers, x._dtype_name)], 1)
    return cols if increasing else flip(cols, 1)


def polyval(p, x):
    """The polynomial with coefficients p (highest power first) at x, by Horner's rule."""
    p, x = asarray(p), asarray(x)
    if p.ndim != 1:
        raise ValueError(f"polyval: p must be one-dimensional; got shape {tuple(p.shape)}")
    p, x = _promoted(p, x)
    y = _C.full(list(x.shape), 0, x._dtype_name)
    for i in range(p.shape[0]):
        y = y * x + p[i]
    return y


def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """The least-squares polynomial of degree deg through (x, y) (coefficients highest power first; a 2-d y fits
    each column), as numpy's: the Vandermonde matrix with its columns scaled to unit norm, solved by lstsq.
    full=True also returns (residuals, rank, singular values, rcond); cov=True the coefficients' covariance."""
    x, y = _inexact(x), _inexact(y)
    x, y = _promoted(x, y)
    deg = _operator.index(deg)
    if deg < 0:
        raise ValueError(f"polyfit: expected deg >= 0; got {deg}")
    if x.ndim != 1:
        raise TypeError(f"polyfit: expected 1-d x; got shape {tuple(x.shape)}")
    if y.ndim not in (1, 2):
        raise TypeError(f"polyfit: expected 1-d or 2-d y; got shape {tuple(y.shape)}")
    if x.shape[0] != y.shape[0]:
        raise TypeError(f"polyfit: expected x and y to have the same length; got {x.shape[0]} and {y.shape[0]}")
    n = x.shape[0]
    order = deg + 1
    if rcond is None:
        rcond = n * float(_np.finfo(_np.float32 if x._dtype_name != "f64" else _np.float64).eps)
    lhs, rhs = vander(x, order), y
    if w is not None:
        w = asarray(w)
        if w.ndim != 1 or w.shape[0] != n:
            raise TypeError(f"polyfit: expected a 1-d w of length {n}; got shape {tuple(w.shape)}")
        lhs = lhs * reshape(w, (n, 1))
        rhs = rhs * (w if rhs.ndim == 1 else reshape(w, (n, 1)))
    scale = sqrt(sum(lhs * lhs, axis=0))
    scale = where(equal(scale, 0), 1, scale)
    c, resids, rank, s = linalg.lstsq(lhs / scale, rhs, rcond=rcond)
    c = (c.T / scale).T
    if full:
        return c, resids, rank, s, rcond
    if cov:
        if n <= order:
            raise ValueError("polyfit: the number of data points must exceed the order to scale the covariance")
        inv = linalg.inv(dot((lhs / scale).T, lhs / scale)) / outer(scale, scale)
        fac = resids / (n - order) if cov != "unscaled" else 1.0
        if y.ndim == 1:
            return c, inv * fac
        return c, inv[:, :, None] * fac
    return c


# ---- differences and integrals --------------------------------------------------------------------------

def ediff1d(ary, to_end=None, to_begin=None):
    """The differences of consecutive elements of ary flattened, with to_begin before them and to_end after."""
    a = ravel(asarray(ary))
    parts = [] if to_begin is None else [ravel(_C.astype(asarray(to_begin), a._dtype_name))]
    parts.append(a[1:] - a[:-1] if a.shape[0] else a)
    if to_end is not None:
        parts.append(ravel(_C.astype(asarray(to_end), a._dtype_name)))
    return concatenate(parts, 0) if len(parts) > 1 else parts[0]


def _gradient_1d(f, h, axis):
    """numpy's gradient along axis with spacing h (a Python number, or 1-d coordinates): second-order central
    differences inside, first-order one-sided ones at the two ends."""
    n = f.shape[axis]
    if n < 2:
        raise ValueError(f"gradient: shape of the array along axis {axis} is {n}; it must be at least 2 (edge_order 1)")
    g = moveaxis(f, axis, 0)
    if isinstance(h, Array) and h.ndim == 1:
        if h.shape[0] != n:
            raise ValueError(f"gradient: the coordinates along axis {axis} must have the axis' length {n}")
        h = _C.astype(h, g._dtype_name) if h._dtype_name != g._dtype_name else h
        dx = h[1:] - h[:-1]
        tail = (1,) * (g.ndim - 1)
        if n > 2:
            dx1, dx2 = reshape(dx[:-1], (n - 2,) + tail), reshape(dx[1:], (n - 2,) + tail)
            a = -dx2 / (dx1 * (dx1 + dx2))
            b = (dx2 - dx1) / (dx1 * dx2)
            c = dx1 / (dx2 * (dx1 + dx2))
            inner = a * g[:-2] + b * g[1:-1] + c * g[2:]
        first = (g[1:2] - g[0:1]) / reshape(dx[0:1], (1,) + tail)
        last = (g[-1:] - g[-2:-1]) / reshape(dx[-1:], (1,) + tail)
    else:
        h = float(h) if not isinstance(h, Array) else h
        if n > 2:
            inner = (g[2:] - g[:-2]) / (2.0 * h)
        first = (g[1:2] - g[0:1]) / h
        last = (g[-1:] - g[-2:-1]) / h
    out = concatenate([first, inner, last], 0) if n > 2 else concatenate([first, last], 0)
    return moveaxis(out, 0, axis)


def gradient(f, *varargs, axis=None, edge_order=None):
    """numpy's gradient: the derivative of f along each axis (or those given) by central differences, with one
    spacing for all axes, one per axis, or 1-d coordinates per axis. A list of arrays, one per axis, or one
    array for one axis. edge_order 1 only, as jax.numpy."""
    if edge_order is not None and edge_order != 1:
        raise NotImplementedError("gradient: only edge_order=1 is implemented (as jax.numpy)")
    f = _inexact(f)
    axes = list(range(f.ndim)) if axis is None else ([axis] if isinstance(axis, int) else list(axis))
    axes = [_canonical_axis(a, f.ndim, "gradient") for a in axes]
    if not varargs:
        spacing = [1.0] * len(axes)
    elif len(varargs) == 1 and _np.ndim(varargs[0]) == 0:
        spacing = [varargs[0]] * len(axes)
    elif len(varargs) == len(axes):
        spacing = [v if _np.ndim(v) == 0 and not isinstance(v, Array) else asarray(v) for v in varargs]
    else:
        raise TypeError(f"gradient: {len(varargs)} spacings for {len(axes)} axes (give one, or one per axis)")
    out = [_gradient_1d(f, h, a) for h, a in zip(spacing, axes)]
    return out[0] if len(out) == 1 else out


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """The integral of y along axis by the trapezoidal rule, with sample points x (1-d, or y's shape) or the
    spacing dx."""
    y = _inexact(y)
    axis = _canonical_axis(axis, y.ndim, "trapezoid")
    y = moveaxis(y, axis, -1)
    if x is None:
        d = dx
    else:
        x = _inexact(x)
        x = x if x.ndim == 1 else moveaxis(x, axis, -1)
        if x.shape[-1] != y.shape[-1]:
            raise ValueError(f"trapezoid: x has {x.shape[-1]} samples along the axis where y has {y.shape[-1]}")
        d = x[..., 1:] - x[..., :-1]
    return sum(d * (y[..., 1:] + y[..., :-1]) * 0.5, axis=-1)


# ---- covariance -----------------------------------------------------------------------------------------

def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, dtype=None):
    """numpy's covariance matrix of the variables in m's rows (columns when rowvar=False), y's appended, with
    frequency and analytic weights; a single variable gives a 0-d result."""
    x = _inexact(m) if dtype is None else _C.astype(asarray(m), _engine_dtype(dtype))
    if x.ndim > 2:
        raise ValueError(f"cov: m has more than 2 dimensions; got shape {tuple(x.shape)}")
    x = reshape(x, (1, -1)) if x.ndim < 2 else x
    if not rowvar and x.shape[0] != 1:
        x = x.T
    if y is not None:
        yy = _C.astype(asarray(y), x._dtype_name)
        yy = reshape(yy, (1, -1)) if yy.ndim < 2 else yy
        if not rowvar and yy.shape[0] != 1:
            yy = yy.T
        x = concatenate([x, yy], 0)
    if ddof is None:
        ddof = 0 if bias else 1
    n = x.shape[1]
    w = None
    if fweights is not None:
        fw = asarray(fweights)
        if fw.ndim > 1 or fw.shape[0] != n:
            raise RuntimeError(f"cov: fweights must be 1-d with {n} entries; got shape {tuple(fw.shape)}")
        w = _C.astype(fw, x._dtype_name)
    if aweights is not None:
        aw = asarray(aweights)
        if aw.ndim > 1 or aw.shape[0] != n:
            raise RuntimeError(f"cov: aweights must be 1-d with {n} entries; got shape {tuple(aw.shape)}")
        aw = _C.astype(aw, x._dtype_name)
        w = aw if w is None else w * aw
    if w is None:
        avg = sum(x, axis=1) / n
        w_sum = float(n)
        fact = float(n - ddof)
    else:
        w_sum = sum(w)
        avg = sum(x * w, axis=1) / w_sum
        if ddof == 0:
            fact = w_sum
        elif aweights is None:
            fact = w_sum - ddof
        else:
            fact = w_sum - ddof * sum(w * aw) / w_sum
    xc = x - reshape(avg, (-1, 1))
    xw = xc if w is None else xc * w
    c = dot(xw, xc.T) / fact
    return c[0, 0] if c.shape == (1, 1) else c


def corrcoef(x, y=None, rowvar=True, dtype=None):
    """The Pearson correlation coefficients of the variables (cov normalised by the standard deviations),
    clipped to [-1, 1]."""
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return divide(c, c)
    d = diagonal(c)
    s = sqrt(d)
    c = c / reshape(s, (-1, 1)) / reshape(s, (1, -1))
    return clip(c, -1.0, 1.0)


# ---- histograms -----------------------------------------------------------------------------------------

def histogram2d(x, y, bins=10, range=None, weights=None, density=None):
    """(counts [nx, ny], x edges, y edges): the (weighted) count of the points (x[i], y[i]) in each bin; bins an
    int, a pair of ints, edges, or a pair of edges; bins half-open but the last closed, as histogram's. Counts are
    floating, as jax.numpy's."""
    x, y = _inexact(x), _inexact(y)
    x, y = _promoted(x, y)
    if x.ndim != 1 or y.shape != x.shape:
        raise ValueError(f"histogram2d: x and y must be 1-d of one length; got shapes {tuple(x.shape)} and "
                         f"{tuple(y.shape)}")
    try:  # numpy: a sequence of two is (x's bins, y's bins); an int or a longer sequence of edges serves both
        pair = len(bins) == 2
    except TypeError:
        pair = False
    bx, by = bins if pair else (bins, bins)
    rx, ry = (None, None) if range is None else range
    ex = histogram_bin_edges(x, bx, rx)
    ey = histogram_bin_edges(y, by, ry)
    w = _C.full(list(x.shape), 1.0, x._dtype_name) if weights is None else _C.astype(asarray(weights), x._dtype_name)
    nx, ny = ex.shape[0] - 1, ey.shape[0] - 1

    def index(v, e, nb):
        """bin index of each value (the last edge goes in the last bin); nb for those outside the edges."""
        i = searchsorted(e, v, side="right") - 1
        i = where(equal(v, e[-1]), nb - 1, i)
        outside = _C.bitwise_or(_C.less(i, _C.scalar(0, i)), _C.greater_equal(i, _C.scalar(nb, i)))
        return i, outside

    ix, ox = index(x, ex, nx)
    iy, oy = index(y, ey, ny)
    out = _C.bitwise_or(ox, oy)
    flat = where(out, nx * ny, ix * ny + iy)
    counts = _C.scatter_add(_C.full([nx * ny + 1], 0.0, w._dtype_name), flat, w, 0, 0)
    counts = reshape(counts[:nx * ny], (nx, ny))
    if density:
        area = reshape(ex[1:] - ex[:-1], (nx, 1)) * reshape(ey[1:] - ey[:-1], (1, ny))
        counts = counts / area / sum(counts)
    return counts, ex, ey


# ---- polynomial arithmetic ------------------------------------------------------------------------------

def _coefficients(p, name):
    p = asarray(p)
    if p.ndim != 1:
        raise ValueError(f"{name}: coefficients must be 1-d (highest power first); got shape {tuple(p.shape)}")
    return p


def _padded_front(p, n):
    return p if p.shape[0] == n else concatenate([_C.full([n - p.shape[0]], 0, p._dtype_name), p], 0)


def polyadd(a1, a2):
    """The sum of two polynomials (highest power first)."""
    a, b = _promoted(_coefficients(a1, "polyadd"), _coefficients(a2, "polyadd"))
    n = max(a.shape[0], b.shape[0])
    return _padded_front(a, n) + _padded_front(b, n)


def polysub(a1, a2):
    """The difference of two polynomials (highest power first)."""
    a, b = _promoted(_coefficients(a1, "polysub"), _coefficients(a2, "polysub"))
    n = max(a.shape[0], b.shape[0])
    return _padded_front(a, n) - _padded_front(b, n)


def polymul(a1, a2):
    """The product of two polynomials: the convolution of their coefficients."""
    return convolve(_coefficients(a1, "polymul"), _coefficients(a2, "polymul"))


def polyder(p, m=1):
    """The m-th derivative of the polynomial p."""
    p = _coefficients(p, "polyder")
    m = _operator.index(m)
    if m < 0:
        raise ValueError(f"polyder: order of derivative must be positive; got {m}")
    for _ in range(m):
        n = p.shape[0]
        if n <= 1:
            return _C.full([0], 0, p._dtype_name)
        powers = asarray(_np.arange(n - 1, 0, -1).astype(_np.int32))
        p = p[:-1] * (powers if p._dtype_name == "i32" else _C.astype(powers, p._dtype_name))
    return p


def polyint(p, m=1, k=None):
    """The m-th antiderivative of the polynomial p, with integration constants k (a scalar for all, or one per
    integration, the first integration's first; default 0)."""
    p = _inexact(_coefficients(p, "polyint"))
    m = _operator.index(m)
    if m < 0:
        raise ValueError(f"polyint: order of integral must be positive; got {m}")
    ks = [0.0] * m if k is None else (list(_np.ravel(k)) if _np.ndim(k) else [k] * m)
    if len(ks) != m:
        raise ValueError(f"polyint: k must be a scalar or have {m} values; got {len(ks)}")
    for c in ks:
        n = p.shape[0]
        divisors = asarray(_np.arange(n, 0, -1).astype(_np.float32))
        p = concatenate([p / _C.astype(divisors, p._dtype_name), reshape(_C.astype(asarray(c), p._dtype_name), (1,))], 0)
    return p


def polydiv(u, v, *, trim_leading_zeros=False):
    """(quotient, remainder) of the polynomial division u / v by long division. The remainder keeps u's length
    (its leading zeros stay, as jax.numpy's default) unless trim_leading_zeros, which needs concrete values."""
    u, v = _inexact(_coefficients(u, "polydiv")), _inexact(_coefficients(v, "polydiv"))
    u, v = _promoted(u, v)
    n, m = u.shape[0], v.shape[0]
    if m == 0:
        raise ValueError("polydiv: the divisor is empty")
    if n < m:
        return _C.full([1], 0, u._dtype_name), u
    scale = 1.0 / v[0]
    q_terms = []
    r = u
    for i in range(n - m + 1):
        c = r[i] * scale
        q_terms.append(c)
        shifted = concatenate([_C.full([i], 0, r._dtype_name), v * c, _C.full([n - m - i], 0, r._dtype_name)], 0)
        r = r - shifted
    q = stack(q_terms, 0)
    if trim_leading_zeros:
        if r.is_tracer:
            raise _C.ConcretizationError("polydiv: trim_leading_zeros needs concrete values")
        host = _np.asarray(r._host_view())
        lead = 0
        while lead < host.shape[0] - 1 and abs(host[lead]) <= 1e-14 * max(1.0, float(_np.abs(host).max())):
            lead += 1
        r = r[lead:]
    return q, r


def poly(seq_of_zeros):
    """The coefficients (highest power first, leading 1) of the polynomial whose roots are the 1-d
    seq_of_zeros: the product of (x - r) over the roots."""
    z = _inexact(asarray(seq_of_zeros))
    if z.ndim != 1:
        raise NotImplementedError("poly: only a 1-d sequence of roots (the characteristic polynomial of a matrix "
                                  "needs its general eigenvalues, which are not available)")
    p = _C.full([1], 1.0, z._dtype_name)
    for i in range(z.shape[0]):
        nxt = concatenate([p, _C.full([1], 0, z._dtype_name)], 0)
        prev = concatenate([_C.full([1], 0, z._dtype_name), p], 0)
        p = nxt - prev * z[i]
    return p
