"""tessera.scipy.linalg's compositions beyond _lax_linalg's factorisations, as jax.scipy.linalg writes them:
cholesky, det, inv, solve, block_diag, qr_multiply, hessenberg, schur (real), polar, eigh_tridiagonal, expm_frechet
and solve_sylvester. Each is written with tessera.numpy, tessera.lax and the linalg ops, so it traces under jit,
batches under vmap and (where the decompositions' rules allow) differentiates. The special matrices (toeplitz,
hankel, pascal, ...) are in _scipy_linalg_special. What needs complex arithmetic (schur's complex output, sqrtm,
funm, rsf2csf, dft) is not here: tessera has no complex dtypes."""

import functools as _functools
import operator as _operator

import numpy as _np

from . import _tessera as _C
from . import lax as _lax
from . import numpy as _tnp
from ._np_decompositions import _scaled_norm
from ._lax_linalg import qr as _lax_qr
from ._np_linalg import _batched, _mT, _square


def _float(x):
    """x as float32 or float64 (integers, bools, float16 and bfloat16 as float32)."""
    x = _tnp.asarray(x)
    return x if x._dtype_name in ("f32", "f64") else _C.astype(x, "f32")


def _promote(*xs):
    """The arrays as one float dtype: float64 where any is, else float32."""
    xs = [_float(x) for x in xs]
    dtype = "f64" if any(x._dtype_name == "f64" for x in xs) else "f32"
    return [x if x._dtype_name == dtype else _C.astype(x, dtype) for x in xs]


# ---- factorisations and solves ----------------------------------------------------------------------------


def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """scipy's Cholesky factor of a symmetric positive definite a [..., n, n]: upper by default (U^T U = a,
    reading a's upper triangle), lower with lower=True (L L^T = a, reading the lower one). NaNs where a is not
    positive definite, as JAX."""
    del overwrite_a, check_finite
    a = _square(a, "cholesky")
    l = _C.cholesky(a if lower else _mT(a), False)
    return l if lower else _mT(l)


def det(a, overwrite_a=False, check_finite=True):
    """The determinant of a [..., n, n] (jax.numpy.linalg.det)."""
    del overwrite_a, check_finite
    return _tnp.linalg.det(a)


def inv(a, overwrite_a=False, check_finite=True):
    """The inverse of a [..., n, n] (jax.numpy.linalg.inv)."""
    del overwrite_a, check_finite
    return _tnp.linalg.inv(a)


_ASSUME_A = ["gen", "sym", "her", "pos"]


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, debug=False, check_finite=True,
          assume_a="gen"):
    """x with a x = b (b [..., n] or [..., n, k], leading axes broadcast). assume_a 'gen', 'sym', 'her': LU with
    partial pivoting; 'pos': a Cholesky factorisation of the triangle lower names, inside custom_linear_solve as
    JAX, so the gradient with respect to a is -x^T ct over the whole matrix and the factor is not differentiated."""
    del overwrite_a, overwrite_b, debug, check_finite
    if assume_a not in _ASSUME_A:
        raise ValueError(f"Expected assume_a to be one of {_ASSUME_A}; got {assume_a!r}")
    if assume_a != "pos":
        return _tnp.linalg.solve(a, b)
    a = _square(a, "solve")
    b = _tnp.asarray(b)
    vector = b.ndim == 1 or b.ndim == a.ndim - 1
    if vector:
        b = _tnp.expand_dims(b, -1)
    if b.ndim < 2 or b.shape[-2] != a.shape[-1]:
        raise ValueError(f"solve: b's shape {tuple(b.shape)} does not fit a of shape {a.shape}")
    a, b = _promote(a, b)
    a, b = _batched(a, b, "solve")
    from ._lax_linalg import cho_factor, cho_solve
    factors = cho_factor(_lax.stop_gradient(a), lower=lower)
    x = _lax.custom_linear_solve(lambda x: _tnp.matmul(a, x), b, solve=lambda _, x: cho_solve(factors, x),
                                 symmetric=True)
    return _C.squeeze(x, [x.ndim - 1]) if vector else x


def block_diag(*arrs):
    """The block-diagonal matrix of arrs (each a scalar, a row [n] or a matrix [m, n]), in one dtype; of no
    arrays a [1, 0] matrix, as scipy."""
    if len(arrs) == 0:
        arrs = (_tnp.zeros((1, 0)),)
    arrs = [_tnp.asarray(a) for a in arrs]
    bad = [i for i, a in enumerate(arrs) if a.ndim > 2]
    if bad:
        raise ValueError("Arguments to jax.scipy.linalg.block_diag must have at most 2 dimensions, got "
                         f"{arrs[bad[0]]} at argument {bad[0]}.")
    dtype = _tnp.result_type(*arrs)
    arrs = [_tnp.atleast_2d(a).astype(dtype) for a in arrs]
    total = sum(a.shape[1] for a in arrs)
    rows, col = [], 0
    for a in arrs:
        rows.append(_tnp.pad(a, ((0, 0), (col, total - col - a.shape[1]))))
        col += a.shape[1]
    return _tnp.concatenate(rows, axis=0)


