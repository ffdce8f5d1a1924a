"""tessera.numpy (import as tnp): numpy's names over the engine's Array API, as jax.numpy.

Arrays are immutable. They convert to numpy without a copy (np.asarray(x) is a read-only view of the array's
buffer; bf16, which numpy lacks, comes back as float32, a copy), and from numpy with one copy. As in JAX with
64-bit mode off, float64 and int64 inputs become float32 and int32 unless a dtype says otherwise."""

# The code is in the private modules beside this one, each importing only those listed before it:
#   _np_base           the Array type, the dtypes and their engine names, the axis, shape and out= helpers
#   _np_creation       asarray, astype, from_dlpack; zeros, full, arange, eye, linspace, tri, tril, triu, copy
#   _np_elementwise    the unary and binary ops: jax.numpy's promotions, numpy's round, /, **, % and //
#   _np_layout         reshape, transpose, the axis moves, concatenate, stack, split, pad, tile, repeat, roll
#   _np_reductions     sum, mean, var, max, all, allclose, ...; cumsum, cumprod; sort, argsort, argmax, argmin
#   _np_indexing       where, nonzero, take; x[key] and x.at[key]
#   _np_linalg         dot, outer, tensordot; tessera.numpy.linalg
#   _np_einsum         einsum (any number of operands, contracted pairwise), einsum_path
#   _np_composite      functions written with the others: hstack, diag, trace, diff, the nan* reductions, sinh, ...
#   _np_stats          median, quantile, percentile and their nan forms; histogram, bincount, digitize, interp
#   _np_setops         unique, unique_values, unique_counts, unique_inverse, unique_all
#   _np_math           gcd, lcm, divmod, frexp, ldexp, modf, nextafter, spacing, bitwise_count;
#                      real, imag, conj of real arrays
#   _np_arrays         array_split, insert, delete, resize, kron, cross, inner, vdot, ravel_multi_index, lexsort,
#                      partition, piecewise, choose, compress, put, block, the set operations, nancumsum, ...
#   _np_signal         convolve, correlate, the poly* functions, vander, gradient, trapezoid, cov, corrcoef, histogram2d
#   _np_grids          logspace, geomspace, indices, ix_, mgrid, ogrid, fromfunction, the window functions, i0
#   _np_extra          the dtype aliases bool, double, single, float_, int_; r_, c_, packbits, unpackbits, place,
#                      histogramdd; numpy's host-side load, save, savez, from*, array_repr, array_str, printoptions
#   _np_array_methods  the Array type's Python methods and operators, installed when it is imported
# This module re-exports the function objects themselves (no wrappers: a call costs no extra frame), and the
# private helpers other modules of the package use (_engine_dtype, _FLOATING, _inexact, _axes, ...).

import os as _os
import types as _types

import numpy as _np
from builtins import any as _builtins_any

from . import _tessera as _C
from ._np_base import (Array, bfloat16, bool_, dtype, e, float16, float32, float64, inf, int32, int64, nan, ndarray,
                       newaxis, pi, uint32, uint8, _axes, _axis_list, _CANONICAL, _canonical_axis, _engine_dtype,
                       _ENGINE_TO_PUBLIC, _FLOATING, _no_axes, _no_out, _NUMPY_TO_ENGINE, _shape)
from ._np_creation import (arange, array, asarray, astype, copy, eye, from_dlpack, full, full_like, linspace, ones,
                           ones_like, tri, tril, triu, zeros, zeros_like, _holds_array, _to_numpy)
from ._np_elementwise import (abs, absolute, add, arccos, arcsin, arctan, arctan2, around, bitwise_and, bitwise_or,
                              bitwise_xor, ceil, clip, cos, divide, equal, exp, exp2, expm1, floor, floor_divide,
                              greater, greater_equal, isclose, isfinite, isinf, isnan, isneginf, isposinf, left_shift,
                              less, less_equal, log, log10, log1p, log2, logaddexp, logical_and, logical_not,
                              logical_or, logical_xor, matmul, maximum, minimum, mod, multiply, negative, not_equal, positive, power,
                              promote_types, reciprocal, remainder, result_type, right_shift, round, sign, sin, sqrt, square, subtract, tan, tanh,
                              true_divide, _inexact, _is_floating, _operands)
