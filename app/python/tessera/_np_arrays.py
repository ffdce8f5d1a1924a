"""tessera.numpy's array manipulations written with the others, as jax.numpy's: array_split, insert, delete,
resize, kron, cross, inner, vdot, diagflat, diag_indices, ravel_multi_index, unravel_index, lexsort, partition,
argpartition, piecewise, apply_along_axis, setdiff1d, nancumsum and nancumprod.

insert and delete take their positions as Python ints, slices or concrete arrays (the result's shape depends on
them), as JAX requires; setdiff1d needs size= under jit, as unique does."""

import operator as _operator

import numpy as _np

from . import _tessera as _C
from ._np_base import Array, _canonical_axis, _FLOATING
from ._np_creation import arange, asarray, zeros
from ._np_elementwise import clip, isnan, logical_not, multiply, _operands, _promoted
from ._np_layout import broadcast_to, concatenate, moveaxis, ravel, reshape, split, stack, tile
from ._np_reductions import cumprod, cumsum, sort, argsort, sum
from ._np_indexing import nonzero, take, where
from ._np_linalg import tensordot
from ._np_composite import diag, isin


def array_split(ary, indices_or_sections, axis=0):
    """numpy's array_split: as split, but N sections need not be equal: the first (n mod N) take one element
    more."""
    a = asarray(ary)
    axis = _canonical_axis(axis, a.ndim, "array_split")
    if isinstance(indices_or_sections, (int, _np.integer)):
        sections = _operator.index(indices_or_sections)
        if sections <= 0:
            raise ValueError(f"array_split: the number of sections must be positive, not {sections}")
        n = a.shape[axis]
        each, extra = divmod(n, sections)
        sizes = [each + 1] * extra + [each] * (sections - extra)
        indices_or_sections = list(_np.cumsum(sizes)[:-1])
    return split(a, [int(i) for i in indices_or_sections], axis)


def _positions(obj, n, name):
    """obj (an int, a slice, a sequence or a concrete array of ints or bools) as a numpy int array of positions."""
    if isinstance(obj, slice):
        return _np.arange(n)[obj]
    if isinstance(obj, Array):
        if obj.is_tracer:
            raise _C.ConcretizationError(
                f"{name}: the positions must be known while tracing (an int, a slice, or a concrete array): the "
                "result's shape depends on them")
        obj = _np.asarray(obj._host_view())
    return _np.asarray(obj)


def insert(arr, obj, values, axis=None):
    """numpy's insert: values placed before position obj (an int, a slice or a sequence of positions in arr,
    negative ones counting from the end) along axis (arr flattened when None). One gather from arr and values."""
    a = asarray(arr)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _canonical_axis(axis, a.ndim, "insert")
    n = a.shape[axis]
    pos = _positions(obj, n, "insert")
    if pos.dtype == bool:
        raise TypeError("insert: boolean positions are not supported (numpy deprecates them); give indices")
    scalar = pos.ndim == 0
    pos = _np.atleast_1d(pos).astype(_np.int64)
    if ((pos < -n) | (pos > n)).any():
        raise IndexError(f"insert: index {int(pos[(pos < -n) | (pos > n)][0])} is out of bounds for axis {axis} "
                         f"with size {n}")
    pos = _np.where(pos < 0, pos + n, pos)
    v = asarray(values)
    v = v if v._dtype_name == a._dtype_name else _C.astype(v, a._dtype_name)
    if scalar:
        # numpy: values get leading 1s up to arr's rank and their first axis moved to axis; as many as that
        # axis holds go in before pos, as one block.
        if v.ndim < a.ndim:
            v = reshape(v, (1,) * (a.ndim - v.ndim) + tuple(v.shape))
        v = moveaxis(v, 0, axis)
        pos = _np.full(v.shape[axis], pos[0])
    count = len(pos)
    shape = list(a.shape)
    shape[axis] = count
    v = broadcast_to(v, tuple(shape))
    # The inserted elements, stably ordered by position, land at position + their rank; arr's fill the rest.
    order = _np.argsort(pos, kind="stable")
    target = _np.empty(n + count, dtype=_np.int64)
    new_at = pos[order] + _np.arange(count)
    is_new = _np.zeros(n + count, dtype=bool)
    is_new[new_at] = True
    target[~is_new] = _np.arange(n)
    target[new_at] = n + order
    both = concatenate([a, v], axis)
    return take(both, asarray(target.astype(_np.int32)), axis)


