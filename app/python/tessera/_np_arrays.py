"""tessera.numpy's array manipulations written with the others, as jax.numpy's: array_split, hsplit, vsplit,
dsplit, unstack, block, rollaxis, insert, delete, resize, kron, cross, inner, vdot, diagflat, diag_indices,
ravel_multi_index, unravel_index, lexsort, partition, argpartition, piecewise, apply_along_axis, apply_over_axes,
array_equiv, trim_zeros, choose, compress, extract, put, put_along_axis, fill_diagonal, the set operations
setdiff1d, union1d, intersect1d and setxor1d, nancumsum and nancumprod.

insert and delete take their positions as Python ints, slices or concrete arrays (the result's shape depends on
them), as JAX requires; the set operations, compress and extract need size= under jit, as unique does; put,
put_along_axis and fill_diagonal return the updated array and need inplace=False, as JAX's."""

import builtins as _builtins
import operator as _operator

import numpy as _np

from . import _tessera as _C
from ._np_base import Array, _canonical_axis, _FLOATING
from ._np_creation import arange, asarray, zeros
from ._np_elementwise import clip, isnan, logical_not, multiply, _operands, _promoted
from ._np_layout import broadcast_to, concatenate, moveaxis, ravel, reshape, split, stack, tile
from ._np_reductions import cumprod, cumsum, sort, argsort
from ._np_indexing import nonzero, take, take_along_axis, where
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


def _along_axis(arr, obj, axis, name):
    """(arr, axis, its length, obj's positions): arr flattened when axis is None."""
    a = asarray(arr)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _canonical_axis(axis, a.ndim, name)
    n = a.shape[axis]
    return a, axis, n, _positions(obj, n, name)


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
    a, axis, n, pos = _along_axis(arr, obj, axis, "insert")
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
    a, axis, n, pos = _along_axis(arr, obj, axis, "delete")
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


def _partitioned(name, a, kth, axis):
    """(a, axis) once kth is checked against the axis."""
    a = asarray(a)
    axis = _canonical_axis(axis, a.ndim, name)
    n = a.shape[axis]
    kth = _operator.index(kth)
    if not -n <= kth < n:
        raise ValueError(f"{name}: kth {kth} is out of bounds for an axis of size {n}")
    return a, axis


def partition(a, kth, axis=-1):
    """a with its kth element (along axis) where a sort would put it, smaller ones before and larger after:
    here the sorted order itself, which is one such arrangement (numpy and JAX leave the order within each side
    unspecified)."""
    return sort(*_partitioned("partition", a, kth, axis))


def argpartition(a, kth, axis=-1):
    """The indices that partition a (see partition): here the indices that sort it."""
    return argsort(*_partitioned("argpartition", a, kth, axis))


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
    if not assume_unique:
        a = sort(a)
    keep = logical_not(isin(a, ar2))
    if not assume_unique:  # each value once: where a run of equal ones starts
        keep = _C.bitwise_and(keep, _first_of_runs(a))
    return _select_values(a, keep, size, fill_value, "setdiff1d")


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


# ---- more layout ----------------------------------------------------------------------------------------

def hsplit(ary, indices_or_sections):
    """split along axis 1 (axis 0 of a 1-d array)."""
    a = asarray(ary)
    if a.ndim == 0:
        raise ValueError("hsplit only works on arrays of 1 or more dimensions")
    return split(a, indices_or_sections, 1 if a.ndim > 1 else 0)


def vsplit(ary, indices_or_sections):
    """split along axis 0 of an array of 2 or more dims."""
    a = asarray(ary)
    if a.ndim < 2:
        raise ValueError("vsplit only works on arrays of 2 or more dimensions")
    return split(a, indices_or_sections, 0)


def dsplit(ary, indices_or_sections):
    """split along axis 2 of an array of 3 or more dims."""
    a = asarray(ary)
    if a.ndim < 3:
        raise ValueError("dsplit only works on arrays of 3 or more dimensions")
    return split(a, indices_or_sections, 2)


def unstack(x, /, *, axis=0):
    """The slices of x along axis, as a tuple."""
    x = asarray(x)
    axis = _canonical_axis(axis, x.ndim, "unstack")
    moved = moveaxis(x, axis, 0)
    return tuple(moved[i] for i in range(moved.shape[0]))


