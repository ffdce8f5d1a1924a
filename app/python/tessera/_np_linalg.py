"""tessera.numpy's contractions (dot, outer, tensordot; einsum is _np_einsum's) and tessera.numpy.linalg (norm, and the
factorisations' compositions: cholesky, solve, inv, det, slogdet, multi_dot, tensorsolve, tensorinv; the array
API's cross, diagonal, matmul, matrix_norm, matrix_transpose, outer, tensordot, trace, vecdot, vector_norm; the
decompositions are in _np_decompositions)."""

import builtins as _builtins
import collections as _collections
import operator as _operator
import sys as _sys
import types as _types

import numpy as _np

from . import _tessera as _C
from ._np_base import _axis_list, _canonical_axis, _no_out
from ._np_creation import asarray
from ._np_elementwise import abs, matmul, power, sqrt, _inexact
from ._np_reductions import max, min, sum


# ---- contractions -----------------------------------------------------------------------------------------


def dot(a, b, out=None):
    _no_out(out, "dot")
    a, b = asarray(a), asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return matmul(a, b)


def outer(a, b, out=None):
    """a (flattened) as a column times b (flattened) as a row: [a.size, b.size]."""
    _no_out(out, "outer")
    a, b = asarray(a), asarray(b)
    return _C.reshape(a, [-1, 1]) * _C.reshape(b, [1, -1])


def tensordot(a, b, axes=2):
    """The sum over a's axes[0] and b's axes[1] (an int n: a's last n and b's first n) of their products: one
    matmul of a as [free, contracted] and b as [contracted, free]. Result: a's free dims, then b's."""
    a, b = asarray(a), asarray(b)
    if isinstance(axes, (int, _np.integer)):
        n = _operator.index(axes)
        if not 0 <= n <= _builtins.min(a.ndim, b.ndim):
            raise ValueError(f"tensordot: axes={n} does not fit operands of ranks {a.ndim} and {b.ndim}")
        axes_a, axes_b = list(range(a.ndim - n, a.ndim)), list(range(n))
    else:
        try:
            axes_a, axes_b = axes
        except (TypeError, ValueError):
            raise TypeError(f"tensordot: axes must be an int or a pair of axis sequences, not {axes!r}") from None
        axes_a = [_canonical_axis(i, a.ndim, "tensordot") for i in _axis_list(axes_a)]
        axes_b = [_canonical_axis(i, b.ndim, "tensordot") for i in _axis_list(axes_b)]
    if len(axes_a) != len(axes_b):
        raise ValueError(f"tensordot: {len(axes_a)} axes of a but {len(axes_b)} of b")
    for i, j in zip(axes_a, axes_b):
        if a.shape[i] != b.shape[j]:
            raise ValueError(f"tensordot: axis {i} of a (shape {a.shape}) has size {a.shape[i]} but axis {j} of b "
                             f"(shape {b.shape}) has {b.shape[j]}")
    free_a = [i for i in range(a.ndim) if i not in axes_a]
    free_b = [i for i in range(b.ndim) if i not in axes_b]
    contracted = int(_np.prod([a.shape[i] for i in axes_a]))
    lhs = _C.reshape(_C.transpose(a, free_a + axes_a), [-1, contracted]) if free_a or axes_a else _C.reshape(a, [1, 1])
    rhs = _C.reshape(_C.transpose(b, axes_b + free_b), [contracted, -1]) if free_b or axes_b else _C.reshape(b, [1, 1])
    return _C.reshape(matmul(lhs, rhs), [a.shape[i] for i in free_a] + [b.shape[i] for i in free_b])


# ---- linalg -----------------------------------------------------------------------------------------------


def _norm(x, ord=None, axis=None, keepdims=False):
    """numpy.linalg.norm: vector norms (ord None or 2, 1, inf, -inf, 0, any p) over one axis, matrix norms (None
    or 'fro', 1, -1, inf, -inf, and from the singular values 2, -2, 'nuc') over two. axis=None with ord=None is the 2-norm of
    the flattened array."""
    x = _inexact(x)
    if axis is None:
        if ord is None:
            return sqrt(sum(x * x, keepdims=keepdims))
        if x.ndim not in (1, 2):
            raise ValueError(f"norm: ord={ord!r} needs axis= for an array of rank {x.ndim} (or rank 1 or 2)")
        axis = tuple(range(x.ndim))
    axes = tuple(_canonical_axis(i, x.ndim, "norm") for i in _axis_list(axis))
    if len(axes) == 1:
        return _vector_norm(x, ord, axes[0], keepdims)
    if len(axes) != 2 or axes[0] == axes[1]:
        raise ValueError(f"norm: axis {axis} must name one axis (a vector norm) or two (a matrix norm)")
    return _matrix_norm(x, ord, axes, keepdims)


