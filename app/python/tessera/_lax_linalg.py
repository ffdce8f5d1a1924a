"""tessera.lax.linalg (jax.lax.linalg's cholesky, triangular_solve, lu, eigh, svd, qr) and tessera.scipy.linalg
(jax.scipy.linalg's solve_triangular, cho_factor, cho_solve, eigh, svd, qr) on the linalg ops of
engine/ops/linalg.cpp: f32 and f64, over the last two axes, batched over the leading ones."""

import sys as _sys
import types as _types

import numpy as _np

from . import _tessera as _C

__all__ = ["cholesky", "triangular_solve", "lu", "eigh", "svd", "qr"]


def _tnp():
    from . import numpy as tnp
    return tnp


def cholesky(x, *, symmetrize_input=True):
    """jax.lax.linalg.cholesky: the lower factor L of x [..., n, n] (L L^T = x), of (x + x^T) / 2 unless
    symmetrize_input is False (then only x's lower triangle is read). NaNs where x is not positive definite."""
    return _C.cholesky(_tnp().asarray(x), bool(symmetrize_input))


def triangular_solve(a, b, *, left_side=False, lower=False, transpose_a=False, conjugate_a=False,
                     unit_diagonal=False):
    """jax.lax.linalg.triangular_solve: x with op(a) x = b (left_side, b [..., m, n]) or x op(a) = b (b [..., n,
    m]), op(a) = a^T when transpose_a; only a's lower (lower) or upper triangle is read, its diagonal taken as
    ones when unit_diagonal. conjugate_a changes nothing for real arrays."""
    del conjugate_a
    tnp = _tnp()
    return _C.triangular_solve(tnp.asarray(a), tnp.asarray(b), bool(left_side), bool(lower), bool(transpose_a),
                               bool(unit_diagonal))


def lu(x):
    """jax.lax.linalg.lu of x [..., m, n]: (lu, pivots, permutation) with lu holding L below its unit diagonal
    and U on and above it, pivots int32 [..., min(m, n)] (row i swapped with row pivots[i], in order) and
    permutation int32 [..., m] with x[..., permutation, :] = L U."""
    return _C.lu(_tnp().asarray(x))


def _float_matrix(x, name):
    x = _inexact(x)
    if x.ndim < 2:
        raise ValueError(f"{name}: x must have at least two axes ([..., m, n]), not shape {x.shape}")
    return x


def eigh(x, *, lower=True, symmetrize_input=True, sort_eigenvalues=True, subset_by_index=None):
    """jax.lax.linalg.eigh of a symmetric x [..., n, n]: (v, w), eigenvectors in v's columns and the eigenvalues w
    ascending, of (x + x^T) / 2 unless symmetrize_input is False (then only the lower (lower) or upper triangle
    is read)."""
    if subset_by_index is not None:
        raise NotImplementedError("eigh: subset_by_index is not supported; slice the full result")
    del sort_eigenvalues  # always sorted
    x = _float_matrix(x, "eigh")
    if not symmetrize_input and not lower:
        x = _C.transpose(x, _swap_last(x.ndim))
    return _C.eigh(x, bool(symmetrize_input))


def svd(x, *, full_matrices=True, compute_uv=True, subset_by_index=None, algorithm=None):
    """jax.lax.linalg.svd of x [..., m, n]: (u, s, vh) with x = u diag(s) vh, s descending (s alone without
    compute_uv); u [..., m, m] and vh [..., n, n] with full_matrices, else [..., m, k] and [..., k, n]."""
    if subset_by_index is not None:
        raise NotImplementedError("svd: subset_by_index is not supported; slice the full result")
    del algorithm  # LAPACK's divide and conquer
    return _C.svd(_float_matrix(x, "svd"), bool(full_matrices), bool(compute_uv))


def qr(x, *, pivoting=False, full_matrices=True, use_magma=None):
    """jax.lax.linalg.qr of x [..., m, n]: (q, r) with x = q r, q [..., m, m] and r [..., m, n] with full_matrices,
    else [..., m, k] and [..., k, n]; with pivoting (q, r, p), x[..., p] = q r, p int32 [..., n] the column
    order of LAPACK's ?geqp3 (column_pivots)."""
    del use_magma
    x = _float_matrix(x, "qr")
    if not pivoting:
        return _C.qr(x, bool(full_matrices))
    p = column_pivots(x)
    q, r = _C.qr(_tnp().take_along_axis(x, _tnp().expand_dims(p, -2), axis=-1), bool(full_matrices))
    return q, r, p