def qr_multiply(a, c, mode="right", pivoting=False, conjugate=False, overwrite_a=False, overwrite_c=False):
    """The QR decomposition a = Q R of a [..., m, n] (k = min(m, n)) and Q's product with c: mode 'right' gives
    (c Q [..., p, k], R [..., k, n]) for c [..., p, m]; 'left' (Q c [..., m, p], R) for c [..., k, p]. A 1-D c is a
    row ('right') or a column ('left') and the product is flattened. Q is the reduced factor of the qr op (Q's
    columns beyond k meet only the zero rows JAX pads c with, or are cut off), so the values are JAX's. pivoting:
    of a[..., P], P the column order of ?geqp3, returned third: (c Q, R, P). conjugate changes nothing for real
    arrays."""
    del overwrite_a, overwrite_c, conjugate
    a, c = _promote(a, c)
    if mode not in ("right", "left"):
        raise ValueError(f"mode must be 'right' or 'left', got {mode!r}")
    if a.ndim < 2:
        raise ValueError(f"qr_multiply: a must have at least two axes ([..., m, n]), not shape {a.shape}")
    onedim = c.ndim == 1
    if onedim:
        c = _tnp.expand_dims(c, -1 if mode == "left" else 0)
    m, n = a.shape[-2:]
    k = min(m, n)
    if mode == "left" and c.shape[-2] != k:
        raise ValueError(f"Array shapes are not compatible for Q @ c operation: a has shape {tuple(a.shape)} so Q "
                         f"has {k} columns, but c has {c.shape[-2]} rows (expected {k}).")
    if mode == "right" and c.shape[-1] != m:
        raise ValueError(f"Array shapes are not compatible for c @ Q operation: a has shape {tuple(a.shape)} so Q "
                         f"has {m} rows, but c has {c.shape[-1]} columns (expected {m}).")
    batch = tuple(_np.broadcast_shapes(tuple(a.shape[:-2]), tuple(c.shape[:-2])))
    a = _tnp.broadcast_to(a, batch + tuple(a.shape[-2:]))
    c = _tnp.broadcast_to(c, batch + tuple(c.shape[-2:]))
    q, r, *p = _lax_qr(a, pivoting=pivoting, full_matrices=False)  # q [..., m, k], r [..., k, n]
    cq = _tnp.matmul(q, c) if mode == "left" else _tnp.matmul(c, q)
    return ((_tnp.ravel(cq) if onedim else cq), r, *p)


def hessenberg(a, *, calc_q=False, overwrite_a=False, check_finite=True):
    """The Hessenberg form H of a [..., n, n] (zero below the first subdiagonal) with a = Q H Q^T, by LAPACK's
    ?gehd2 written with array ops: one fori_loop step per Householder reflector, so H and Q (with calc_q) are
    those of scipy and JAX, signs included. Step j reflects column j below row j + 1 (?larfg: alpha = h[j + 1, j],
    x = h[j + 2:, j], beta = -sign(alpha) |(alpha, x)|, tau = (beta - alpha) / beta, v = (1, x / (alpha - beta));
    nothing where x is zero) and applies P = I - tau v v^T on both sides, h = P h P, q = q P. Columns and rows
    are picked by masks, so one traced body serves every j and every batch."""
    del overwrite_a, check_finite
    a = _square(a, "hessenberg")
    n = a.shape[-1]
    dtype = a._dtype_name
    eye = _tnp.broadcast_to(_tnp.eye(n, dtype=dtype), tuple(a.shape))
    if n <= 2:
        if n == 0:
            return (_tnp.zeros_like(a), _tnp.zeros_like(a)) if calc_q else _tnp.zeros_like(a)
        return (a, eye) if calc_q else a
    rows = _tnp.arange(n, dtype="i32")
    zero = _tnp.asarray(0.0, dtype=dtype)

    def step(j, carry):
        h, q = carry  # [..., n, n] each
        col = _tnp.sum(_tnp.where(rows == j, h, zero), axis=-1)  # column j: [..., n]
        alpha = _tnp.sum(_tnp.where(rows == j + 1, col, zero), axis=-1, keepdims=True)  # [..., 1]
        x = _tnp.where(rows > j + 1, col, zero)
        xnorm = _scaled_norm(x)
        reflect = xnorm > 0
        big = _tnp.maximum(_tnp.abs(alpha), xnorm)
        small = _tnp.minimum(_tnp.abs(alpha), xnorm)
        norm = big * _tnp.sqrt(1.0 + _tnp.square(small / _tnp.where(reflect, big, 1.0)))
        beta = _tnp.where(alpha >= 0, -norm, norm)
        tau = _tnp.where(reflect, (beta - alpha) / _tnp.where(reflect, beta, 1.0), zero)  # [..., 1]
        v = _tnp.where(rows == j + 1, 1.0, x * (1.0 / _tnp.where(reflect, alpha - beta, 1.0)))  # [..., n]
        tv = _tnp.expand_dims(tau * v, -1)  # [..., n, 1]
        vt = _tnp.expand_dims(v, -2)  # [..., 1, n]
        h = h - tv * _tnp.matmul(vt, h)  # P h
        h = h - _tnp.matmul(h, _mT(vt)) * _mT(tv)  # (P h) P
        q = q - _tnp.matmul(q, _mT(vt)) * _mT(tv)
        return h, q

    h, q = _lax.fori_loop(0, n - 2, step, (a, eye))
    h = _tnp.triu(h, -1)
    return (h, q) if calc_q else h