def delete(arr, obj, axis=None, *, assume_unique_indices=False):
    """numpy's delete: arr without the positions obj (an int, a slice, a sequence or a boolean mask) along axis
    (arr flattened when None)."""
    a = asarray(arr)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _canonical_axis(axis, a.ndim, "delete")
    n = a.shape[axis]
    pos = _positions(obj, n, "delete")
    if pos.dtype == bool:
        if pos.shape != (n,):
            raise ValueError(f"delete: a boolean mask must have the axis' length {n}; got shape {pos.shape}")
        keep = _np.nonzero(~pos)[0]
    else:
        pos = _np.atleast_1d(pos).astype(_np.int64)
        if ((pos < -n) | (pos >= n)).any():
            raise IndexError(f"delete: index {int(pos[(pos < -n) | (pos >= n)][0])} is out of bounds for axis {axis} "
                             f"with size {n}")
        keep = _np.delete(_np.arange(n), pos)
    return take(a, asarray(keep.astype(_np.int32)), axis)


def resize(a, new_shape):
    """numpy's resize: a's elements in order, repeated as often as needed to fill new_shape (zeros where a is
    empty)."""
    a = asarray(a)
    new_shape = (new_shape,) if isinstance(new_shape, (int, _np.integer)) else tuple(new_shape)
    if any(d < 0 for d in new_shape):
        raise ValueError(f"resize: all elements of new_shape must be non-negative; got {new_shape}")
    total = int(_np.prod(new_shape))
    flat = ravel(a)
    if flat.shape[0] == 0:
        return zeros(new_shape, a.dtype)
    copies = -(-total // flat.shape[0])
    flat = tile(flat, copies) if copies > 1 else flat
    return reshape(flat[:total], new_shape)


def kron(a, b):
    """The Kronecker product: blocks a[i, j, ...] * b, for arrays of any ranks (the lower one gets leading 1s)."""
    a, b = _promoted(*_operands(a, b))
    nd = max(a.ndim, b.ndim)
    a = reshape(a, (1,) * (nd - a.ndim) + tuple(a.shape))
    b = reshape(b, (1,) * (nd - b.ndim) + tuple(b.shape))
    ai = reshape(a, tuple(d for s in a.shape for d in (s, 1)))
    bi = reshape(b, tuple(d for s in b.shape for d in (1, s)))
    return reshape(multiply(ai, bi), tuple(x * y for x, y in zip(a.shape, b.shape)))


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """The cross product of vectors of 2 or 3 components along axisa of a and axisb of b (axis sets all three);
    two 2-vectors give the z component alone, as numpy."""
    a, b = _promoted(*_operands(a, b))
    if axis is not None:
        axisa = axisb = axisc = axis
    a = moveaxis(a, _canonical_axis(axisa, a.ndim, "cross"), -1)
    b = moveaxis(b, _canonical_axis(axisb, b.ndim, "cross"), -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise ValueError(f"cross: incompatible dimensions for cross product (dimension must be 2 or 3); got "
                         f"{a.shape[-1]} and {b.shape[-1]}")
    if a.shape[-1] == 2 and b.shape[-1] == 2:
        return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
    a, b = _third_component(a), _third_component(b)
    a0, a1, a2, b0, b1, b2 = a[..., 0], a[..., 1], a[..., 2], b[..., 0], b[..., 1], b[..., 2]
    c = stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], -1)
    return moveaxis(c, -1, _canonical_axis(axisc, c.ndim, "cross"))


def _third_component(v):
    """A [..., 2] vector with a zero z appended; a [..., 3] one as it is."""
    if v.shape[-1] == 3:
        return v
    return concatenate([v, _C.full(list(v.shape[:-1]) + [1], 0, v._dtype_name)], -1)


def inner(a, b):
    """The sum product over the last axes of a and b (a scalar operand multiplies)."""
    a, b = _promoted(*_operands(a, b))
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"inner: the last dimensions must match; got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    return tensordot(a, b, axes=([a.ndim - 1], [b.ndim - 1]))


def vdot(a, b):
    """The dot product of a and b flattened (real arrays: no conjugate)."""
    a, b = ravel(asarray(a)), ravel(asarray(b))
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"vdot: the arrays have {a.shape[0]} and {b.shape[0]} elements")
    return inner(a, b)


def diagflat(v, k=0):
    """A 2-d array with v flattened on its k-th diagonal."""
    return diag(ravel(asarray(v)), k)


def diag_indices(n, ndim=2):
    """The indices of the main diagonal of an n x n x ... array of ndim dims: ndim copies of arange(n)."""
    if n < 0 or ndim < 0:
        raise ValueError(f"diag_indices: n and ndim must be non-negative; got {n} and {ndim}")
    i = arange(n, dtype="int32")
    return (i,) * ndim


def _shape_of(shape, name):
    shape = (shape,) if isinstance(shape, (int, _np.integer)) else tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"{name}: dimensions must be non-negative; got {shape}")
    return shape


