"""tessera.scipy.linalg's special matrices, as jax.scipy.linalg: toeplitz, hankel, circulant, leslie, companion,
fiedler, fiedler_companion and convolution_matrix of arrays (gathers and masks, batched over leading axes as
JAX's vectorize, differentiable in their inputs), and hilbert, invhilbert, pascal, invpascal, helmert and
hadamard of a static size (exact integers and float64 arithmetic on the host, then stored in JAX's dtype)."""

import math as _math
import operator as _operator

import numpy as _np

from . import numpy as _tnp


def _batch(*xs):
    """The arrays (at least 1-D) with their leading axes broadcast to one shape; the last axes kept."""
    xs = [_tnp.atleast_1d(_tnp.asarray(x)) for x in xs]
    batch = tuple(_np.broadcast_shapes(*[tuple(x.shape[:-1]) for x in xs]))
    return [_tnp.broadcast_to(x, batch + (x.shape[-1],)) for x in xs], batch


def _gather(v, index):
    """v [..., k] at a static index matrix [m, n]: [..., m, n]."""
    m, n = index.shape
    flat = _tnp.take(v, _tnp.asarray(index.reshape(-1).astype(_np.int32)), axis=-1)
    return flat.reshape(tuple(v.shape[:-1]) + (m, n))


def toeplitz(c, r=None):
    """The Toeplitz matrix [..., m, n] with first column c [..., m] and first row r [..., n] (r[0] is ignored:
    c[0] is the corner); r = c when not given."""
    c = _tnp.asarray(c)
    r = c if r is None else _tnp.asarray(r)
    (c, r), batch = _batch(c, r)
    c, r = _same_dtype(c, r)
    m, n = c.shape[-1], r.shape[-1]
    if m == 0 or n == 0:
        return _tnp.zeros(batch + (m, n), dtype=c.dtype)
    elems = _tnp.concatenate([_tnp.flip(c, axis=-1), r[..., 1:]], axis=-1)  # [..., m + n - 1]
    return _gather(elems, m - 1 + _np.arange(n)[None, :] - _np.arange(m)[:, None])


def _same_dtype(*xs):
    dtype = _tnp.result_type(*xs)
    return [x.astype(dtype) for x in xs]


def hankel(c, r=None):
    """The Hankel matrix [..., m, n] with first column c [..., m] and last row r [..., n] (r[0] is ignored);
    zeros below the anti-diagonal when r is not given (n = m)."""
    c = _tnp.asarray(c)
    r = _tnp.zeros_like(c) if r is None else _tnp.asarray(r)
    if c.ndim == 0:
        raise ValueError("hankel: c must be at least 1-dimensional, got a scalar.")
    if r.ndim == 0:
        raise ValueError("hankel: r must be at least 1-dimensional, got a scalar.")
    (c, r), batch = _batch(c, r)
    c, r = _same_dtype(c, r)
    m, n = c.shape[-1], r.shape[-1]
    if m == 0 or n == 0:
        return _tnp.zeros(batch + (m, n), dtype=c.dtype)
    v = _tnp.concatenate([c, r[..., 1:]], axis=-1)  # [..., m + n - 1]
    return _gather(v, _np.arange(m)[:, None] + _np.arange(n)[None, :])


def circulant(c):
    """The circulant matrix [..., n, n] with first column c [..., n]: C[i, j] = c[(i - j) mod n]."""
    (c,), _ = _batch(c)
    n = c.shape[-1]
    return _gather(c, (_np.arange(n)[:, None] - _np.arange(n)[None, :]) % max(n, 1))


def leslie(f, s):
    """The Leslie matrix [..., n, n]: fecundity f [..., n] in the first row, survival s [..., n - 1] on the
    subdiagonal."""
    f_arr, s_arr = _tnp.atleast_1d(_tnp.asarray(f)), _tnp.atleast_1d(_tnp.asarray(s))
    if f_arr.shape[-1] < 2:
        raise ValueError(f"The length of f along the last axis must be at least 2; got shape {tuple(f_arr.shape)}.")
    if s_arr.shape[-1] != f_arr.shape[-1] - 1:
        raise ValueError("Incorrect lengths for f and s. The length of s along the last axis must be one less than "
                         f"the length of f; got f shape {tuple(f_arr.shape)} and s shape {tuple(s_arr.shape)}.")
    (f, s), _ = _batch(f_arr, s_arr)
    f, s = _same_dtype(f, s)
    return _first_row_and_subdiagonal(f, s)