def polar(a, side="right", *, method="qdwh", eps=None, max_iterations=None):
    """The polar decomposition of a [..., m, n]: (u, p) with a = u p (side 'right', p [..., n, n]) or a = p u
    ('left', p [..., m, m]), u with orthonormal columns (rows) and p symmetric positive semidefinite. Both
    methods are computed from the SVD a = U S Vh: u = U Vh, p = V S Vh (right) or U S U^T (left); 'qdwh' accepts
    the shapes JAX's QDWH iteration does (m >= n for 'right', m < n for 'left'), whose result is the same
    decomposition. eps and max_iterations are accepted and change nothing."""
    del eps, max_iterations
    a = _tnp.asarray(a)
    if a.ndim < 2:
        raise ValueError("The input `a` must be at least a 2-D array.")
    if side not in ("right", "left"):
        raise ValueError("The argument `side` must be either 'right' or 'left'.")
    m, n = a.shape[-2:]
    if method == "qdwh":
        if not ((m >= n and side == "right") or (m < n and side == "left")):
            raise NotImplementedError("method='qdwh' only supports mxn matrices where m < n where side='right' and "
                                      f"m >= n side='left', got {tuple(a.shape[-2:])} with side={side!r}")
    elif method != "svd":
        raise ValueError(f"Unknown polar decomposition method {method}.")
    u, s, vh = _tnp.linalg.svd(_float(a), full_matrices=False)
    unitary = _tnp.matmul(u, vh)
    if side == "right":
        posdef = _tnp.matmul(_mT(vh) * _tnp.expand_dims(s, -2), vh)
    else:
        posdef = _tnp.matmul(u * _tnp.expand_dims(s, -2), _mT(u))
    return unitary, posdef


def eigh_tridiagonal(d, e, *, eigvals_only=False, select="a", select_range=None, tol=None, key=None):
    """The eigenvalues (ascending) and, unless eigvals_only, the eigenvectors (in the columns) of the symmetric
    tridiagonal matrix with diagonal d [n] and off-diagonal e [n - 1], by the eigh op on the assembled matrix
    (LAPACK's ?syevd; JAX bisects for the values and inverse-iterates for the vectors: the same values, vectors
    up to sign). select 'a' (all) or 'i' (indices select_range[0] to select_range[1], inclusive); 'v' is not
    implemented, as JAX. tol and key are accepted and change nothing."""
    del tol, key
    d, e = _tnp.asarray(d), _tnp.asarray(e)
    if d.dtype != e.dtype:
        raise TypeError(f"diagonal and off-diagonal values must have same dtype, got {d.dtype} and {e.dtype}")
    if d._dtype_name not in ("f32", "f64"):
        raise TypeError("Only float32 and float64 inputs are supported as inputs to "
                        f"jax.scipy.linalg.eigh_tridiagonal, got {d.dtype} and {e.dtype}")
    if d.ndim != 1 or e.ndim != 1 or e.shape[0] != max(d.shape[0] - 1, 0):
        raise ValueError(f"eigh_tridiagonal: d [n] and e [n - 1] are expected; got shapes {d.shape} and {e.shape}")
    n = d.shape[0]
    if select == "a":
        lo, hi = 0, n - 1
    elif select == "i":
        if select_range is None:
            raise ValueError("for select='i', select_range must be specified.")
        if select_range[0] > select_range[1]:
            raise ValueError("Got empty index range in select_range.")
        lo, hi = _operator.index(select_range[0]), _operator.index(select_range[1])
    elif select == "v":
        raise NotImplementedError("eigh_tridiagonal(..., select='v') is not implemented")
    else:
        raise ValueError("'select must have a value in {'a', 'i', 'v'}.")
    if n <= 1:
        return d if eigvals_only else (d, _tnp.eye(n, dtype=d.dtype))
    t = _tnp.diag(d) + _tnp.diag(e, 1) + _tnp.diag(e, -1)
    v, w = _C.eigh(t, True)
    w, v = w[lo:hi + 1], v[:, lo:hi + 1]
    return w if eigvals_only else (w, v)


