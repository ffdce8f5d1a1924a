"""tessera.numpy's unique and its array-API forms (unique_values, unique_counts, unique_inverse, unique_all), as
jax.numpy writes them: a stable (lexicographic) sort, a mask of where each run of equal elements starts, and
nonzero of the mask. How many values there are depends on the data, so a traced array needs size= (and
fill_value=); without it the mask's count is read from the device, which is where JAX needs a concrete array."""

import collections as _collections
import operator as _operator

import numpy as _np

from . import _tessera as _C
from ._np_base import _canonical_axis, _FLOATING
from ._np_creation import asarray
from ._np_elementwise import isnan
from ._np_indexing import nonzero
from ._np_layout import moveaxis, ravel

_SIZE_HINT = ("To make unique() usable under jit and the other transforms, give a concrete size= argument, which "
              "fixes the output's size (and fill_value= for the padding)")


def _rows_unequal(a, b, equal_nan):
    """a[i] != b[i] for each leading index of the [n, ...] arrays a and b (NaNs equal when equal_nan)."""
    ne = _C.not_equal(a, b)
    if equal_nan and a._dtype_name in _FLOATING:
        ne = _C.bitwise_and(ne, _C.logical_not(_C.bitwise_and(isnan(a), isnan(b))))
    return _C.any(ne, list(range(1, a.ndim)), False) if a.ndim > 1 else ne


def _sorted_mask(ar, axis, equal_nan):
    """(aux, mask, perm): ar's slices along axis sorted lexicographically (stably) to the front of aux, mask
    True where a slice differs from the one before it, perm the sorting permutation (int32)."""
    aux = moveaxis(ar, axis, 0)
    n = aux.shape[0]
    width = int(_np.prod(aux.shape[1:]))
    if width == 0:
        n, perm = 1, _C.full([1], 0, "i32")
    else:
        rows = _C.reshape(aux, [n, width])
        keys = [_C.reshape(_C.slice(rows, [0, j], [n, j + 1], [1, 1]), [n]) for j in range(width)]
        perm = _C.sort(keys + [_C.iota([n], 0, "i32")], 0, True, width)[-1]
    aux = _C.take(aux, perm, 0)
    if aux.size:
        rest = [1] * (aux.ndim - 1)
        later = _C.slice(aux, [1] + [0] * (aux.ndim - 1), list(aux.shape), [1] + rest)
        earlier = _C.slice(aux, [0] * aux.ndim, [n - 1] + list(aux.shape[1:]), [1] + rest)
        mask = _C.concatenate([_C.full([1], True, "bool"), _rows_unequal(later, earlier, equal_nan)], 0)
    else:
        mask = _C.full([n], False, "bool")
    return aux, mask, perm


def _unique(ar, axis, return_index, return_inverse, return_counts, equal_nan, size, fill_value):
    if ar.shape[axis] == 0 and size and fill_value is None:
        raise ValueError("unique: for zero-sized input with nonzero size argument, fill_value must be specified")
    aux, mask, perm = _sorted_mask(ar, axis, equal_nan)
    found = _C.sum(_C.astype(mask, "i32"), [], False)
    length = int(found) if size is None else size  # the values' count itself when no size is given
    ind = nonzero(mask, size=length)[0]
    result = _C.take(aux, ind, 0) if aux.size else aux
    if size is not None and fill_value is not None:
        fill = _C.astype(asarray(fill_value), result._dtype_name)
        if result.shape[0]:
            valid = _C.less(_C.iota([size], 0, "i32"), found)
            valid = _C.reshape(valid, [size] + [1] * (result.ndim - 1))
            result = _C.where(valid, result, fill)
        else:
            result = _C.broadcast_to(fill, [size] + list(result.shape[1:]))
    out = [moveaxis(result, 0, axis)]
    if return_index:
        out.append(_C.take(perm, ind, 0) if aux.size else perm)
    if return_inverse:
        if aux.size:
            first = _C.cumsum(_C.astype(mask, "i32"), 0, False) - 1
            out.append(_C.scatter(_C.full([mask.shape[0]], 0, "i32"), perm, first, 0, 0))
        else:
            out.append(_C.full([ar.shape[axis]], 0, "i32"))
    if return_counts:
        if aux.size:
            # The starts of the runs and one past the end: their differences are the runs' lengths (0 for padding).
            starts = nonzero(mask, size=length + 1)[0]
            n = mask.shape[0]
            tail = _C.slice(starts, [1], [length + 1], [1])
            bounds = _C.concatenate([_C.slice(starts, [0], [1], [1]), _C.where(_C.not_equal(tail, 0), tail, n)], 0)
            out.append(_C.slice(bounds, [1], [length + 1], [1]) - _C.slice(bounds, [0], [length], [1]))
        elif ar.shape[axis]:
            out.append(_C.full([1], ar.shape[axis], "i32"))
        else:
            out.append(_C.full([0], 0, "i32"))
    return out[0] if len(out) == 1 else tuple(out)


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *, equal_nan=True,
           size=None, fill_value=None, sorted=True):
    """The sorted unique elements of ar (flattened, or the unique slices along axis), and optionally the index
    of each one's first occurrence, the inverse (ar's shape when axis is None; ar == values[inverse]) and the
    counts, all int32. size= fixes the number of values (under jit): the first `size`, then fill_value (default:
    the smallest value; counts 0). equal_nan: NaNs count as one value."""
    ar = asarray(ar)
    if size is None:
        if ar.is_tracer:
            raise _C.ConcretizationError(
                f"unique: the number of unique values of a traced array ({ar._dtype_name}{list(ar.shape)}) is not "
                f"known while tracing. {_SIZE_HINT}")
    else:
        size = _operator.index(size)
    shape = list(ar.shape)
    if axis is None:
        ar, axis_int = ravel(ar), 0
    else:
        axis_int = _canonical_axis(axis, ar.ndim, "unique")
    result = _unique(ar, axis_int, return_index, return_inverse, return_counts, equal_nan, size, fill_value)
    if return_inverse and axis is None:
        k = 2 if return_index else 1
        result = (*result[:k], _C.reshape(result[k], shape), *result[k + 1:])
    return result


UniqueAllResult = _collections.namedtuple("UniqueAllResult", ["values", "indices", "inverse_indices", "counts"])
UniqueCountsResult = _collections.namedtuple("UniqueCountsResult", ["values", "counts"])
UniqueInverseResult = _collections.namedtuple("UniqueInverseResult", ["values", "inverse_indices"])


def unique_all(x, /, *, size=None, fill_value=None):
    """unique with every output, NaNs distinct: (values, indices, inverse_indices, counts)."""
    return UniqueAllResult(*unique(x, True, True, True, equal_nan=False, size=size, fill_value=fill_value))


def unique_counts(x, /, *, size=None, fill_value=None):
    return UniqueCountsResult(*unique(x, return_counts=True, equal_nan=False, size=size, fill_value=fill_value))


def unique_inverse(x, /, *, size=None, fill_value=None):
    return UniqueInverseResult(*unique(x, return_inverse=True, equal_nan=False, size=size, fill_value=fill_value))


def unique_values(x, /, *, size=None, fill_value=None):
    return unique(x, equal_nan=False, size=size, fill_value=fill_value)