def _vector_norm(x, ord, axis, keepdims, **inf_initial):
    """The vector norm of order ord (a number or None) over axis; inf_initial: max's `initial` for ord inf (the
    array API's norm of no elements is 0)."""
    if ord is None or ord == 2:
        return sqrt(sum(x * x, axis, keepdims=keepdims))
    if isinstance(ord, str):
        raise ValueError(f"norm: ord={ord!r} is for matrices, not vectors")
    if ord == _np.inf:
        return max(abs(x), axis, keepdims=keepdims, **inf_initial)
    if ord == -_np.inf:
        return min(abs(x), axis, keepdims=keepdims)
    if ord == 0:
        return sum(_C.astype(_C.not_equal(x, 0.0), x._dtype_name), axis, keepdims=keepdims)
    if ord == 1:
        return sum(abs(x), axis, keepdims=keepdims)
    return power(sum(power(abs(x), float(ord)), axis, keepdims=keepdims), 1.0 / ord)


def _matrix_norm(x, ord, axes, keepdims):
    row, col = axes
    if ord is None or ord == "fro":
        return sqrt(sum(x * x, axes, keepdims=keepdims))
    if ord in (1, -1, _np.inf, -_np.inf):
        # 1: the largest column sum of |x| (summed over rows); inf: the largest row sum.
        summed, over = (row, col) if ord in (1, -1) else (col, row)
        sums = sum(abs(x), summed, keepdims=True)
        r = (max if ord > 0 else min)(sums, over, keepdims=True)
        return r if keepdims else _C.squeeze(r, [row, col])
    if ord in (2, -2, "nuc"):
        from ._np_decompositions import singular_value_norm
        return singular_value_norm(x, ord, axes, keepdims)
    raise ValueError(f"norm: invalid ord {ord!r} for a matrix")


# The compositions on the linalg ops (cholesky, triangular_solve, lu: engine/ops/linalg.cpp), as jax.numpy.linalg
# writes them. tessera.numpy is imported when called: this module is loaded while it is being built.


def _tnp():
    from . import numpy as tnp
    return tnp


def _square(a, name):
    """a as f32 or f64 (integers, bools, f16 and bf16 as f32), checked to be [..., n, n]."""
    a = _inexact(a)
    if a._dtype_name not in ("f32", "f64"):
        a = _C.astype(a, "f32")
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{name}: a must be square in its last two axes ([..., n, n]), not shape {a.shape}")
    return a


def _mT(x):
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return _C.transpose(x, perm)


def cholesky(a, *, upper=False, symmetrize_input=True):
    """The lower factor L of a symmetric positive definite a [..., n, n] (L L^T = a; upper: L^T), of
    (a + a^T) / 2 unless symmetrize_input is False (then only the lower triangle is read). NaNs where a is not
    positive definite, as JAX."""
    a = _square(a, "cholesky")
    l = _C.cholesky(a, bool(symmetrize_input))
    return _mT(l) if upper else l


def _lu_solve(lu, perm, b):
    """x with a x = b from lu(a) (b [..., n, k], the batch dims equal)."""
    tnp = _tnp()
    if b.shape[-2] == 0:  # nothing to solve (and no rows to gather)
        return b
    # b's rows in the permutation's order (row i is b's row perm[i]): one gather, its gradient a scatter_add.
    pb = tnp.take_along_axis(b, tnp.expand_dims(perm, -1), axis=-2, mode="promise_in_bounds")
    y = _C.triangular_solve(lu, pb, True, True, False, True)
    return _C.triangular_solve(lu, y, True, False, False, False)


def _batched(a, b, name):
    """a [..., n, n] and b [..., n, k] with their batch dims broadcast to one shape."""
    batch = tuple(_np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2])))
    if tuple(a.shape[:-2]) != batch:
        a = _C.broadcast_to(a, list(batch + tuple(a.shape[-2:])))
    if tuple(b.shape[:-2]) != batch:
        b = _C.broadcast_to(b, list(batch + tuple(b.shape[-2:])))
    return a, b


