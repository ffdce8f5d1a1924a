"""tessera.numpy.linalg's decompositions and what is written with them, as jax.numpy.linalg: eigh, eigvalsh, svd,
svdvals, qr, pinv, matrix_rank, lstsq, cond, matrix_power and the singular-value matrix norms (ord 2, -2, 'nuc').
Each is one of the linalg ops of engine/ops/linalg.cpp (eigh, svd, qr on LAPACK) and array ops around it, so it
traces, differentiates and batches as the rest of tessera.numpy."""

import collections as _collections
import operator as _operator

import numpy as _np

from . import _tessera as _C
from ._np_creation import asarray
from ._np_elementwise import _inexact
from ._np_linalg import _mT, _square, _tnp  # loaded: _np_linalg imports this module last


def _matrix(a, name):
    """a as f32 or f64 (integers, bools, f16 and bf16 as f32), checked to be [..., m, n]."""
    a = _inexact(a)
    if a._dtype_name not in ("f32", "f64"):
        a = _C.astype(a, "f32")
    if a.ndim < 2:
        raise ValueError(f"{name}: a must have at least two axes ([..., m, n]), not shape {a.shape}")
    return a


def _eps(a):
    return float(_np.finfo(_np.float32 if a._dtype_name == "f32" else _np.float64).eps)


EighResult = _collections.namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
SVDResult = _collections.namedtuple("SVDResult", ["U", "S", "Vh"])
QRResult = _collections.namedtuple("QRResult", ["Q", "R"])


def _uplo_lower(uplo, name):
    if uplo is None or uplo == "L":
        return True
    if uplo == "U":
        return False
    raise ValueError(f"{name}: UPLO must be 'L' or 'U', not {uplo!r}")


def eigh(a, UPLO=None, symmetrize_input=True):
    """The eigendecomposition of a symmetric a [..., n, n]: (eigenvalues ascending [..., n], eigenvectors in the
    columns [..., n, n]). Of (a + a^T) / 2 unless symmetrize_input is False; then only the lower triangle (UPLO
    'L') or the upper one ('U') is read."""
    a = _square(a, "eigh")
    lower = _uplo_lower(UPLO, "eigh")
    if not symmetrize_input and not lower:
        a = _mT(a)  # the upper triangle of a is the lower one of a^T
    v, w = _C.eigh(a, bool(symmetrize_input))
    return EighResult(w, v)


def eigvalsh(a, UPLO="L", *, symmetrize_input=True):
    """The eigenvalues of a symmetric a [..., n, n], ascending (eigh's first result)."""
    return eigh(a, UPLO, symmetrize_input).eigenvalues


def _hermitian_svd(a, compute_uv):
    """svd of a symmetric a from its eigendecomposition: s = |w| descending, u = v, vh = (v sign(w))^T in that order."""
    tnp = _tnp()
    w, v = eigh(a)
    s = tnp.abs(w)
    order = tnp.flip(tnp.argsort(s, axis=-1), axis=-1)
    s = tnp.take_along_axis(s, order, axis=-1)
    if not compute_uv:
        return s
    sign = tnp.take_along_axis(tnp.sign(w), order, axis=-1)
    u = tnp.take_along_axis(v, tnp.expand_dims(order, -2), axis=-1)
    vh = _mT(u * tnp.expand_dims(sign, -2))
    return SVDResult(u, s, vh)


def svd(a, full_matrices=True, compute_uv=True, hermitian=False, subset_by_index=None):
    """The singular value decomposition a = U diag(S) Vh of a [..., m, n], S descending: U [..., m, m] and Vh
    [..., n, n] (full_matrices) or [..., m, k] and [..., k, n], k = min(m, n); S alone without compute_uv. Its
    gradient needs distinct singular values, and full_matrices=False unless only S is used (as JAX)."""
    if subset_by_index is not None:
        raise NotImplementedError("svd: subset_by_index is not supported; slice the full result")
    a = _matrix(a, "svd")
    if hermitian:
        if a.shape[-1] != a.shape[-2]:
            raise ValueError(f"svd: hermitian=True needs a square a, not shape {a.shape}")
        return _hermitian_svd(a, compute_uv)
    r = _C.svd(a, bool(full_matrices), bool(compute_uv))
    return SVDResult(*r) if compute_uv else r


