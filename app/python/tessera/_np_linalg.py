"""tessera.numpy's contractions (dot, einsum, outer, tensordot) and tessera.numpy.linalg (norm)."""

import builtins as _builtins
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


def einsum(subscripts, a, b):
    """Two operands over single-letter subscripts ('bhtd,bhsd->bhts')."""
    return _C.einsum(subscripts, a, b)


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
    """numpy.linalg.norm without the SVD ones: vector norms (ord None or 2, 1, inf, -inf, 0, any p) over one
    axis, matrix norms (None or 'fro', 1, -1, inf, -inf) over two. axis=None with ord=None is the 2-norm of
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


def _vector_norm(x, ord, axis, keepdims):
    if ord is None or ord == 2:
        return sqrt(sum(x * x, axis, keepdims=keepdims))
    if isinstance(ord, str):
        raise ValueError(f"norm: ord={ord!r} is for matrices, not vectors")
    if ord == _np.inf:
        return max(abs(x), axis, keepdims=keepdims)
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
        raise NotImplementedError(f"norm: ord={ord!r} of a matrix needs its singular values (no SVD in tessera)")
    raise ValueError(f"norm: invalid ord {ord!r} for a matrix")


linalg = _types.ModuleType("tessera.numpy.linalg", "jax.numpy.linalg's norm.")
linalg.norm = _norm
_norm.__module__ = linalg.__name__
_norm.__name__ = _norm.__qualname__ = "norm"
_sys.modules[linalg.__name__] = linalg  # import tessera.numpy.linalg works too