def expm_frechet(A, E, *, method=None, compute_expm=True):
    """The Frechet derivative of the matrix exponential at A [..., n, n] in the direction E (same shape): expm's
    forward-mode derivative (jvp), as JAX; (expm(A), the derivative) with compute_expm, else the derivative.
    method is accepted and changes nothing."""
    del method
    from ._derivatives import jvp
    A, E = _tnp.asarray(A), _tnp.asarray(E)
    if A.ndim < 2 or A.shape[-2] != A.shape[-1]:
        raise ValueError(f"expected A to be a (batched) square matrix, got A.shape={tuple(A.shape)}")
    if E.ndim < 2 or E.shape[-2] != E.shape[-1]:
        raise ValueError(f"expected E to be a (batched) square matrix, got E.shape={tuple(E.shape)}")
    if tuple(A.shape) != tuple(E.shape):
        raise ValueError(f"expected A and E to be the same shape, got A.shape={tuple(A.shape)} "
                         f"E.shape={tuple(E.shape)}")
    A, E = _promote(A, E)
    from ._scipy import expm
    expm_a, frechet = jvp(_functools.partial(expm, upper_triangular=False, max_squarings=16), (A,), (E,))
    return (expm_a, frechet) if compute_expm else frechet


def solve_sylvester(A, B, C, *, method="schur", tol=1e-8):
    """X with A X + X B = C (A [..., m, m], B [..., n, n], C [..., m, n], batch dims broadcast), by Bartels and
    Stewart's method on A's real Schur form (JAX uses both matrices' complex Schur forms, which tessera lacks):
    A = U R U^T turns the equation into R Y + Y B = U^T C with X = U Y, solved from the last row of Y up, one
    [n, n] solve per 1x1 block of R and one [2n, 2n] solve per 2x2 block, O(m n^3) work. NaNs where some
    eigenvalue sum |lambda_i(A) + mu_j(B)| is below tol, as JAX. The solve runs inside custom_linear_solve with
    the transposed equation A^T Y + Y B^T = W for the backward pass, so X differentiates in A, B and C (JAX's
    does not: schur has no derivative). method 'schur' or 'eigen' picks nothing else."""
    if method not in ("schur", "eigen"):
        raise ValueError(f"Unrecognized method {method}. The two valid methods are either \"schur\" or \"eigen\".")
    A, B, C = _promote(A, B, C)
    if C.ndim < 2 or A.ndim < 2 or B.ndim < 2:
        raise ValueError(f"Incompatible shapes for Sylvester equation:\nA: {A.shape}\nB: {B.shape}\nC: {C.shape}")
    m, n = C.shape[-2:]
    if tuple(A.shape[-2:]) != (m, m) or tuple(B.shape[-2:]) != (n, n):
        raise ValueError(f"Incompatible shapes for Sylvester equation:\nA: {A.shape}\nB: {B.shape}\nC: {C.shape}")
    batch = tuple(_np.broadcast_shapes(tuple(A.shape[:-2]), tuple(B.shape[:-2]), tuple(C.shape[:-2])))
    if m == 0 or n == 0:
        return _tnp.zeros(batch + (m, n), dtype=C.dtype)
    A = _tnp.broadcast_to(A, batch + (m, m))
    B = _tnp.broadcast_to(B, batch + (n, n))
    C = _tnp.broadcast_to(C, batch + (m, n))
    a, b = _lax.stop_gradient(A), _lax.stop_gradient(B)
    x = _lax.custom_linear_solve(
        lambda x: _tnp.matmul(A, x) + _tnp.matmul(x, B), C,
        solve=lambda _, c: _bartels_stewart(a, b, c),
        transpose_solve=lambda _, c: _bartels_stewart(_mT(a), _mT(b), c))
    # JAX's test: NaNs where some |lambda_i(A) + mu_j(B)| < tol, the eigenvalues (re, im) from real Schur forms.
    re_a, im_a = _schur_eigenvalues(a)
    re_b, im_b = _schur_eigenvalues(b)
    gap = _tnp.hypot(re_a[..., :, None] + re_b[..., None, :], im_a[..., :, None] + im_b[..., None, :])
    singular = _tnp.any(gap < tol, axis=(-2, -1))
    return _tnp.where(singular[..., None, None], _np.nan, x)