from ._np_layout import (broadcast_to, concatenate, expand_dims, flip, moveaxis, pad, ravel, repeat, reshape, roll,
                         split, squeeze, stack, swapaxes, tile, transpose)
from ._np_reductions import (all, allclose, amax, amin, any, argmax, argmin, argsort, cumprod, cumsum, max, mean, min,
                             prod, ptp, sort, std, sum, var)
from ._np_indexing import (argwhere, flatnonzero, NonConcreteBooleanIndexError, nonzero, take, take_along_axis, where,
                           _getitem)
from ._np_linalg import dot, linalg, outer, tensordot
from ._np_einsum import einsum, einsum_path
from ._np_composite import (append, arccosh, arcsinh, arctanh, array_equal, atleast_1d, atleast_2d, atleast_3d,
                            average, bitwise_invert, bitwise_not, broadcast_arrays, broadcast_shapes, cbrt,
                            column_stack, copysign, cosh, count_nonzero, cumulative_prod, cumulative_sum, deg2rad,
                            degrees, diag, diagonal, diff, dstack, empty, empty_like, finfo, fliplr, flipud,
                            float_power, fmax, fmin, fmod, heaviside, hstack, hypot, identity, iinfo, invert, isin,
                            isscalar,
                            issubdtype, logaddexp2, meshgrid, nan_to_num, nanargmax, nanargmin, nanmax, nanmean,
                            nanmin, nanprod, nanstd, nansum, nanvar, ndim, rad2deg, radians, rint, rot90, row_stack,
                            searchsorted, select, shape, signbit, sinc, sinh, size, trace, tril_indices,
                            triu_indices, trunc, vstack)
from ._np_stats import (bincount, digitize, histogram, histogram_bin_edges, interp, median, nanmedian,
                        nanpercentile, nanquantile, percentile, quantile)
from ._np_setops import unique, unique_all, unique_counts, unique_inverse, unique_values
from ._np_math import (angle, bitwise_count, conj, conjugate, divmod, fabs, frexp, gcd, imag, iscomplex,
                       iscomplexobj, isreal, isrealobj, lcm, ldexp, modf, nextafter, real, spacing, unwrap)
from ._np_arrays import (apply_along_axis, apply_over_axes, argpartition, array_equiv, array_split, block, choose,
                         compress, cross, delete, diag_indices, diagflat, dsplit, extract, fill_diagonal, hsplit,
                         inner, insert, intersect1d, kron, lexsort, nancumprod, nancumsum, partition, piecewise, put,
                         put_along_axis, ravel_multi_index, resize, rollaxis, setdiff1d, setxor1d, trim_zeros,
                         union1d, unravel_index, unstack, vdot, vectorize, vsplit)
from ._np_signal import (convolve, corrcoef, correlate, cov, ediff1d, gradient, histogram2d, poly, polyadd, polyder,
                         polydiv, polyfit, polyint, polymul, polysub, polyval, trapezoid, vander)
from ._np_grids import (bartlett, blackman, diag_indices_from, fromfunction, geomspace, hamming, hanning, i0,
                        index_exp, indices, ix_, kaiser, logspace, mask_indices, mgrid, ogrid, s_,
                        tril_indices_from, triu_indices_from)
from ._np_extra import (array_repr, array_str, bool, c_, double, float_, frombuffer, fromfile, fromiter, fromstring,
                        get_printoptions, histogramdd, int_, load, packbits, place, printoptions, r_, save, savez,
                        set_printoptions, single, unpackbits)