def svdvals(x):
    """The singular values of x [..., m, n], descending [..., min(m, n)]."""
    return svd(x, compute_uv=False)


def qr(a, mode="reduced"):
    """The QR decomposition a = Q R of a [..., m, n], Q's columns orthonormal and R upper triangular: mode
    'reduced' gives Q [..., m, k] and R [..., k, n] (k = min(m, n)), 'complete' Q [..., m, m] and R [..., m, n],
    'r' R alone (reduced), 'raw' LAPACK's ?geqrf factorisation as numpy gives it: (h [..., n, m], tau [..., k]),
    h the transpose of the factored a (R on and above its diagonal, the Householder vectors below it, their
    leading ones implied) and tau the reflectors' scales, Q = (I - tau_0 v_0 v_0^T) ... (I - tau_{k-1} v_{k-1}
    v_{k-1}^T). JAX has no gradient for 'raw'; here it is differentiated through its Householder steps."""
    if mode not in ("reduced", "complete", "r", "raw"):
        raise ValueError(f"qr: mode must be 'reduced', 'complete', 'r' or 'raw', not {mode!r}")
    a = _matrix(a, "qr")
    if mode == "raw":
        return QRResult(*_householder_qr(a))  # a QRResult of (h, tau), as JAX's
    q, r = _C.qr(a, mode == "complete")
    return r if mode == "r" else QRResult(q, r)


def _scaled_norm(x):
    """The 2-norm of x over its last axis ([..., m] -> [..., 1]), scaled by max |x| so that neither squares of
    values near the dtype's largest overflow nor those of tiny ones underflow (as LAPACK's ?nrm2). Zero rows give
    zero with a finite gradient."""
    tnp = _tnp()
    scale = tnp.max(tnp.abs(x), axis=-1, keepdims=True)
    nonzero = scale > 0
    safe = tnp.where(nonzero, scale, 1.0)
    ssq = tnp.sum(tnp.square(x / safe), axis=-1, keepdims=True)
    return tnp.where(nonzero, safe * tnp.sqrt(tnp.where(nonzero, ssq, 1.0)), 0.0)


def _householder_qr(a):
    """qr's 'raw' mode: ?geqr2 (LAPACK's unblocked Householder QR) written with array ops, one fori_loop step per
    reflector. Step j reads column j of the working matrix r [..., m, n] through masks (rows and columns compared
    with j, so one traced body serves every j and every batch): alpha = r[j, j], x = r[j+1:, j]; ?larfg's
    reflector beta = -sign(alpha) |(alpha, x)|, tau = (beta - alpha) / beta, v = x / (alpha - beta) (tau = 0,
    nothing changed, when x is zero); then r[j:, j+1:] -= v (tau v^T r[j:, j+1:]) (?larf) and column j becomes
    (beta, v). Returns (r^T [..., n, m], tau [..., k])."""
    from . import lax as _lax
    tnp = _tnp()
    m, n = a.shape[-2:]
    k = min(m, n)
    dtype = a._dtype_name
    tau0 = tnp.zeros(tuple(a.shape[:-2]) + (k,), dtype=dtype)
    if k == 0:
        return _mT(a), tau0
    rows = tnp.arange(m, dtype="i32")  # [m]
    cols = tnp.arange(n, dtype="i32")  # [n]
    steps = tnp.arange(k, dtype="i32")  # [k]
    zero = asarray(0.0, dtype=dtype)

    def step(j, carry):
        r, tau = carry  # [..., m, n], [..., k]
        col = tnp.sum(tnp.where(cols == j, r, zero), axis=-1)  # [..., m]
        alpha = tnp.sum(tnp.where(rows == j, col, zero), axis=-1, keepdims=True)  # [..., 1]
        x = tnp.where(rows > j, col, zero)  # [..., m], zeros on and above row j
        xnorm = _scaled_norm(x)  # [..., 1]
        reflect = xnorm > 0
        big = tnp.maximum(tnp.abs(alpha), xnorm)
        small = tnp.minimum(tnp.abs(alpha), xnorm)
        norm = big * tnp.sqrt(1.0 + tnp.square(small / tnp.where(reflect, big, 1.0)))  # ?lapy2(alpha, xnorm)
        beta = tnp.where(reflect, tnp.where(alpha >= 0, -norm, norm), alpha)
        safe_beta = tnp.where(reflect, beta, 1.0)
        tau_j = tnp.where(reflect, (beta - alpha) / safe_beta, zero)  # [..., 1]
        v = tnp.where(rows == j, 1.0, x * (1.0 / tnp.where(reflect, alpha - beta, 1.0)))  # [..., m]
        w = tnp.sum(tnp.expand_dims(v, -1) * r, axis=-2)  # v^T r: [..., n]
        w = tnp.where(cols > j, tau_j * w, zero)  # only the columns right of j change
        updated = r - tnp.expand_dims(v, -1) * tnp.expand_dims(w, -2)
        new_col = tnp.where(rows == j, beta, tnp.where(tnp.logical_and(rows > j, reflect), v, col))  # [..., m]
        r = tnp.where(cols == j, tnp.expand_dims(new_col, -1), updated)
        return r, tnp.where(steps == j, tau_j, tau)

    r, tau = _lax.fori_loop(0, k, step, (a, tau0))
    return _mT(r), tau