def column_pivots(x):
    """The column order of the QR decomposition with column pivoting of x [..., m, n] (LAPACK's ?geqp3): int32
    [..., n]. Step j (of min(m, n)) brings the column of largest norm below row j - 1 (the first of equal ones)
    to position j, then applies that column's Householder reflector to the columns right of it, so the next
    norms are those of the part not yet factored; a column's Q and R are then the unpivoted QR of x[..., p] (the
    same reflectors). ?geqp3 downdates the norms instead of recomputing them: the same order unless two norms
    agree to rounding. Written with masks in a fori_loop, on x without its gradient (p is an integer)."""
    from . import lax as _lax
    from ._np_decompositions import _scaled_norm
    tnp = _tnp()
    x = _lax.stop_gradient(x)
    m, n = x.shape[-2:]
    batch = tuple(x.shape[:-2])
    perm = tnp.broadcast_to(tnp.arange(n, dtype="i32"), batch + (n,))
    if min(m, n) == 0:
        return perm
    rows = tnp.arange(m, dtype="i32")[:, None]  # [m, 1]
    cols = tnp.arange(n, dtype="i32")  # [n]
    zero = tnp.asarray(0.0, dtype=x._dtype_name)

    def step(j, carry):
        r, perm = carry  # [..., m, n], [..., n]
        norms = _scaled_norm(_C.transpose(tnp.where(rows >= j, r, zero), _swap_last(r.ndim)))[..., 0]  # [..., n]
        p = tnp.argmax(tnp.where(cols >= j, norms, -1.0), axis=-1).astype("i32")[..., None]  # [..., 1]
        swap = tnp.where(cols == j, p, tnp.where(cols == p, j, cols)).astype("i32")  # [..., n]
        r = tnp.take_along_axis(r, tnp.broadcast_to(tnp.expand_dims(swap, -2), tuple(r.shape)), axis=-1)
        perm = tnp.take_along_axis(perm, swap, axis=-1)
        # ?larfg's reflector of column j below row j - 1, applied to the columns right of it (as in qr's 'raw').
        col = tnp.sum(tnp.where(cols == j, r, zero), axis=-1)  # [..., m]
        rows1 = rows[:, 0]
        alpha = tnp.sum(tnp.where(rows1 == j, col, zero), axis=-1, keepdims=True)
        below = tnp.where(rows1 > j, col, zero)
        xnorm = _scaled_norm(below)
        reflect = xnorm > 0
        norm = tnp.sqrt(alpha * alpha + xnorm * xnorm)
        beta = tnp.where(alpha >= 0, -norm, norm)
        tau = tnp.where(reflect, (beta - alpha) / tnp.where(reflect, beta, 1.0), zero)
        v = tnp.where(rows1 == j, 1.0, below * (1.0 / tnp.where(reflect, alpha - beta, 1.0)))  # [..., m]
        w = tnp.where(cols > j, tau * tnp.sum(tnp.expand_dims(v, -1) * r, axis=-2), zero)  # [..., n]
        return r - tnp.expand_dims(v, -1) * tnp.expand_dims(w, -2), perm

    _, perm = _lax.fori_loop(0, min(m, n), step, (x, perm))
    return perm


# ---- tessera.scipy.linalg ---------------------------------------------------------------------------------


def _inexact(a):
    tnp = _tnp()
    a = tnp.asarray(a)
    return a if a._dtype_name in ("f32", "f64") else _C.astype(a, "f32")


def _as_matrix(b, a):
    """b as [..., n, k]: a vector [n] (or b with one axis less than a) gains a last axis; returns (b, was_vector)."""
    tnp = _tnp()
    b = _inexact(b)
    if b.ndim == 1 or b.ndim == a.ndim - 1:
        return tnp.expand_dims(b, -1), True
    return b, False


