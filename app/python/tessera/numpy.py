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
#   _np_einsum         einsum: any number of operands, contracted pairwise in a greedy order
#   _np_composite      functions written with the others: hstack, diag, trace, diff, the nan* reductions, sinh, ...
#   _np_stats          median, quantile, percentile and their nan forms; histogram, bincount, digitize, interp
#   _np_setops         unique, unique_values, unique_counts, unique_inverse, unique_all
#   _np_math           gcd, lcm, divmod, frexp, ldexp, modf; real, imag, conj of real arrays
#   _np_arrays         array_split, insert, delete, resize, kron, cross, inner, vdot, ravel_multi_index, lexsort,
#                      partition, piecewise, apply_along_axis, setdiff1d, nancumsum, ...
#   _np_signal         convolve, correlate, polyval, polyfit, vander, gradient, trapezoid, cov, corrcoef, histogram2d
#   _np_array_methods  the Array type's Python methods and operators, installed when it is imported
# This module re-exports the function objects themselves (no wrappers: a call costs no extra frame), and the
# private helpers other modules of the package use (_engine_dtype, _FLOATING, _inexact, _axes, ...).

import os as _os
import types as _types

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
from ._np_einsum import einsum
from ._np_composite import (append, arccosh, arcsinh, arctanh, array_equal, atleast_1d, atleast_2d, atleast_3d,
                            average, bitwise_invert, bitwise_not, broadcast_arrays, broadcast_shapes, cbrt,
                            column_stack, copysign, cosh, count_nonzero, cumulative_sum, deg2rad, degrees, diag,
                            diagonal, diff, dstack, empty, empty_like, finfo, fliplr, flipud, float_power, fmax,
                            fmin, fmod, heaviside, hstack, hypot, identity, iinfo, invert, isin, isscalar,
                            issubdtype, logaddexp2, meshgrid, nan_to_num, nanargmax, nanargmin, nanmax, nanmean,
                            nanmin, nanprod, nanstd, nansum, nanvar, ndim, rad2deg, radians, rint, rot90, row_stack,
                            searchsorted, select, shape, signbit, sinc, sinh, size, trace, tril_indices,
                            triu_indices, trunc, vstack)
from ._np_stats import (bincount, digitize, histogram, histogram_bin_edges, interp, median, nanmedian,
                        nanpercentile, nanquantile, percentile, quantile)
from ._np_setops import unique, unique_all, unique_counts, unique_inverse, unique_values
from ._np_math import conj, conjugate, divmod, frexp, gcd, imag, lcm, ldexp, modf, real
from ._np_arrays import (apply_along_axis, argpartition, array_split, cross, delete, diag_indices, diagflat, inner,
                         insert, kron, lexsort, nancumprod, nancumsum, partition, piecewise, ravel_multi_index,
                         resize, setdiff1d, unravel_index, vdot)
from ._np_signal import (convolve, corrcoef, correlate, cov, ediff1d, gradient, histogram2d, polyfit, polyval,
                         trapezoid, vander)
from . import _np_array_methods  # noqa: F401 (installs the Array type's methods)

# help() and pickle name the public module, not the private one that holds the code.
for _value in [*globals().values(), *vars(Array).values(), type(bfloat16)]:
    if isinstance(_value, (_types.FunctionType, type)) and _value.__module__.startswith(__package__ + "._np_"):
        _value.__module__ = __name__
del _value


# Frames in this folder are skipped when ops record the user's file:line (the same spelling of the path
# as the code objects carry).
_C._set_package(_os.path.dirname(__file__), asarray)