def rollaxis(a, axis, start=0):
    """numpy's rollaxis: axis moved to before position start."""
    a = asarray(a)
    n = a.ndim
    axis = _canonical_axis(axis, n, "rollaxis")
    if start < 0:
        start += n
    if not 0 <= start <= n:
        raise ValueError(f"rollaxis: start {start} is out of bounds for an array of {n} dimensions")
    if axis < start:
        start -= 1
    return moveaxis(a, axis, start)


def block(arrays):
    """numpy's block: an array assembled from nested lists of blocks, the innermost lists joined along the last
    axis, the next ones out along the one before, and so on."""
    def depth(x):
        if isinstance(x, list):
            if not x:
                raise ValueError("block: lists cannot be empty")
            ds = {depth(e) for e in x}
            if len(ds) != 1:
                raise ValueError("block: list depths are mismatched")
            return ds.pop() + 1
        if isinstance(x, tuple):
            raise TypeError("block: arrays is a tuple; only lists can be used to arrange blocks")
        return 0

    levels = depth(arrays)

    def rank(x):
        return _builtins.max(rank(e) for e in x) if isinstance(x, list) else asarray(x).ndim

    ndim = _builtins.max(rank(arrays), levels)

    def assemble(x, level):
        if level == levels:
            a = asarray(x)
            return reshape(a, (1,) * (ndim - a.ndim) + tuple(a.shape))
        parts = [assemble(e, level + 1) for e in x]
        return concatenate(parts, -(levels - level))

    return assemble(arrays, 0)


def apply_over_axes(func, a, axes):
    """func(a, axis) applied for each axis in turn; a result that lost the axis gets it back (size 1)."""
    a = asarray(a)
    for axis in ([axes] if isinstance(axes, int) else axes):
        res = asarray(func(a, axis))
        if res.ndim == a.ndim:
            a = res
        elif res.ndim == a.ndim - 1:
            a = reshape(res, tuple(res.shape[:axis % a.ndim]) + (1,) + tuple(res.shape[axis % a.ndim:]))
        else:
            raise ValueError("apply_over_axes: function is not returning an array of the correct shape")
    return a


def array_equiv(a1, a2):
    """Whether a1 and a2 broadcast to one shape and are equal there."""
    a1, a2 = asarray(a1), asarray(a2)
    try:
        shape = _np.broadcast_shapes(tuple(a1.shape), tuple(a2.shape))
    except ValueError:
        return asarray(False)
    eq = _C.equal(*_promoted(broadcast_to(a1, shape), broadcast_to(a2, shape)))
    return _C.all(eq, [], False) if len(shape) else eq


def trim_zeros(filt, trim="fb"):
    """The 1-d filt without its leading ("f") and trailing ("b") zeros. How many depends on the values, so
    filt must be concrete, as JAX's."""
    a = asarray(filt)
    if a.ndim != 1:
        raise ValueError(f"trim_zeros: filt must be 1-d; got shape {tuple(a.shape)}")
    if a.is_tracer:
        raise _C.ConcretizationError("trim_zeros: the number of zeros of a traced array is not known while tracing")
    nz = _np.nonzero(_np.asarray(a._host_view()))[0]
    if nz.size == 0:
        return a[:0]
    lo = int(nz[0]) if "f" in trim.lower() else 0
    hi = int(nz[-1]) + 1 if "b" in trim.lower() else a.shape[0]
    return a[lo:hi]


# ---- picking elements -----------------------------------------------------------------------------------

def choose(a, choices, out=None, mode="raise"):
    """numpy's choose: choices[a[i]][i] for each i, everything broadcast. mode "raise" checks a concrete a
    (a traced one is clipped), "wrap" takes a modulo the number of choices, "clip" clamps it."""
    if out is not None:
        raise TypeError("choose: out= is not supported (tessera arrays are immutable): use the returned array")
    a = asarray(a)
    if a._dtype_name in _FLOATING or a._dtype_name == "bool":
        raise TypeError(f"choose: a must hold integers; got {a.dtype}")
    choices = [asarray(c) for c in choices]
    n = len(choices)
    if mode == "raise":
        _check_bounds(a, n, "choose", "choice")
        a = clip(a, 0, n - 1)
    elif mode == "wrap":
        a = a % n
    elif mode == "clip":
        a = clip(a, 0, n - 1)
    else:
        raise ValueError(f"choose: mode must be 'raise', 'wrap' or 'clip', not {mode!r}")
    shape = _np.broadcast_shapes(tuple(a.shape), *[tuple(c.shape) for c in choices])
    dt = choices[0]._dtype_name
    for c in choices[1:]:
        dt = _C.promote_types(dt, c._dtype_name)
    stacked = stack([broadcast_to(c if c._dtype_name == dt else _C.astype(c, dt), shape) for c in choices], 0)
    index = reshape(broadcast_to(_C.astype(a, "i32"), shape), (1,) + shape)
    return reshape(take_along_axis(stacked, index, axis=0), shape)