def _trans_flag(trans):
    if trans in (0, "N"):
        return False
    if trans in (1, "T", 2, "C"):
        return True
    raise ValueError(f"solve_triangular: trans must be 0, 1, 2, 'N', 'T' or 'C', not {trans!r}")


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False, debug=None,
                     check_finite=True):
    """jax.scipy.linalg.solve_triangular: x with op(a) x = b, a [..., n, n] triangular (lower or upper), b [..., n]
    or [..., n, k]; trans 0/'N' (a), 1/'T' or 2/'C' (a^T)."""
    del overwrite_b, debug, check_finite
    a = _inexact(a)
    b, vector = _as_matrix(b, a)
    if b._dtype_name != a._dtype_name:
        b = _C.astype(b, a._dtype_name)
    x = _C.triangular_solve(a, b, True, bool(lower), _trans_flag(trans), bool(unit_diagonal))
    return _C.squeeze(x, [x.ndim - 1]) if vector else x


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """jax.scipy.linalg.cho_factor: (c, lower), c the Cholesky factor of a (upper, c^T c = a, unless lower:
    c c^T = a); only the triangle it names is read, as scipy."""
    del overwrite_a, check_finite
    a = _inexact(a)
    l = _C.cholesky(a if lower else _C.transpose(a, _swap_last(a.ndim)), False)
    return (l if lower else _C.transpose(l, _swap_last(l.ndim))), lower


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """jax.scipy.linalg.cho_solve: x with a x = b from cho_factor(a)."""
    del overwrite_b, check_finite
    c, lower = c_and_lower
    c = _inexact(c)
    b, vector = _as_matrix(b, c)
    if b._dtype_name != c._dtype_name:
        b = _C.astype(b, c._dtype_name)
    # a = L L^T: L y = b, then L^T x = y; with c = U (a = U^T U): U^T y = b, then U x = y.
    y = _C.triangular_solve(c, b, True, bool(lower), not lower, False)
    x = _C.triangular_solve(c, y, True, bool(lower), bool(lower), False)
    return _C.squeeze(x, [x.ndim - 1]) if vector else x


def scipy_eigh(a, b=None, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False, turbo=True,
               eigvals=None, type=1, check_finite=True, subset_by_index=None, subset_by_value=None, driver=None):
    """jax.scipy.linalg.eigh of a symmetric a [..., n, n]: (w ascending, v) or w alone with eigvals_only; only the
    lower (lower) or upper triangle is read. The generalized problem (b) is not supported."""
    del overwrite_a, overwrite_b, turbo, type, check_finite, driver
    if b is not None or eigvals is not None or subset_by_index is not None or subset_by_value is not None:
        raise NotImplementedError("eigh: b, eigvals and subsets are not supported")
    v, w = eigh(a, lower=lower, symmetrize_input=False)
    return w if eigvals_only else (w, v)


def scipy_svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True, lapack_driver="gesdd"):
    """jax.scipy.linalg.svd: (U, s, Vh) of a [..., m, n], or s alone without compute_uv."""
    del overwrite_a, check_finite, lapack_driver
    return svd(a, full_matrices=full_matrices, compute_uv=compute_uv)


def scipy_qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    """jax.scipy.linalg.qr: (Q, R) of a [..., m, n], mode 'full' (Q [m, m]) or 'economic' (Q [m, k]); 'r' gives
    (R,) as scipy; pivoting adds P (int32 [..., n], a[..., P] = Q R): (Q, R, P), or (R, P) for 'r'."""
    del overwrite_a, lwork, check_finite
    if mode not in ("full", "economic", "r"):
        raise ValueError(f"qr: mode must be 'full', 'economic' or 'r', not {mode!r}")
    q, r, *p = qr(a, pivoting=pivoting, full_matrices=mode != "economic")
    return (r, *p) if mode == "r" else (q, r, *p)