def _first_row_and_subdiagonal(first, sub):
    """[..., n, n]: first [..., n] as row 0 and sub [..., n - 1] on the subdiagonal, zeros elsewhere."""
    n = first.shape[-1]
    rows, cols = _np.arange(n)[:, None], _np.arange(n)[None, :]
    below = _gather(sub, _np.broadcast_to(_np.maximum(rows - 1, 0), (n, n)))  # sub[i - 1] in row i
    top = _tnp.broadcast_to(_tnp.expand_dims(first, -2), tuple(below.shape))
    zero = _tnp.zeros((), dtype=first.dtype)
    return _tnp.where(_tnp.asarray(rows == 0), top, _tnp.where(_tnp.asarray(cols == rows - 1), below, zero))


def companion(a):
    """The companion matrix [..., n - 1, n - 1] of the polynomial with coefficients a [..., n] (highest degree
    first): -a[1:] / a[0] in the first row, ones on the subdiagonal."""
    a = _tnp.atleast_1d(_tnp.asarray(a))
    a = a if a._dtype_name in ("f32", "f64") else a.astype("float32")
    if a.shape[-1] < 2:
        raise ValueError(f"The length of `a` along the last axis must be at least 2; got shape {tuple(a.shape)}.")
    first = -a[..., 1:] / a[..., :1]
    return _first_row_and_subdiagonal(first, _tnp.ones(tuple(a.shape[:-1]) + (a.shape[-1] - 2,), dtype=a.dtype))


def fiedler(a):
    """The Fiedler matrix |a[i] - a[j]| [..., n, n] of a [..., n]."""
    a = _tnp.atleast_1d(_tnp.asarray(a))
    return _tnp.abs(a[..., :, None] - a[..., None, :])


def fiedler_companion(a):
    """The Fiedler companion matrix [..., n - 1, n - 1] of the polynomial a [..., n] (highest degree first): a
    pentadiagonal matrix with the companion matrix's eigenvalues (JAX's and scipy's layout)."""
    a = _tnp.atleast_1d(_tnp.asarray(a))
    a = a if a._dtype_name in ("f32", "f64") else a.astype("float32")
    if a.shape[-1] == 0:
        raise ValueError("fiedler_companion requires the last axis of 'a' to have nonzero length, but got an array "
                         f"of shape {tuple(a.shape)}.")
    n = a.shape[-1] - 1
    batch = tuple(a.shape[:-1])
    if n == 0:
        return _tnp.zeros(batch + (0, 0), dtype=a.dtype)
    a = a / a[..., :1]
    if n == 1:
        return -a[..., 1:].reshape(batch + (1, 1))
    i, j = _np.arange(n)[:, None], _np.arange(n)[None, :]
    shape = (n, n)
    super_val = -_gather(a, _np.broadcast_to(_np.minimum(i + 2, n), shape))
    sub_val = -_gather(a, _np.broadcast_to(_np.minimum(i + 1, n), shape))
    first = _tnp.broadcast_to(-a[..., 1:2, None], batch + shape)
    one, zero = _tnp.ones((), dtype=a.dtype), _tnp.zeros((), dtype=a.dtype)
    even, odd = i % 2 == 0, i % 2 == 1
    conditions = [(i == 0) & (j == 0), (i == 1) & (j == 0), (j == i + 1) & even, (j == i + 2) & even,
                  (j == i - 1) & even & (i >= 2), (j == i - 2) & odd & (i >= 3)]
    choices = [first, one, super_val, one, sub_val, one]
    out = _tnp.broadcast_to(zero, batch + shape)
    for cond, choice in reversed(list(zip(conditions, choices))):  # the first true condition wins, as select
        out = _tnp.where(_tnp.asarray(cond), choice, out)
    return out


def convolution_matrix(a, n, mode="full"):
    """The matrix [..., k, n] whose product with a vector v [n] is the convolution of a [..., m] with v in the
    given mode ('full': k = m + n - 1, 'same': max(m, n), 'valid': max(m, n) - min(m, n) + 1): a Toeplitz matrix
    of a's padded and flipped copies."""
    n = _operator.index(n)
    if n <= 0:
        raise ValueError(f"n must be a positive integer; got {n}.")
    a = _tnp.asarray(a)
    if a.ndim == 0:
        raise ValueError("convolution_matrix: a must be at least 1-dimensional, got a scalar.")
    m = a.shape[-1]
    if m < 1:
        raise ValueError(f"len(a) must be at least 1; got shape {tuple(a.shape)}.")
    if mode not in ("full", "valid", "same"):
        raise ValueError(f"mode must be one of 'full', 'valid', 'same'; got {mode!r}.")
    pad = [(0, 0)] * (a.ndim - 1) + [(0, n - 1)]
    az = _tnp.pad(a, pad)
    raz = _tnp.pad(_tnp.flip(a, axis=-1), pad)
    length = m + n - 1
    if mode == "same":
        trim = min(n, m) - 1
        tb, te = trim // 2, trim - trim // 2
    elif mode == "valid":
        tb = te = min(n, m) - 1
    else:
        tb = te = 0
    return toeplitz(az[..., tb:length - te], raz[..., length - n - tb:length - tb])