def pinv(a, rtol=None, hermitian=False, *, rcond=None):
    """The Moore-Penrose pseudo-inverse of a [..., m, n] ([..., n, m]), from its SVD: singular values at most
    rtol times the largest (default 10 max(m, n) eps) count as zero. rcond is rtol's old name."""
    tnp = _tnp()
    if rcond is not None:
        if rtol is not None:
            raise ValueError("pinv: give rtol or rcond, not both")
        rtol = rcond
    a = _matrix(a, "pinv")
    m, n = a.shape[-2:]
    if m == 0 or n == 0:
        return tnp.zeros(tuple(a.shape[:-2]) + (n, m), dtype=a._dtype_name)
    if rtol is None:
        rtol = 10.0 * max(m, n) * _eps(a)
    u, s, vh = svd(a, full_matrices=False, hermitian=hermitian)
    cutoff = tnp.expand_dims(asarray(rtol, dtype=a._dtype_name), -1) * s[..., 0:1]
    s = tnp.where(s > cutoff, s, _np.inf)
    return tnp.matmul(_mT(vh), _mT(u) / tnp.expand_dims(s, -1))


def matrix_rank(M, rtol=None, *, hermitian=False, tol=None):
    """The number of singular values of M [..., m, n] above tol (absolute) or rtol times the largest (default
    max(m, n) eps); a vector's rank is 1 unless it is all zeros."""
    tnp = _tnp()
    M = _inexact(asarray(M))
    if M.ndim < 2:
        return tnp.any(M != 0).astype("i32")
    M = _matrix(M, "matrix_rank")
    s = svd(M, compute_uv=False, hermitian=hermitian)
    if tol is not None:
        if rtol is not None:
            raise ValueError("matrix_rank: give rtol or tol, not both")
        cutoff = tnp.expand_dims(asarray(tol, dtype=s.dtype), -1)
    else:
        if rtol is None:
            rtol = max(M.shape[-2:]) * _eps(M)
        cutoff = tnp.expand_dims(asarray(rtol, dtype=s.dtype), -1) * tnp.max(s, axis=-1, keepdims=True)
    return tnp.sum(s > cutoff, axis=-1).astype("i32")