def solve(a, b):
    """x with a x = b, by LU with partial pivoting. b is a vector [n] when it is 1-D, else a matrix [..., n, k]
    (JAX since 0.5: a batch of vectors is b[..., None]); leading axes broadcast."""
    tnp = _tnp()
    a = _square(a, "solve")
    b = asarray(b)
    if b.ndim > 1 and a.ndim == b.ndim + 1 and a.shape[-1] == b.shape[-1] and a.shape[-1] != b.shape[-2]:
        raise ValueError(f"Invalid shapes for solve: {tuple(a.shape)}, {tuple(b.shape)}. Prior to JAX v0.5.0, this "
                         "would have been treated as a batched 1-dimensional solve. To recover this behavior, use "
                         "solve(a, b[..., None]).squeeze(-1).")
    vector = b.ndim == 1
    if vector:
        b = tnp.expand_dims(b, -1)
    if b.ndim < 2 or b.shape[-2] != a.shape[-1]:
        raise ValueError(f"solve: b's shape {tuple(b.shape)} does not fit a of shape {a.shape}")
    b = _C.astype(b, a._dtype_name) if b._dtype_name != a._dtype_name else b
    a, b = _batched(a, b, "solve")
    lu, _, perm = _C.lu(a)
    x = _lu_solve(lu, perm, b)
    return _C.squeeze(x, [x.ndim - 1]) if vector else x


def inv(a):
    """The inverse of a [..., n, n] (infinities or NaNs where a is singular)."""
    tnp = _tnp()
    a = _square(a, "inv")
    eye = _C.broadcast_to(tnp.eye(a.shape[-1], dtype=a._dtype_name), list(a.shape))
    lu, _, perm = _C.lu(a)
    return _lu_solve(lu, perm, eye)


def _lu_parts(a, name):
    """lu(a)'s diagonal of U [..., n] and the permutation's sign (+1 or -1) [...]."""
    tnp = _tnp()
    a = _square(a, name)
    lu, pivots, _ = _C.lu(a)
    diag = tnp.diagonal(lu, axis1=-2, axis2=-1)
    n = a.shape[-1]
    swaps = sum(_C.astype(_C.not_equal(pivots, asarray(_np.arange(n, dtype=_np.int32))), a._dtype_name), -1)
    sign = 1.0 - 2.0 * (swaps % 2.0)
    return diag, sign


def det(a):
    """The determinant of a [..., n, n]: the product of U's diagonal, signed by the row swaps."""
    diag, sign = _lu_parts(a, "det")
    return sign * _tnp().prod(diag, axis=-1)


SlogdetResult = _collections.namedtuple("SlogdetResult", ["sign", "logabsdet"])


def slogdet(a):
    """(sign, log|det a|) of a [..., n, n]: sign 0 and logabsdet -inf where a is singular."""
    tnp = _tnp()
    diag, sign = _lu_parts(a, "slogdet")
    logabsdet = sum(tnp.log(abs(diag)), -1)
    sign = sign * tnp.prod(tnp.sign(diag), axis=-1)
    return SlogdetResult(sign, logabsdet)


# ---- products of chains and tensor inverses -----------------------------------------------------------------


def _chain_order(dims):
    """numpy's matrix-chain order: split[i][j] is where the product of matrices i..j (matrix k of shape
    [dims[k], dims[k + 1]]) is best split, the one that needs the fewest scalar multiplications; by dynamic
    programming over the chain's lengths, ties to the earliest split."""
    n = len(dims) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = _np.inf
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k
    return split


def _chain_product(arrays, split, i, j):
    if i == j:
        return arrays[i]
    k = split[i][j]
    return matmul(_chain_product(arrays, split, i, k), _chain_product(arrays, split, k + 1, j))