def _check_bounds(index, limit, name, what):
    """Raises, as numpy does, where a concrete index is outside [0, limit); traced ones are left to the caller."""
    if isinstance(index, Array) and not index.is_tracer:
        host = _np.asarray(index._host_view())
        bad = (host < 0) | (host >= limit)
        if bad.any():
            raise ValueError(f"{name}: {what} {int(host[bad].ravel()[0])} is out of bounds for size {limit}")


def ravel_multi_index(multi_index, dims, mode="raise", order="C"):
    """The flat index of each tuple of indices into an array of shape dims, row-major (order "C") or
    column-major ("F"). mode "raise": an index out of range raises (concrete indices; traced ones are clipped,
    as JAX's); "clip" clamps, "wrap" takes the modulus."""
    dims = _shape_of(dims, "ravel_multi_index")
    if len(multi_index) != len(dims):
        raise ValueError(f"ravel_multi_index: {len(multi_index)} index arrays for {len(dims)} dimensions")
    if order not in ("C", "F"):
        raise ValueError(f"ravel_multi_index: order must be 'C' or 'F', not {order!r}")
    modes = (mode,) * len(dims) if isinstance(mode, str) else tuple(mode)
    strides = _np.cumprod((1,) + dims[:0:-1])[::-1] if order == "C" else _np.cumprod((1,) + dims[:-1])
    flat = None
    for idx, d, s, m in zip(multi_index, dims, strides, modes):
        idx = asarray(idx)
        if idx._dtype_name in _FLOATING or idx._dtype_name == "bool":
            raise TypeError(f"ravel_multi_index: only int indices are permitted; got {idx.dtype}")
        idx = _C.astype(idx, "i32") if idx._dtype_name != "i32" else idx
        if m == "raise":
            _check_bounds(idx, d, "ravel_multi_index", "index")
            idx = clip(idx, 0, d - 1)
        elif m == "clip":
            idx = clip(idx, 0, d - 1)
        elif m == "wrap":
            idx = idx % d
        else:
            raise ValueError(f"ravel_multi_index: mode must be 'raise', 'wrap' or 'clip', not {m!r}")
        term = idx * int(s)
        flat = term if flat is None else flat + term
    return flat


def unravel_index(indices, shape):
    """The tuple of index arrays into an array of shape shape for each flat (row-major) index. Out-of-range
    concrete indices raise, as numpy's; traced ones are clipped, as JAX's."""
    shape = _shape_of(shape, "unravel_index")
    idx = asarray(indices)
    if idx._dtype_name in _FLOATING or idx._dtype_name == "bool":
        raise TypeError(f"unravel_index: only int indices permitted; got {idx.dtype}")
    idx = _C.astype(idx, "i32") if idx._dtype_name != "i32" else idx
    size = int(_np.prod(shape))
    _check_bounds(idx, size, "unravel_index", "index")
    idx = clip(idx, 0, max(size - 1, 0))
    out = []
    for d in reversed(shape):
        out.append(idx % d if d else idx)
        idx = idx // d if d else idx
    return tuple(reversed(out))


def lexsort(keys, axis=-1):
    """The indices that sort by several keys: the last key is the primary one, earlier ones break its ties
    (stably). keys: a sequence of arrays of one shape, or the rows of a 2-d array."""
    keys = [asarray(k) for k in keys]
    if not keys:
        raise TypeError("lexsort: need sequence of keys with len > 0")
    shape = tuple(keys[0].shape)
    if any(tuple(k.shape) != shape for k in keys):
        raise ValueError(f"lexsort: all keys need to be the same shape; got {[tuple(k.shape) for k in keys]}")
    if not shape:
        return asarray(_np.int32(0))
    axis = _canonical_axis(axis, len(shape), "lexsort")
    moved = [moveaxis(k, axis, -1) for k in reversed(keys)]
    iota = _C.iota(list(moved[0].shape), len(shape) - 1, "i32")
    perm = _C.sort(moved + [iota], len(shape) - 1, True, len(moved))[-1]
    return moveaxis(perm, -1, axis)


def partition(a, kth, axis=-1):
    """a with its kth element (along axis) where a sort would put it, smaller ones before and larger after:
    here the sorted order itself, which is one such arrangement (numpy and JAX leave the order within each side
    unspecified)."""
    a = asarray(a)
    axis = _canonical_axis(axis, a.ndim, "partition")
    n = a.shape[axis]
    kth = _operator.index(kth)
    if not -n <= kth < n:
        raise ValueError(f"partition: kth {kth} is out of bounds for an axis of size {n}")
    return sort(a, axis)