def _bartels_stewart(a, b, c):
    """Y with R Y + Y B = U^T C for a = U R U^T (real Schur), returned as X = U Y [..., m, n]. Row i of Y (a
    1x1 block of R): (B^T + r_ii) y_i = f_i - sum_{k > i} r_ik y_k; rows i, i + 1 (a 2x2 block) together:
    [[B^T + r_ii, r_i,i+1], [r_i+1,i, B^T + r_i+1,i+1]] (y_i, y_i+1) = (f_i, f_i+1) - the rows below. One traced
    step per row from the bottom, the blocks told apart by R's subdiagonal: a block's lower row is skipped and
    solved with its upper one, a 1x1 row's system leaves the next row as it is (identity block). Y and R carry
    one zero row (and column) more, so row i + 1 always exists."""
    m, n = c.shape[-2:]
    batch = tuple(c.shape[:-2])
    dtype = c._dtype_name
    r, u = schur(a)
    pad_rows = [(0, 0)] * len(batch)
    r = _tnp.pad(r, pad_rows + [(0, 1), (0, 1)])  # [..., m + 1, m + 1]
    f = _tnp.pad(_tnp.matmul(_mT(u), c), pad_rows + [(0, 1), (0, 0)])  # [..., m + 1, n]
    rows = _tnp.arange(m + 1, dtype="i32")
    bt = _mT(b)
    eye = _tnp.eye(n, dtype=dtype)
    zeros_n = _tnp.zeros(batch + (n, n), dtype=dtype)

    def row_of(x, i):  # x[..., i, :] for a traced i
        return _tnp.sum(_tnp.where((rows == i)[:, None], x, 0.0), axis=-2)

    def step(s, y):
        i = m - 1 - s
        ii = _tnp.full(batch, i, dtype="i32")
        r_ii, r_ij = _entry(r, ii, ii), _entry(r, ii, ii + 1)
        r_ji, r_jj = _entry(r, ii + 1, ii), _entry(r, ii + 1, ii + 1)
        upper = r_ji != 0  # rows i, i + 1 are a 2x2 block
        lower = _entry(r, ii, ii - 1) != 0  # row i is a block's second row: solved with row i - 1
        y_i, y_j = row_of(y, i), row_of(y, i + 1)
        rhs_i = row_of(f, i) - _tnp.matmul(row_of(r, i)[..., None, :], y)[..., 0, :]
        rhs_j = row_of(f, i + 1) - _tnp.matmul(row_of(r, i + 1)[..., None, :], y)[..., 0, :]
        up = upper[..., None, None]
        top_left = bt + r_ii[..., None, None] * eye
        top_right = _tnp.where(up, r_ij[..., None, None] * eye, zeros_n)
        bottom_left = _tnp.where(up, r_ji[..., None, None] * eye, zeros_n)
        bottom_right = _tnp.where(up, bt + r_jj[..., None, None] * eye, eye)
        system = _tnp.concatenate([_tnp.concatenate([top_left, top_right], -1),
                                   _tnp.concatenate([bottom_left, bottom_right], -1)], -2)  # [..., 2n, 2n]
        skip = lower[..., None, None]
        system = _tnp.where(skip, _tnp.eye(2 * n, dtype=dtype), system)
        rhs = _tnp.concatenate([_tnp.where(lower[..., None], y_i, rhs_i),
                                _tnp.where(upper[..., None], rhs_j, y_j)], -1)  # [..., 2n]
        sol = _tnp.linalg.solve(system, rhs[..., None])[..., 0]
        return _tnp.where((rows == i)[:, None], sol[..., None, :n],
                          _tnp.where((rows == i + 1)[:, None], sol[..., None, n:], y))

    y = _lax.fori_loop(0, m, step, _tnp.zeros(batch + (m + 1, n), dtype=dtype))
    return _tnp.matmul(u, y[..., :m, :])


def _schur_eigenvalues(a):
    """The eigenvalues of a [..., n, n] as (real parts, imaginary parts) [..., n], from its real Schur form: a
    2x2 block [[p, q], [r, p]] at i holds p +- sqrt(-q r) i."""
    t, _ = schur(a)
    n = t.shape[-1]
    if n == 1:
        return t[..., 0], _tnp.zeros_like(t[..., 0])
    sub, sup = _tnp.diagonal(t, -1, -2, -1), _tnp.diagonal(t, 1, -2, -1)  # [..., n - 1]
    im = _tnp.where(sub != 0, _tnp.sqrt(_tnp.abs(sub * sup)), 0.0)  # the block starting at i: +, at i + 1: -
    pad = _tnp.zeros(tuple(t.shape[:-2]) + (1,), dtype=t.dtype)
    return _tnp.diagonal(t, 0, -2, -1), _tnp.concatenate([im, pad], -1) - _tnp.concatenate([pad, im], -1)


# ---- schur: the real Schur form by Francis's double-shift QR iteration ------------------------------------------


def _entry(h, i, j):
    """h[..., i, j] for index arrays i, j of h's batch shape (0 where out of range): one masked sum, so the
    indices may differ across the batch and change inside a loop."""
    n = h.shape[-1]
    rows = _tnp.arange(n, dtype="i32")[:, None]
    cols = _tnp.arange(n, dtype="i32")[None, :]
    hit = _tnp.logical_and(rows == i[..., None, None], cols == j[..., None, None])
    return _tnp.sum(_tnp.where(hit, h, 0.0), axis=(-2, -1))


def _sign(x):
    """Fortran's sign(1, x): 1 for x >= 0, else -1."""
    return _tnp.where(x >= 0, 1.0, -1.0)