def lstsq(a, b, rcond=None, *, numpy_resid=False):
    """The least-squares solution x of a x = b (a [m, n], b [m] or [m, k]) from a's SVD, singular values below
    rcond times the largest (default max(m, n) eps) dropped: (x, residuals (the squared norms of b - a x per
    column), rank, singular values). numpy_resid gives an empty residuals array where numpy does (rank < n or
    m <= n)."""
    tnp = _tnp()
    a = _matrix(a, "lstsq")
    b = _inexact(asarray(b))
    if a.ndim != 2 or b.ndim not in (1, 2):
        raise ValueError(f"lstsq: a must be 2-D and b 1-D or 2-D (got shapes {a.shape} and {b.shape})")
    vector = b.ndim == 1
    if vector:
        b = tnp.expand_dims(b, -1)
    if b.shape[0] != a.shape[0]:
        raise ValueError(f"lstsq: a {a.shape} and b {b.shape} must have the same number of rows")
    b = b.astype(a._dtype_name)
    m, n = a.shape
    if a.size == 0:
        s = tnp.zeros((0,), dtype=a._dtype_name)
        rank = asarray(0, dtype="i32")
        x = tnp.zeros((n, b.shape[-1]), dtype=a._dtype_name)
    else:
        if rcond is None:
            rcond = _eps(a) * max(m, n)
        elif rcond < 0:
            rcond = _eps(a)
        u, s, vt = svd(a, full_matrices=False)
        mask = s >= rcond * s[0]
        rank = tnp.sum(mask).astype("i32")
        s_inv = tnp.expand_dims(tnp.where(mask, 1.0 / tnp.where(mask, s, 1.0), 0.0), -1)
        x = tnp.matmul(_mT(vt), s_inv * tnp.matmul(_mT(u), b))
    if numpy_resid and (int(rank) < n or m <= n):
        resid = tnp.zeros((0,), dtype=a._dtype_name)
    else:
        r = b - tnp.matmul(a, x)
        resid = tnp.sum(r * r, axis=0)
    if vector:
        x = tnp.reshape(x, (-1,))
    return x, resid, rank, s


def singular_value_norm(x, ord, axes, keepdims):
    """norm ord 2 (the largest singular value), -2 (the smallest) or 'nuc' (their sum) over the two axes."""
    tnp = _tnp()
    row, col = axes
    rest = [i for i in range(x.ndim) if i not in (row, col)]
    s = svd(_C.transpose(x, rest + [row, col]), compute_uv=False)
    r = tnp.max(s, axis=-1) if ord == 2 else tnp.min(s, axis=-1) if ord == -2 else tnp.sum(s, axis=-1)
    if keepdims:
        for axis in sorted((row, col)):
            r = tnp.expand_dims(r, axis)
    return r


def cond(x, p=None):
    """The condition number of x [..., m, n] in the norm p: None or 2 (the largest singular value over the
    smallest), -2 (its inverse) or 'fro', 'nuc', 1, -1, inf, -inf (norm(x) norm(inv(x)), x square); inf where x
    is singular."""
    tnp = _tnp()
    x = _matrix(x, "cond")
    if p is None or p == 2 or p == -2:
        s = svd(x, compute_uv=False)
        return s[..., 0] / s[..., -1] if p != -2 else s[..., -1] / s[..., 0]
    x = _square(x, "cond")
    r = tnp.linalg.norm(x, ord=p, axis=(-2, -1)) * tnp.linalg.norm(tnp.linalg.inv(x), ord=p, axis=(-2, -1))
    return tnp.where(tnp.isnan(r), _np.inf, r)


def matrix_power(a, n):
    """a [..., m, m] to the integer power n by repeated squaring (the identity for n = 0, powers of inv(a) for
    n < 0)."""
    tnp = _tnp()
    try:
        n = _operator.index(n)
    except TypeError as e:
        raise TypeError(f"matrix_power: n must be an integer, not {type(n).__name__}") from e
    a = asarray(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"matrix_power: a must be square in its last two axes ([..., m, m]), not shape {a.shape}")
    if n == 0:
        return _C.broadcast_to(tnp.eye(a.shape[-1], dtype=a.dtype), list(a.shape))
    if n < 0:
        a, n = tnp.linalg.inv(a), -n
    result = None
    power = a
    while n:
        if n & 1:
            result = power if result is None else tnp.matmul(result, power)
        n >>= 1
        if n:
            power = tnp.matmul(power, power)
    return result