def scipy_lu(a, permute_l=False, overwrite_a=False, check_finite=True):
    """jax.scipy.linalg.lu of a [..., m, n]: (p, l, u) with a = p l u, p a permutation matrix [..., m, m], l [...,
    m, k] unit lower triangular, u [..., k, n] upper triangular (k = min(m, n)); (p l, u) with permute_l."""
    del overwrite_a, check_finite
    tnp = _tnp()
    a = _inexact(a)
    m, n = a.shape[-2:]
    k = min(m, n)
    lu_, _, perm = _C.lu(a)
    l = tnp.tril(lu_[..., :, :k], -1) + tnp.eye(m, k, dtype=a._dtype_name)
    u = tnp.triu(lu_[..., :k, :])
    # a[perm] = l u, so a = p l u with p[r, c] = 1 where r = perm[c].
    p = (tnp.expand_dims(perm, -2) == tnp.expand_dims(tnp.arange(m, dtype="i32"), -1)).astype(a._dtype_name)
    return (tnp.matmul(p, l), u) if permute_l else (p, l, u)


def lu_factor(a, overwrite_a=False, check_finite=True):
    """jax.scipy.linalg.lu_factor of a [..., m, n]: (lu, piv), piv int32 [..., min(m, n)] LAPACK's row swaps."""
    del overwrite_a, check_finite
    lu_, pivots, _ = _C.lu(_inexact(a))
    return lu_, pivots


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """jax.scipy.linalg.lu_solve: x with a x = b (trans 0) or a^T x = b (1 or 2) from lu_factor(a), a square."""
    del overwrite_b, check_finite
    tnp = _tnp()
    lu_, pivots = lu_and_piv
    lu_ = _inexact(lu_)
    n = lu_.shape[-1]
    if lu_.ndim < 2 or lu_.shape[-2] != n:
        raise ValueError(f"lu_solve: lu must be square ([..., n, n]), not shape {lu_.shape}")
    transpose = _trans_flag(trans)
    b, vector = _as_matrix(b, lu_)
    if b._dtype_name != lu_._dtype_name:
        b = _C.astype(b, lu_._dtype_name)
    # The permutation of the swaps, applied in order to 0..n-1 (JAX's lu_pivots_to_permutation; one select per
    # swap, traced once under jit).
    perm = tnp.broadcast_to(tnp.arange(n, dtype="i32"), tuple(pivots.shape))
    for i in range(pivots.shape[-1]):
        pi = pivots[..., i:i + 1]
        row_i, row_p = perm[..., i:i + 1], tnp.take_along_axis(perm, pi, axis=-1)
        perm = tnp.where(tnp.arange(n, dtype="i32") == i, row_p, tnp.where(tnp.arange(n, dtype="i32") == pi, row_i, perm))
    if not transpose:  # L U x = P b
        pb = tnp.take_along_axis(b, tnp.expand_dims(perm, -1), axis=-2)
        y = _C.triangular_solve(lu_, pb, True, True, False, True)
        x = _C.triangular_solve(lu_, y, True, False, False, False)
    else:  # U^T L^T (P x) = b
        y = _C.triangular_solve(lu_, b, True, False, True, False)
        z = _C.triangular_solve(lu_, y, True, True, True, True)
        inverse = tnp.argsort(perm, axis=-1).astype("i32")
        x = tnp.take_along_axis(z, tnp.expand_dims(inverse, -1), axis=-2)
    return _C.squeeze(x, [x.ndim - 1]) if vector else x


def _swap_last(ndim):
    perm = list(range(ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return perm


scipy = _types.ModuleType("tessera.scipy", "jax.scipy's counterparts: tessera.scipy.linalg.")
scipy_linalg = _types.ModuleType("tessera.scipy.linalg",
                                 "jax.scipy.linalg: solve_triangular, cho_factor, cho_solve, eigh, svd, qr, lu, "
                                 "lu_factor, lu_solve.")
for _f in (solve_triangular, cho_factor, cho_solve):
    setattr(scipy_linalg, _f.__name__, _f)
for _name, _f in (("eigh", scipy_eigh), ("svd", scipy_svd), ("qr", scipy_qr), ("lu", scipy_lu),
                 ("lu_factor", lu_factor), ("lu_solve", lu_solve)):
    _f.__name__ = _f.__qualname__ = _name
    setattr(scipy_linalg, _name, _f)
scipy.linalg = scipy_linalg
_sys.modules[scipy.__name__] = scipy  # import tessera.scipy.linalg works once tessera is imported
_sys.modules[scipy_linalg.__name__] = scipy_linalg
if "tessera" in _sys.modules:
    _sys.modules["tessera"].scipy = scipy