def _francis_sweeps(h, z, max_sweeps):
    """LAPACK's ?lahqr on the Hessenberg h [..., n, n] (z accumulating the transformations): each sweep finds the
    active window [lo, hi] below the last negligible subdiagonal entry (|h[i, i-1]| <= eps (|h[i-1, i-1]| +
    |h[i, i]|), set to zero), deflates it when it is a 1x1 or 2x2 block (hi = lo - 1), else chases the bulge of one
    implicit double shift (the eigenvalues of the window's trailing 2x2; ?lahqr's exceptional shift every tenth
    sweep without a deflation) down the window with 3x3 Householder reflectors applied to the whole h and z. The
    reflectors are masked full-matrix updates, so one traced body serves every window and every batch element."""
    n = h.shape[-1]
    dtype = h._dtype_name
    eps = float(_np.finfo(_np.float32 if dtype == "f32" else _np.float64).eps)
    tiny = _tiny(h)
    rows = _tnp.arange(n, dtype="i32")
    batch = tuple(h.shape[:-2])
    hi0 = _tnp.full(batch, n - 1, dtype="i32")
    its0 = _tnp.zeros(batch, dtype="i32")

    def cond(state):
        _, _, hi, _, sweep = state
        return _tnp.logical_and(sweep < max_sweeps, _tnp.any(hi > 0))

    def body(state):
        h, z, hi, its, sweep = state
        diag = _tnp.diagonal(h, 0, -2, -1)  # [..., n]
        sub = _tnp.concatenate([_tnp.zeros(batch + (1,), dtype=dtype), _tnp.diagonal(h, -1, -2, -1)], -1)
        prev = _tnp.concatenate([_tnp.zeros(batch + (1,), dtype=dtype), diag[..., :-1]], -1)
        negligible = _tnp.logical_or(_tnp.abs(sub) <= eps * (_tnp.abs(prev) + _tnp.abs(diag)),
                                     _tnp.abs(sub) <= tiny)  # [..., n]: h[i, i-1] (i = 0 counts)
        negligible = _tnp.logical_or(negligible, rows == 0)
        on_sub = rows[:, None] == rows[None, :] + 1
        h = _tnp.where(_tnp.logical_and(on_sub, negligible[..., :, None]), 0.0, h)
        lo = _tnp.max(_tnp.where(_tnp.logical_and(negligible, rows <= hi[..., None]), rows, 0), axis=-1)
        lo = lo.astype("i32")
        sweeping = _tnp.logical_and(hi > 0, hi - lo >= 2)
        # The shifts: trace s and determinant t of the window's trailing 2x2 (or the exceptional one).
        h11, h12 = _entry(h, hi - 1, hi - 1), _entry(h, hi - 1, hi)
        h21, h22 = _entry(h, hi, hi - 1), _entry(h, hi, hi)
        w = _tnp.abs(h21) + _tnp.abs(_entry(h, hi - 1, hi - 2))
        exceptional = its % 10 == 9
        e11 = 0.75 * w + h22
        s = _tnp.where(exceptional, 2.0 * e11, h11 + h22)
        t = _tnp.where(exceptional, e11 * e11 + 0.4375 * w * w, h11 * h22 - h12 * h21)
        # The first column of (h - s1)(h - s2) = h^2 - s h + t in the window: three entries.
        a00, a01, a10 = _entry(h, lo, lo), _entry(h, lo, lo + 1), _entry(h, lo + 1, lo)
        a11, a21 = _entry(h, lo + 1, lo + 1), _entry(h, lo + 2, lo + 1)
        first = (a00 * a00 + a01 * a10 - s * a00 + t, a10 * (a00 + a11 - s), a10 * a21)

        def chase(k, carry):
            h, z = carry
            active = _tnp.logical_and(sweeping, _tnp.logical_and(k >= lo, k <= hi - 1))
            at_lo = k == lo
            kk = _tnp.full(batch, k, dtype="i32")
            x0 = _tnp.where(at_lo, first[0], _entry(h, kk, kk - 1))
            x1 = _tnp.where(at_lo, first[1], _entry(h, kk + 1, kk - 1))
            x2 = _tnp.where(k + 2 <= hi, _tnp.where(at_lo, first[2], _entry(h, kk + 2, kk - 1)), 0.0)
            scale = _tnp.maximum(_tnp.maximum(_tnp.abs(x0), _tnp.abs(x1)), _tnp.abs(x2))
            reflect = _tnp.logical_and(active, _tnp.abs(x1) + _tnp.abs(x2) > 0)
            safe = _tnp.where(reflect, scale, 1.0)
            x0, x1, x2 = x0 / safe, x1 / safe, x2 / safe
            beta = -_sign(x0) * _tnp.sqrt(x0 * x0 + x1 * x1 + x2 * x2)
            tau = _tnp.where(reflect, (beta - x0) / _tnp.where(reflect, beta, 1.0), 0.0)
            denom = _tnp.where(reflect, x0 - beta, 1.0)
            v = _tnp.where(rows == k, 1.0, _tnp.where(rows == k + 1, (x1 / denom)[..., None],
                                                      _tnp.where(rows == k + 2, (x2 / denom)[..., None], 0.0)))
            tv = (tau[..., None] * v)[..., :, None]  # [..., n, 1]
            vt = v[..., None, :]  # [..., 1, n]
            h = h - tv * _tnp.matmul(vt, h)
            h = h - _tnp.matmul(h, _mT(vt)) * _mT(tv)
            z = z - _tnp.matmul(z, _mT(vt)) * _mT(tv)
            return h, z

        h, z = _lax.fori_loop(0, n - 1, chase, (h, z))
        h = _tnp.triu(h, -1)  # the bulge's rounding-level remains below the subdiagonal
        deflate = _tnp.logical_and(hi > 0, hi - lo <= 1)
        hi = _tnp.where(deflate, lo - 1, hi).astype("i32")
        its = _tnp.where(deflate, 0, its + 1).astype("i32")
        return h, z, hi, its, sweep + 1

    h, z, hi, _, _ = _lax.while_loop(cond, body, (h, z, hi0, its0, _tnp.asarray(0, dtype="i32")))
    return h, z, hi