def multi_dot(arrays, *, precision=None):
    """The product of the chain arrays[0] @ arrays[1] @ ... in the order that needs the fewest multiplications
    (numpy's dynamic programming; for three, its direct comparison), so the same values as reduce(matmul) up to
    rounding, and its gradient that of the matmuls. The first array may be a vector (a row) and the last one (a
    column); the result drops the dims they lack. The others are [m, n]. precision is accepted and changes no
    result."""
    arrs = [asarray(a) for a in arrays]
    if len(arrs) < 2:
        raise ValueError(f"multi_dot requires at least two arrays; got len(arrays)={len(arrs)}")
    shapes = [tuple(a.shape) for a in arrs]
    if not (arrs[0].ndim in (1, 2) and arrs[-1].ndim in (1, 2) and _builtins.all(a.ndim == 2 for a in arrs[1:-1])):
        raise ValueError("multi_dot: input arrays must all be two-dimensional, except for the first and last "
                         f"array which may be 1 or 2 dimensional. Got array shapes {shapes}")
    if _builtins.any(a.shape[-1] != b.shape[0] for a, b in zip(arrs[:-1], arrs[1:])):
        raise ValueError("multi_dot: last dimension of each array must match first dimension of following "
                         f"array. Got array shapes {shapes}")
    row, column = arrs[0].ndim == 1, arrs[-1].ndim == 1
    if row:
        arrs[0] = _C.reshape(arrs[0], [1, -1])
    if column:
        arrs[-1] = _C.reshape(arrs[-1], [-1, 1])
    dims = [a.shape[0] for a in arrs] + [arrs[-1].shape[1]]
    r = _chain_product(arrs, _chain_order(dims), 0, len(arrs) - 1)
    if row or column:
        r = _C.reshape(r, ([] if row else [r.shape[0]]) + ([] if column else [r.shape[1]]))
    return r


def tensorsolve(a, b, axes=None):
    """x with tensordot(a, x, axes=x.ndim) = b: a's leading dims are b's shape and its trailing ones x's (after
    axes, if given, are moved to the end in their order), the two of equal size; one solve of a as a square
    matrix. Shapes that do not fit raise ValueError, as jax.numpy."""
    a, b = asarray(a), asarray(b)
    if axes is not None:
        axes = [_canonical_axis(i, a.ndim, "tensorsolve") for i in _axis_list(axes)]
        a = _C.transpose(a, [i for i in range(a.ndim) if i not in axes] + axes)
    out_shape = tuple(a.shape[b.ndim:])
    if tuple(a.shape[:b.ndim]) != tuple(b.shape):
        raise ValueError("After moving axes to end, leading shape of a must match shape of b. "
                         f"got a.shape={tuple(a.shape)}, b.shape={tuple(b.shape)}")
    n = int(_np.prod(out_shape))
    if b.size != n:
        raise ValueError("Input arrays must have prod(a.shape[:b.ndim]) == prod(a.shape[b.ndim:]); "
                         f"got a.shape={tuple(a.shape)}, b.ndim={b.ndim}.")
    x = solve(_C.reshape(a, [b.size, n]), _C.reshape(b, [b.size]))
    return _C.reshape(x, list(out_shape))


def tensorinv(a, ind=2):
    """The inverse of a as a tensor of ind 'row' dims and the rest 'column' dims (their sizes' products equal):
    tensordot(tensorinv(a), a, ind) is the identity. Result: a's last dims, then its first ind."""
    a = asarray(a)
    ind = _operator.index(ind)
    if ind <= 0:
        raise ValueError(f"ind must be a positive integer; got ind={ind}")
    rows, cols = tuple(a.shape[:ind]), tuple(a.shape[ind:])
    if int(_np.prod(rows)) != int(_np.prod(cols)):
        raise ValueError("tensorinv is only possible when the product of the first `ind` dimensions equals "
                         f"that of the remaining dimensions. got a.shape={tuple(a.shape)} with ind={ind}.")
    n = int(_np.prod(rows))
    return _C.reshape(inv(_C.reshape(a, [n, n])), list(cols + rows))


# ---- the array API's names (jax.numpy.linalg's, over the last axes) ------------------------------------------


def _preferred(xs, preferred_element_type):
    """The operands in preferred_element_type (the products accumulate in it), or as they are."""
    if preferred_element_type is None:
        return xs
    return [asarray(x).astype(preferred_element_type) for x in xs]


def _array_api_cross(x1, x2, /, *, axis=-1):
    """The cross product of 3-vectors along axis (both operands of size 3 there)."""
    x1, x2 = asarray(x1), asarray(x2)
    if x1.shape[axis] != 3 or x2.shape[axis] != 3:
        raise ValueError("Both input arrays must be (arrays of) 3-dimensional vectors, but they have "
                         f"x1.shape[axis]={x1.shape[axis]!r} and x2.shape[axis]={x2.shape[axis]!r}")
    return _tnp().cross(x1, x2, axis=axis)


def _array_api_diagonal(x, /, *, offset=0):
    """The diagonals of x [..., m, n] (offset above the main one when positive): [..., k]."""
    return _tnp().diagonal(x, offset, -2, -1)