# ---- matrices of a static size ---------------------------------------------------------------------------------


def _size(n, name):
    try:
        return _operator.index(n)
    except TypeError:
        raise TypeError(f"{name}: n must be an integer, not {type(n).__name__}") from None


def hilbert(n):
    """The Hilbert matrix 1 / (i + j + 1) [n, n], float32 (JAX's default float)."""
    n = _size(n, "hilbert")
    i = _np.arange(n, dtype=_np.float64)
    return _tnp.asarray(1.0 / (i[:, None] + i[None, :] + 1.0), dtype="float32")


def invhilbert(n):
    """The inverse of hilbert(n), from its closed form in exact integers, float32 (JAX's default float; past
    n = 13 its entries are beyond float32's integers, as JAX's)."""
    n = _size(n, "invhilbert")
    out = _np.zeros((n, n), dtype=_np.float64)
    for i in range(n):
        for j in range(n):
            s = i + j
            out[i, j] = float((-1) ** s * (s + 1) * _math.comb(n + i, n - j - 1) * _math.comb(n + j, n - i - 1)
                              * _math.comb(s, i) ** 2)
    return _tnp.asarray(out, dtype="float32")


_PASCAL_KINDS = ["symmetric", "lower", "upper"]


def _pascal_lower(n, inverse):
    i, j = _np.arange(n)[:, None], _np.arange(n)[None, :]
    binom = _np.array([[float(_math.comb(r, c)) for c in range(n)] for r in range(n)]).reshape(n, n)
    return binom * ((-1.0) ** (i - j) if inverse else 1.0)


def pascal(n, kind=None):
    """The Pascal matrix [n, n]: binomial coefficients C(i + j, i) ('symmetric', the default), C(i, j) ('lower')
    or its transpose ('upper'); float32, as JAX."""
    n = _size(n, "pascal")
    kind = "symmetric" if kind is None else kind
    if kind not in _PASCAL_KINDS:
        raise ValueError(f"Expected kind to be on of: {_PASCAL_KINDS}; got {kind}")
    lower = _pascal_lower(n, False)
    out = lower if kind == "lower" else lower.T if kind == "upper" else lower @ lower.T
    return _tnp.asarray(out, dtype="float32")


def invpascal(n, kind=None):
    """The inverse of pascal(n, kind), float32 (JAX's default float)."""
    n = _size(n, "invpascal")
    kind = "symmetric" if kind is None else kind
    if kind not in _PASCAL_KINDS:
        raise ValueError(f"Expected kind to be one of: {_PASCAL_KINDS}; got {kind}")
    lower = _pascal_lower(n, True)
    out = lower if kind == "lower" else lower.T if kind == "upper" else lower.T @ lower
    return _tnp.asarray(out, dtype="float32")


def helmert(n, full=False):
    """The Helmert matrix [n - 1, n] (full: [n, n], the first row 1 / sqrt(n)), float32 (JAX's default float):
    row k has 1 / sqrt(k (k + 1)) in its first k columns and -k / sqrt(k (k + 1)) in column k (k from 1)."""
    n = _size(n, "helmert")
    if n < 1:
        raise ValueError(f"n must be a positive integer; got {n}.")
    i, j = _np.arange(n - 1)[:, None], _np.arange(n)[None, :]
    k = (i + 1).astype(_np.float64)
    denom = _np.sqrt(k * (k + 1))
    h = _np.where(j <= i, 1.0 / denom, _np.where(j == i + 1, -k / denom, 0.0))
    if full:
        h = _np.concatenate([_np.full((1, n), 1.0 / _np.sqrt(n)), h], axis=0)
    return _tnp.asarray(h, dtype="float32")


def hadamard(n, dtype=int):
    """The Hadamard matrix of order n (a power of 2) [n, n] of +1 and -1 (Sylvester's construction), in dtype
    (int: int32, JAX's default integer)."""
    n = _size(n, "hadamard")
    if n < 1 or not _math.log2(n).is_integer():
        raise ValueError(f"n must be a positive power of 2; got {n}.")
    h = _np.ones((1, 1))
    for _ in range(int(_math.log2(n))):
        h = _np.block([[h, h], [h, -h]])
    return _tnp.asarray(h, dtype="int32" if dtype is int else dtype)