def _standardize_blocks(h, z):
    """LAPACK's ?lanv2 on each 2x2 diagonal block of the quasi-triangular h (z accumulating): a rotation that
    makes a block with real eigenvalues upper triangular, and one with complex eigenvalues standard (equal
    diagonal entries, off-diagonal ones of opposite signs)."""
    n = h.shape[-1]
    dtype = h._dtype_name
    eps = float(_np.finfo(_np.float32 if dtype == "f32" else _np.float64).eps)
    batch = tuple(h.shape[:-2])
    rows = _tnp.arange(n, dtype="i32")

    def step(i, carry):
        h, z = carry
        ii = _tnp.full(batch, i, dtype="i32")
        a, b = _entry(h, ii, ii), _entry(h, ii, ii + 1)
        c, d = _entry(h, ii + 1, ii), _entry(h, ii + 1, ii + 1)
        block = c != 0
        temp = a - d
        p = 0.5 * temp
        bcmax = _tnp.maximum(_tnp.abs(b), _tnp.abs(c))
        bcmis = _tnp.minimum(_tnp.abs(b), _tnp.abs(c)) * _sign(b) * _sign(c)
        scale = _tnp.maximum(_tnp.maximum(_tnp.abs(p), bcmax), _tiny(h))
        zz = p / scale * p + bcmax / scale * bcmis
        real = zz >= 4.0 * eps
        # Real eigenvalues: one rotation to upper triangular form.
        zr = p + _sign(p) * _tnp.sqrt(scale) * _tnp.sqrt(_tnp.maximum(zz, 0.0))
        taur = _tnp.sqrt(c * c + zr * zr)
        cs_r, sn_r = zr / _tnp.where(taur > 0, taur, 1.0), c / _tnp.where(taur > 0, taur, 1.0)
        # Complex (or nearly equal real) eigenvalues: equal diagonal entries first.
        sigma = b + c
        tauc = _tnp.sqrt(sigma * sigma + temp * temp)
        tauc = _tnp.where(tauc > 0, tauc, 1.0)
        cs_c = _tnp.sqrt(0.5 * (1.0 + _tnp.abs(sigma) / tauc))
        sn_c = -(p / (tauc * cs_c)) * _sign(sigma)
        aa, bb = a * cs_c + b * sn_c, -a * sn_c + b * cs_c
        cc, dd = c * cs_c + d * sn_c, -c * sn_c + d * cs_c
        b2, c2 = bb * cs_c + dd * sn_c, -aa * sn_c + cc * cs_c
        same_sign = _tnp.logical_and(_tnp.logical_and(c2 != 0, b2 != 0), _sign(b2) == _sign(c2))
        sab, sac = _tnp.sqrt(_tnp.abs(b2)), _tnp.sqrt(_tnp.abs(c2))
        tau2 = 1.0 / _tnp.sqrt(_tnp.where(same_sign, _tnp.abs(b2 + c2), 1.0))
        cs1, sn1 = sab * tau2, sac * tau2
        cs_c, sn_c = (_tnp.where(same_sign, cs_c * cs1 - sn_c * sn1, cs_c),
                      _tnp.where(same_sign, cs_c * sn1 + sn_c * cs1, sn_c))
        swap = _tnp.logical_and(c2 != 0, b2 == 0)
        cs_c, sn_c = _tnp.where(swap, -sn_c, cs_c), _tnp.where(swap, cs_c, sn_c)
        standard = _tnp.logical_and(temp == 0, _sign(b) != _sign(c))
        cs = _tnp.where(b == 0, 0.0, _tnp.where(standard, 1.0, _tnp.where(real, cs_r, cs_c)))
        sn = _tnp.where(b == 0, 1.0, _tnp.where(standard, 0.0, _tnp.where(real, sn_r, sn_c)))
        cs, sn = _tnp.where(block, cs, 1.0), _tnp.where(block, sn, 0.0)
        # r: the identity with [[cs, -sn], [sn, cs]] at rows and columns i, i+1; h = r^T h r, z = z r.
        r_i, c_i = rows[:, None], rows[None, :]
        cs2, sn2 = cs[..., None, None], sn[..., None, None]
        r = _tnp.where(_tnp.logical_and(r_i == c_i, _tnp.logical_or(r_i == i, r_i == i + 1)), cs2,
                       _tnp.where(_tnp.logical_and(r_i == i, c_i == i + 1), -sn2,
                                  _tnp.where(_tnp.logical_and(r_i == i + 1, c_i == i), sn2,
                                             _tnp.where(r_i == c_i, 1.0, 0.0))))
        h = _tnp.matmul(_mT(r), _tnp.matmul(h, r))
        z = _tnp.matmul(z, r)
        # The exact zeros and equalities rounding leaves close: below a triangular block, on a standard one's
        # diagonal.
        h21 = _entry(h, ii + 1, ii)
        now_real = _tnp.logical_and(block, _tnp.logical_or(b == 0, _tnp.logical_and(~standard, real)))
        settled = _tnp.abs(h21) <= eps * (_tnp.abs(a) + _tnp.abs(d))
        now_real = _tnp.logical_or(now_real, _tnp.logical_and(block, settled))
        mean = 0.5 * (_entry(h, ii, ii) + _entry(h, ii + 1, ii + 1))
        complex_block = _tnp.logical_and(block, ~now_real)
        on = lambda r0, c0: _tnp.logical_and(rows[:, None] == r0, rows[None, :] == c0)  # noqa: E731
        h = _tnp.where(_tnp.logical_and(on(i + 1, i), now_real[..., None, None]), 0.0, h)
        h = _tnp.where(_tnp.logical_and(_tnp.logical_or(on(i, i), on(i + 1, i + 1)), complex_block[..., None, None]),
                       mean[..., None, None], h)
        return h, z

    return _lax.fori_loop(0, n - 1, step, (h, z))