def _array_api_matmul(x1, x2, /, *, precision=None, preferred_element_type=None):
    """matmul (precision is accepted and changes nothing)."""
    del precision
    return matmul(*_preferred([x1, x2], preferred_element_type))


def _array_api_matrix_norm(x, /, *, keepdims=False, ord="fro"):
    """norm over the last two axes."""
    return _norm(x, ord=ord, axis=(-2, -1), keepdims=keepdims)


def _array_api_matrix_transpose(x, /):
    """x [..., m, n] as [..., n, m]."""
    x = asarray(x)
    if x.ndim < 2:
        raise ValueError(f"matrix_transpose requires at least 2 dimensions; got ndim={x.ndim!r}")
    return _mT(x)


def _array_api_outer(x1, x2, /):
    """The outer product [m, n] of two vectors [m] and [n]."""
    x1, x2 = asarray(x1), asarray(x2)
    if x1.ndim != 1 or x2.ndim != 1:
        raise ValueError(f"Input arrays must be one-dimensional, but they are x1.ndim={x1.ndim!r} x2.ndim={x2.ndim!r}")
    return outer(x1, x2)


def _array_api_tensordot(x1, x2, /, *, axes=2, precision=None, preferred_element_type=None, out_sharding=None):
    """tensordot (precision and out_sharding are accepted and change nothing)."""
    del precision, out_sharding
    return tensordot(*_preferred([x1, x2], preferred_element_type), axes=axes)


def _array_api_trace(x, /, *, offset=0, dtype=None):
    """The sums of x's diagonals over its last two axes: [...]."""
    return _tnp().trace(x, offset, -2, -1, dtype)


def _array_api_vecdot(x1, x2, /, *, axis=-1, precision=None, preferred_element_type=None):
    """The dot products of x1 and x2 along axis, other axes broadcast (precision is accepted and changes nothing)."""
    del precision
    return _tnp().vecdot(*_preferred([x1, x2], preferred_element_type), axis=axis)


def _array_api_vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    """The vector norm over axis (an int, a tuple, or None: every axis, as one flattened vector): ord 2 (or
    None), 1, 0 (the count of nonzeros), inf (0 for no elements), -inf, any other p."""
    x = _inexact(asarray(x))
    if isinstance(ord, str):
        msg = f"Invalid order '{ord}' for vector norm."
        if ord == "inf":
            msg += "Use 'jax.numpy.inf' instead."
        if ord == "-inf":
            msg += "Use '-jax.numpy.inf' instead."
        raise ValueError(msg)
    return _vector_norm(x, ord, axis, keepdims, initial=0.0)


_ARRAY_API = (_array_api_cross, _array_api_diagonal, _array_api_matmul, _array_api_matrix_norm,
              _array_api_matrix_transpose, _array_api_outer, _array_api_tensordot, _array_api_trace,
              _array_api_vecdot, _array_api_vector_norm)


from . import _np_decompositions as _dec  # noqa: E402  (it imports this module's names)

linalg = _types.ModuleType("tessera.numpy.linalg", "jax.numpy.linalg: norm, cholesky, solve, inv, det, slogdet, eigh, "
                           "eigvalsh, svd, svdvals, qr, pinv, matrix_rank, lstsq, cond, matrix_power, multi_dot, "
                           "tensorsolve, tensorinv, cross, diagonal, matmul, matrix_norm, matrix_transpose, outer, "
                           "tensordot, trace, vecdot, vector_norm.")
for _f in (_norm, cholesky, solve, inv, det, slogdet, _dec.eigh, _dec.eigvalsh, _dec.svd, _dec.svdvals, _dec.qr,
           _dec.pinv, _dec.matrix_rank, _dec.lstsq, _dec.cond, _dec.matrix_power, multi_dot, tensorsolve,
           tensorinv) + _ARRAY_API:
    _name = "norm" if _f is _norm else _f.__name__.removeprefix("_array_api_")
    setattr(linalg, _name, _f)
    _f.__module__ = linalg.__name__
    _f.__name__ = _f.__qualname__ = _name
linalg.SlogdetResult = SlogdetResult
linalg.EighResult, linalg.SVDResult, linalg.QRResult = _dec.EighResult, _dec.SVDResult, _dec.QRResult
_sys.modules[linalg.__name__] = linalg  # import tessera.numpy.linalg works too
