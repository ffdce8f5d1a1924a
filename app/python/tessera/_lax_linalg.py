"""tessera.lax.linalg (jax.lax.linalg's cholesky, triangular_solve, lu) and tessera.scipy.linalg
(jax.scipy.linalg's solve_triangular, cho_factor, cho_solve) on the linalg ops of
engine/ops/linalg.cpp: f32 and f64, over the last two axes, batched over the leading ones."""

import sys as _sys
import types as _types

import numpy as _np

from . import _tessera as _C

__all__ = ["cholesky", "triangular_solve", "lu"]


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
    """jax.lax.linalg.lu of a square x [..., n, n]: (lu, pivots, permutation) with lu holding L below its unit
    diagonal and U on and above it, pivots int32 [..., n] (row i swapped with row pivots[i], in order) and
    permutation int32 [..., n] with x[..., permutation, :] = L U."""
    return _C.lu(_tnp().asarray(x))


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


def _swap_last(ndim):
    perm = list(range(ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return perm


scipy = _types.ModuleType("tessera.scipy", "jax.scipy's counterparts: tessera.scipy.linalg.")
scipy_linalg = _types.ModuleType("tessera.scipy.linalg", "jax.scipy.linalg: solve_triangular, cho_factor, cho_solve.")
for _f in (solve_triangular, cho_factor, cho_solve):
    setattr(scipy_linalg, _f.__name__, _f)
scipy.linalg = scipy_linalg
_sys.modules[scipy.__name__] = scipy  # import tessera.scipy.linalg works once tessera is imported
_sys.modules[scipy_linalg.__name__] = scipy_linalg
if "tessera" in _sys.modules:
    _sys.modules["tessera"].scipy = scipy