def _tiny(h):
    """The dtype's smallest normal number."""
    return float(_np.finfo(_np.float32 if h._dtype_name == "f32" else _np.float64).tiny)


def schur(a, output="real"):
    """The real Schur decomposition a = Z T Z^T of a [..., n, n]: T quasi-upper-triangular (1x1 blocks for real
    eigenvalues, standardized 2x2 blocks for complex pairs, as LAPACK's ?gees), Z orthogonal. Written with array
    ops: the Hessenberg reduction (hessenberg), Francis's double-shift QR sweeps in a while_loop (LAPACK's
    ?lahqr, at most 30 n sweeps), then ?lanv2's rotations of the 2x2 blocks. The eigenvalues' order along the
    diagonal and the signs of Z's columns may differ from LAPACK's (the decomposition is not unique). NaNs where
    the iteration does not converge. output='complex' needs complex dtypes, which tessera lacks."""
    if output not in ("real", "complex"):
        raise ValueError(f"Expected 'output' to be either 'real' or 'complex', got output={output!r}.")
    if output == "complex":
        raise NotImplementedError("schur: output='complex' needs complex dtypes, which tessera does not have")
    a = _square(a, "schur")
    n = a.shape[-1]
    h, z = hessenberg(a, calc_q=True)
    if n <= 1:
        return h, z
    h, z, hi = _francis_sweeps(h, z, 30 * n)
    h, z = _standardize_blocks(h, z)
    failed = (hi > 0)[..., None, None]
    return _tnp.where(failed, _np.nan, h), _tnp.where(failed, _np.nan, z)


# ---- tessera.scipy.linalg ---------------------------------------------------------------------------------

from . import _scipy_linalg_special as _special  # noqa: E402
from ._lax_linalg import scipy_linalg as _module  # noqa: E402

_NAMES = ("cholesky", "det", "inv", "solve", "block_diag", "qr_multiply", "hessenberg", "schur", "polar",
          "eigh_tridiagonal", "expm_frechet", "solve_sylvester")
_SPECIAL = ("toeplitz", "hankel", "circulant", "leslie", "companion", "fiedler", "fiedler_companion",
            "convolution_matrix", "hilbert", "invhilbert", "pascal", "invpascal", "helmert", "hadamard")
for _name in _NAMES:
    setattr(_module, _name, globals()[_name])
for _name in _SPECIAL:
    setattr(_module, _name, getattr(_special, _name))
_module.__doc__ = ("jax.scipy.linalg: solve_triangular, cho_factor, cho_solve, eigh, svd, qr, lu, lu_factor, lu_solve, "
                   "expm, " + ", ".join(_NAMES + _SPECIAL) + ".")