def argpartition(a, kth, axis=-1):
    """The indices that partition a (see partition): here the indices that sort it."""
    a = asarray(a)
    axis = _canonical_axis(axis, a.ndim, "argpartition")
    n = a.shape[axis]
    kth = _operator.index(kth)
    if not -n <= kth < n:
        raise ValueError(f"argpartition: kth {kth} is out of bounds for an axis of size {n}")
    return argsort(a, axis)


def piecewise(x, condlist, funclist, *args, **kw):
    """numpy's piecewise: where condlist[i] holds, funclist[i] (a function of x, called as f(x, *args, **kw),
    or a constant); a funclist one longer than condlist gives the value where no condition holds (else 0).
    Later conditions win where several hold. Every function is evaluated on the whole of x and the results are
    selected, as under jit they must be."""
    x = asarray(x)
    # One condition (an array of x's rank) or several (a sequence of them, or an array of one rank more).
    if isinstance(condlist, (list, tuple)):
        several = len(condlist) > 0 and _np.ndim(condlist[0]) == x.ndim and x.ndim > 0 or (
            x.ndim == 0 and len(condlist) > 0)
        conds = [asarray(c) for c in condlist] if several else [asarray(condlist)]
    else:
        c = asarray(condlist)
        conds = [c[i] for i in range(c.shape[0])] if c.ndim == x.ndim + 1 else [c]
    if len(funclist) not in (len(conds), len(conds) + 1):
        raise ValueError(f"piecewise: with {len(conds)} condition(s), either {len(conds)} or {len(conds) + 1} "
                         f"functions are expected; got {len(funclist)}")

    def value(f):
        out = f(x, *args, **kw) if callable(f) else f
        out = asarray(out)
        return out if out._dtype_name == x._dtype_name else _C.astype(out, x._dtype_name)

    if len(funclist) == len(conds) + 1:
        anyc = conds[0] if conds else None
        for c in conds[1:]:
            anyc = _C.bitwise_or(anyc, c)
        conds = conds + [logical_not(anyc) if anyc is not None else _C.full(list(x.shape), True, "bool")]
    result = _C.full(list(x.shape), 0, x._dtype_name)
    for c, f in zip(conds, funclist):
        result = where(c, value(f), result)
    return result


def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """func1d applied to every 1-d slice of arr along axis (with tessera.vmap over the other axes, as JAX):
    its result's dims take axis's place."""
    from ._transforms import vmap
    arr = asarray(arr)
    axis = _canonical_axis(axis, arr.ndim, "apply_along_axis")
    moved = moveaxis(arr, axis, -1)
    fn = lambda v: func1d(v, *args, **kwargs)  # noqa: E731
    for _ in range(arr.ndim - 1):
        fn = vmap(fn)
    out = asarray(fn(moved))
    lead = arr.ndim - 1
    extra = out.ndim - lead
    return moveaxis(out, list(range(lead, out.ndim)), list(range(axis, axis + extra))) if extra else out


def setdiff1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    """The sorted unique values of ar1 not in ar2 (with assume_unique, ar1's values in their order). Their number
    depends on the values, so a traced ar1 needs size= (the result's length, padded with fill_value, default
    0)."""
    a = ravel(asarray(ar1))
    if not assume_unique and a.shape[0]:
        a = sort(a)
    keep = logical_not(isin(a, ar2))
    if not assume_unique and a.shape[0]:  # each value once: where a run of equal ones starts
        first = concatenate([_C.full([1], True, "bool"), _C.not_equal(a[1:], a[:-1])], 0)
        keep = _C.bitwise_and(keep, first)
    if size is None:
        if a.is_tracer:
            raise _C.ConcretizationError(
                "setdiff1d: the number of values of a traced array is not known while tracing; give size= (and "
                "fill_value=)")
        return take(a, nonzero(keep)[0], 0) if a.shape[0] else a
    if a.shape[0] == 0:
        return _C.full([size], 0 if fill_value is None else fill_value, a._dtype_name)
    (ind,) = nonzero(keep, size=size, fill_value=a.shape[0])
    found = _C.less(ind, _C.scalar(a.shape[0], ind))
    return where(found, take(a, ind, 0, mode="clip"), 0 if fill_value is None else fill_value)


def nancumsum(a, axis=None, dtype=None):
    """cumsum with NaNs counted as 0."""
    a = asarray(a)
    if a._dtype_name in _FLOATING:
        a = where(isnan(a), 0, a)
    return cumsum(a, axis=axis, dtype=dtype)


def nancumprod(a, axis=None, dtype=None):
    """cumprod with NaNs counted as 1."""
    a = asarray(a)
    if a._dtype_name in _FLOATING:
        a = where(isnan(a), 1, a)
    return cumprod(a, axis=axis, dtype=dtype)