from . import _np_array_methods  # noqa: F401 (installs the Array type's methods)
from . import _lax_types

# The Array API standard's names for functions numpy names otherwise (jax.numpy has both).
acos, acosh, asin, asinh, atan, atan2, atanh = arccos, arccosh, arcsin, arcsinh, arctan, arctan2, arctanh
bitwise_left_shift, bitwise_right_shift, concat, permute_dims, pow = left_shift, right_shift, concatenate, transpose, power


def matrix_transpose(x, /):
    """x with its last two axes swapped."""
    x = asarray(x)
    if x.ndim < 2:
        raise ValueError(f"matrix_transpose: x must have at least 2 dimensions; got shape {tuple(x.shape)}")
    return swapaxes(x, -1, -2)


def vecdot(x1, x2, /, *, axis=-1):
    """The dot product of x1 and x2 along axis, broadcast over the other axes (real arrays: no conjugate)."""
    return sum(multiply(x1, x2), axis=axis)


# jax.numpy's products take precision= (lax.Precision, a DotAlgorithmPreset, ...; checked, float32 products
# whatever it asks) and preferred_element_type= (the result's dtype): tessera/_lax_types.py.
dot, inner, matmul, tensordot, vdot, vecdot, convolve, correlate = (
    _lax_types.with_precision(_f) for _f in (dot, inner, matmul, tensordot, vdot, vecdot, convolve, correlate))


def matvec(x1, x2, /):
    """The matrix x1 [..., m, n] times the vector x2 [..., n], broadcast over the leading axes."""
    return squeeze(matmul(x1, expand_dims(asarray(x2), -1)), -1)


def vecmat(x1, x2, /):
    """The vector x1 [..., m] times the matrix x2 [..., m, n], broadcast over the leading axes."""
    return squeeze(matmul(expand_dims(asarray(x1), -2), x2), -2)


# numpy's abstract scalar types, for issubdtype(x.dtype, tnp.floating) and the like.
generic, number, inexact, floating, complexfloating = (_np.generic, _np.number, _np.inexact, _np.floating,
                                                       _np.complexfloating)
integer, signedinteger, unsignedinteger, character, flexible = (_np.integer, _np.signedinteger, _np.unsignedinteger,
                                                                _np.character, _np.flexible)
can_cast = _np.can_cast
_KINDS = {"bool": (_np.bool_,), "signed integer": (_np.signedinteger,), "unsigned integer": (_np.unsignedinteger,),
          "integral": (_np.integer,), "real floating": (_np.floating,), "complex floating": (_np.complexfloating,),
          "numeric": (_np.integer, _np.floating, _np.complexfloating)}


def isdtype(dtype, kind):
    """The Array API's isdtype: whether dtype is kind (a dtype, one of "bool", "signed integer", "unsigned
    integer", "integral", "real floating", "complex floating", "numeric", or a tuple of those)."""
    if isinstance(kind, tuple):
        return _builtins_any(isdtype(dtype, k) for k in kind)
    if dtype == bfloat16 or kind == bfloat16:
        return (kind in ("real floating", "numeric")) if isinstance(kind, str) else dtype == kind
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError(f"isdtype: unknown kind {kind!r} (one of {', '.join(_KINDS)})")
        return _builtins_any(_np.issubdtype(_np.dtype(dtype), k) for k in _KINDS[kind])
    return _np.dtype(dtype) == _np.dtype(kind)
iterable = _np.iterable
euler_gamma = _np.euler_gamma

# help() and pickle name the public module, not the private one that holds the code.
for _value in [*globals().values(), *vars(Array).values(), type(bfloat16)]:
    if isinstance(_value, (_types.FunctionType, type)) and _value.__module__.startswith(__package__ + "._np_"):
        _value.__module__ = __name__
del _value


# Frames in this folder are skipped when ops record the user's file:line (the same spelling of the path
# as the code objects carry).
_C._set_package(_os.path.dirname(__file__), asarray)