def _select_values(values, keep, size, fill_value, name):
    """values[keep] (1-d): read from the device without size=; with it, the first size of them, padded."""
    if size is None:
        if values.is_tracer or keep.is_tracer:
            raise _C.ConcretizationError(
                f"{name}: the number of values of a traced array is not known while tracing; give size= (and "
                "fill_value=)")
        return take(values, nonzero(keep)[0], 0) if values.shape[0] else values
    if values.shape[0] == 0:
        return _C.full([size], 0 if fill_value is None else fill_value, values._dtype_name)
    (ind,) = nonzero(keep, size=size, fill_value=values.shape[0])
    found = _C.less(ind, _C.scalar(values.shape[0], ind))
    return where(found, take(values, ind, 0, mode="clip"), 0 if fill_value is None else fill_value)


def compress(condition, a, axis=None, *, size=None, fill_value=0, out=None):
    """The slices of a along axis (a flattened when None) where condition (1-d) is True; a condition shorter
    than the axis selects among the first slices. Traced conditions need size=."""
    if out is not None:
        raise TypeError("compress: out= is not supported (tessera arrays are immutable): use the returned array")
    c = asarray(condition)
    if c.ndim != 1:
        raise ValueError(f"compress: condition must be 1-d; got shape {tuple(c.shape)}")
    a = asarray(a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _canonical_axis(axis, a.ndim, "compress")
    n = a.shape[axis]
    if c.shape[0] > n:
        raise ValueError(f"compress: condition has {c.shape[0]} entries for an axis of {n}")
    c = c if c._dtype_name == "bool" else _C.not_equal(c, _C.scalar(0, c))
    if size is None:
        if c.is_tracer:
            raise _C.ConcretizationError("compress: a traced condition needs size= (the number of slices kept)")
        return take(a, nonzero(c)[0], axis)
    (ind,) = nonzero(c, size=size, fill_value=n)
    moved = moveaxis(a, axis, 0)
    picked = take(moved, ind, 0, mode="fill", fill_value=fill_value) if n else _C.full(
        [size] + list(moved.shape[1:]), fill_value, a._dtype_name)
    return moveaxis(picked, 0, axis)


def extract(condition, arr, *, size=None, fill_value=0):
    """arr's elements where condition is True, both flattened."""
    return compress(ravel(asarray(condition)), ravel(asarray(arr)), size=size, fill_value=fill_value)


_IMMUTABLE = ("{}: tessera arrays are immutable, so it cannot modify its argument in place: pass inplace=False "
              "for the updated array as its result")


def put(a, ind, v, mode=None, *, inplace=True):
    """a flattened with the elements at ind set to v (repeated as needed), in a's shape. mode None or "fill":
    indices out of range are left out; "clip" clamps them, "wrap" takes them modulo the size. inplace=False
    is required, as JAX requires it."""
    if inplace:
        raise ValueError(_IMMUTABLE.format("put"))
    a = asarray(a)
    flat = ravel(a)
    ind = ravel(asarray(ind))
    v = ravel(asarray(v))
    n = flat.shape[0]
    if ind.shape[0] == 0:
        return a
    if v.shape[0] == 0:
        raise ValueError("put: v is empty but ind is not")
    if v.shape[0] != ind.shape[0]:
        v = resize(v, ind.shape[0])
    ind = _C.astype(ind, "i32") if ind._dtype_name != "i32" else ind
    if mode == "clip":
        ind = clip(ind, 0, n - 1)
    elif mode == "wrap":
        ind = ind % n
    elif mode in (None, "fill"):
        ind = where(_C.less(ind, _C.scalar(0, ind)), ind + n, ind)
    else:
        raise ValueError(f"put: mode must be None, 'fill', 'clip' or 'wrap', not {mode!r}")
    v = v if v._dtype_name == a._dtype_name else _C.astype(v, a._dtype_name)
    return reshape(flat.at[ind].set(v), tuple(a.shape))  # indices out of range are dropped


def put_along_axis(arr, indices, values, axis, inplace=True, *, mode=None):
    """arr with values put where take_along_axis(arr, indices, axis) reads; indices out of range are left out
    (mode None, "fill" or "drop") or clamped ("clip"). inplace=False is required, as JAX requires it."""
    if inplace:
        raise ValueError(_IMMUTABLE.format("put_along_axis"))
    a = asarray(arr)
    idx = asarray(indices)
    if axis is None:
        a, axis = ravel(a), 0
        idx = ravel(idx)
    axis = _canonical_axis(axis, a.ndim, "put_along_axis")
    if idx.ndim != a.ndim:
        raise ValueError(f"put_along_axis: indices must have arr's rank {a.ndim}; got shape {tuple(idx.shape)}")
    shape = tuple(idx.shape)
    idx = _C.astype(idx, "i32") if idx._dtype_name != "i32" else idx
    if mode == "clip":
        idx = clip(idx, 0, a.shape[axis] - 1)
    elif mode not in (None, "fill", "drop"):
        raise ValueError(f"put_along_axis: mode must be None, 'fill', 'drop' or 'clip', not {mode!r}")
    idx = where(_C.less(idx, _C.scalar(0, idx)), idx + a.shape[axis], idx)
    key = []
    for d in range(a.ndim):
        if d == axis:
            key.append(idx)
        else:
            s = [1] * a.ndim
            s[d] = shape[d]
            key.append(broadcast_to(_C.iota(s, d, "i32"), shape))
    v = broadcast_to(_C.astype(asarray(values), a._dtype_name), shape)
    return a.at[tuple(key)].set(v)  # indices out of range are dropped


def fill_diagonal(a, val, wrap=False, *, inplace=True):
    """a with its main diagonal (a[i, i, ...]) set to val (repeated as needed); a 2-d tall a restarts the
    diagonal every n+1 rows with wrap=True, as numpy. inplace=False is required, as JAX requires it."""
    if inplace:
        raise ValueError(_IMMUTABLE.format("fill_diagonal"))
    a = asarray(a)
    if a.ndim < 2:
        raise ValueError("fill_diagonal: array must be at least 2-d")
    if a.ndim > 2 and len(set(a.shape)) != 1:
        raise ValueError("fill_diagonal: all dimensions of input must be of equal length")
    flat_n = int(_np.prod(a.shape))
    if a.ndim == 2:
        step = a.shape[1] + 1
        end = flat_n if wrap else a.shape[1] * a.shape[1]
    else:
        step = 1 + int(_np.sum(_np.cumprod(a.shape[:-1])))
        end = flat_n
    positions = _np.arange(0, min(end, flat_n), step)
    return put(a, asarray(positions.astype(_np.int32)), val, inplace=False)


# ---- set operations -------------------------------------------------------------------------------------

def _first_of_runs(a):
    """True where the sorted 1-d a starts a run of equal values."""
    if a.shape[0] == 0:
        return _C.full([0], True, "bool")
    return concatenate([_C.full([1], True, "bool"), _C.not_equal(a[1:], a[:-1])], 0)


def _merged(ar1, ar2, assume_unique):
    """(values, valid): ar1's and ar2's values sorted together, each value's duplicates within one array marked
    invalid and sorted after its valid entries (so that equal neighbours that are both valid come from the two
    arrays). Traces: nothing is read from the device."""
    a, b = _promoted(ravel(asarray(ar1)), ravel(asarray(ar2)))
    a, b = sort(a), sort(b)
    fa = _C.full([a.shape[0]], True, "bool") if assume_unique else _first_of_runs(a)
    fb = _C.full([b.shape[0]], True, "bool") if assume_unique else _first_of_runs(b)
    values = concatenate([a, b], 0)
    invalid = _C.astype(logical_not(concatenate([fa, fb], 0)), "i32")
    values, invalid = _C.sort([values, invalid], 0, True, 2)
    return values, _C.equal(invalid, _C.scalar(0, invalid))


def union1d(ar1, ar2, *, size=None, fill_value=None):
    """The sorted unique values of ar1 and ar2 together (size= under jit, as unique)."""
    values, valid = _merged(ar1, ar2, False)
    return _select_values(values, _C.bitwise_and(valid, _first_of_runs(values)), size, fill_value, "union1d")


def intersect1d(ar1, ar2, assume_unique=False, return_indices=False, *, size=None, fill_value=None):
    """The sorted unique values in both ar1 and ar2 (size= under jit)."""
    if return_indices:
        raise NotImplementedError("intersect1d: return_indices=True is not supported; find the positions with "
                                  "searchsorted on the sorted inputs")
    values, valid = _merged(ar1, ar2, assume_unique)
    if values.shape[0] < 2:
        return _select_values(values[:0], valid[:0], size, fill_value, "intersect1d")
    both = _C.bitwise_and(_C.equal(values[1:], values[:-1]), _C.bitwise_and(valid[1:], valid[:-1]))
    return _select_values(values[:-1], both, size, fill_value, "intersect1d")


def setxor1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    """The sorted values in exactly one of ar1 and ar2 (size= under jit)."""
    values, valid = _merged(ar1, ar2, assume_unique)
    n = values.shape[0]
    if n == 0:
        return _select_values(values, valid, size, fill_value, "setxor1d")
    last = _C.full([1], True, "bool")
    # A valid entry that starts its run and is not followed by a valid equal one: the value is in one array.
    alone_after = concatenate([_C.bitwise_or(_C.not_equal(values[1:], values[:-1]), logical_not(valid[1:])), last], 0)
    keep = _C.bitwise_and(_C.bitwise_and(valid, _first_of_runs(values)), alone_after)
    return _select_values(values, keep, size, fill_value, "setxor1d")


# ---- vectorize --------------------------------------------------------------------------------------------

def _parse_signature(signature):
    """numpy's gufunc signature "(m,n),(n)->(m)" as ([('m', 'n'), ('n',)], [('m',)])."""
    import re
    compact = signature.replace(" ", "")
    arg = r"\((?:\w+(?:,\w+)*)?\)"
    if not re.fullmatch(rf"{arg}(?:,{arg})*->{arg}(?:,{arg})*", compact):
        raise ValueError(f"vectorize: not a valid gufunc signature: {signature!r}")
    ins, outs = compact.split("->")

    def dims(part):
        return [tuple(d for d in group.split(",") if d) for group in re.findall(r"\(([^)]*)\)", part)]

    return dims(ins), dims(outs)


def vectorize(pyfunc, *, excluded=frozenset(), signature=None):
    """numpy's vectorize as jax.numpy builds it: pyfunc applied over the broadcast leading (loop) dims of its
    array arguments with vmap, once per loop dim. signature ("(n),(n)->()") names each argument's trailing core
    dims, which pyfunc sees whole; without one every element is a call. excluded: positions or names of
    arguments passed through as they are."""
    from ._transforms import vmap
    ins, _ = _parse_signature(signature) if signature is not None else (None, None)

    def wrapped(*args, **kwargs):
        mapped = [i for i in range(len(args)) if i not in excluded]
        if ins is not None and len(ins) != len(mapped):
            raise TypeError(f"vectorize: the signature {signature!r} has {len(ins)} inputs; got {len(mapped)} "
                            "array arguments")
        arrays = [asarray(args[i]) for i in mapped]
        cores = ins if ins is not None else [()] * len(arrays)
        sizes = {}
        loops = []
        for a, core in zip(arrays, cores):
            if a.ndim < len(core):
                raise ValueError(f"vectorize: an argument of shape {tuple(a.shape)} has fewer dims than its core "
                                 f"dims {core} in {signature!r}")
            for name, size in zip(core, a.shape[a.ndim - len(core):]):
                if sizes.setdefault(name, size) != size:
                    raise ValueError(f"vectorize: core dim {name!r} is {sizes[name]} in one argument and {size} in "
                                     "another")
            loops.append(tuple(a.shape[:a.ndim - len(core)]))
        batch = _np.broadcast_shapes(*loops) if loops else ()
        arrays = [broadcast_to(a, batch + tuple(a.shape[a.ndim - len(core):])) for a, core in zip(arrays, cores)]

        def call(*xs):
            full = list(args)
            for i, x in zip(mapped, xs):
                full[i] = x
            return pyfunc(*full, **kwargs)

        fn = call
        for _ in batch:
            fn = vmap(fn)
        return fn(*arrays)

    wrapped.__name__ = getattr(pyfunc, "__name__", "vectorized")
    wrapped.__doc__ = getattr(pyfunc, "__doc__", None)
    return wrapped
