"""tessera.numpy's array manipulation: reshape, transpose and the axis moves, joins and splits, pad, tile,
repeat, roll and flip."""

import builtins as _builtins
import operator as _operator

import numpy as _np

from . import _tessera as _C
from ._np_base import Array, int32, _axes, _axis_list, _canonical_axis, _no_axes, _shape
from ._np_creation import asarray
from ._np_elementwise import remainder


def reshape(a, newshape, order="C"):
    """order="F" fills the new shape in column-major order: the reverse of the reversed shape, transposed."""
    if order == "C":
        return _C.reshape(a, _shape(newshape))
    if order != "F":
        raise NotImplementedError(f"reshape: order={order!r} (\"C\" and \"F\" are supported)")
    shape = _shape(newshape)
    return _C.transpose(_C.reshape(_C.transpose(a, []), shape[::-1]), [])


def ravel(a):
    return _C.reshape(a, [-1])


def transpose(a, axes=None):
    return _C.transpose(a, [] if axes is None else list(axes))


def swapaxes(a, axis1, axis2):
    a = asarray(a)
    axis1, axis2 = _canonical_axis(axis1, a.ndim, "swapaxes"), _canonical_axis(axis2, a.ndim, "swapaxes")
    perm = list(range(a.ndim))
    perm[axis1], perm[axis2] = perm[axis2], perm[axis1]
    return _C.transpose(a, perm)


def moveaxis(a, source, destination):
    """The axes `source` moved to the positions `destination`, the others kept in order."""
    a = asarray(a)
    source = [_canonical_axis(i, a.ndim, "moveaxis") for i in _axis_list(source)]
    destination = [_canonical_axis(i, a.ndim, "moveaxis") for i in _axis_list(destination)]
    if len(source) != len(destination):
        raise ValueError(f"moveaxis: {len(source)} source axes but {len(destination)} destinations")
    if len(set(source)) != len(source) or len(set(destination)) != len(destination):
        raise ValueError(f"moveaxis: repeated axis in source {source} or destination {destination}")
    perm = [i for i in range(a.ndim) if i not in source]
    for dest, src in sorted(zip(destination, source)):
        perm.insert(dest, src)
    return _C.transpose(a, perm)


def broadcast_to(a, shape):
    return _C.broadcast_to(a, _shape(shape))


def expand_dims(a, axis):
    """axis: an int or a tuple of positions in the result."""
    if isinstance(axis, (int, _np.integer)):
        return _C.expand_dims(a, axis)
    a = asarray(a)
    out_ndim = a.ndim + len(axis)
    positions = sorted(_canonical_axis(i, out_ndim, "expand_dims") for i in axis)
    if len(set(positions)) != len(positions):
        raise ValueError(f"expand_dims: repeated axis in {tuple(axis)}")
    for i in positions:  # ascending, so each lands where it is in the result
        a = _C.expand_dims(a, i)
    return a


def squeeze(a, axis=None):
    return asarray(a) if _no_axes(axis) else _C.squeeze(a, _axes(axis))


def concatenate(arrays, axis=0):
    """axis=None concatenates the flattened arrays (numpy's)."""
    if axis is None:
        return _C.concatenate([_C.reshape(asarray(a), [-1]) for a in arrays], 0)
    return _C.concatenate(list(arrays), axis)


def stack(arrays, axis=0):
    return _C.stack(list(arrays), axis)


def split(a, indices_or_sections, axis=0):
    """numpy's split: into equal sections, or at the given indices, along axis."""
    a = asarray(a)
    axis = _canonical_axis(axis, a.ndim, "split")
    n = a.shape[axis]
    if isinstance(indices_or_sections, (int, _np.integer)):
        sections = _operator.index(indices_or_sections)
        if sections <= 0:
            raise ValueError(f"split: the number of sections must be positive, not {sections}")
        if n % sections:
            raise ValueError(f"split: an axis of size {n} does not divide into {sections} equal sections")
        bounds = [i * (n // sections) for i in range(sections + 1)]
    else:
        bounds = [0] + [_builtins.min(_builtins.max(i % n if i < 0 else i, 0), n) for i in indices_or_sections] + [n]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        starts = [0] * a.ndim
        limits = list(a.shape)
        starts[axis], limits[axis] = lo, _builtins.max(lo, hi)
        out.append(_C.slice(a, starts, limits, [1] * a.ndim))
    return out


def _pad_widths(pad_width, ndim):
    """numpy's pad_width forms (n, (n,), (before, after), ((before, after),), one pair per axis) as ndim
    (before, after) pairs."""
    widths = _np.asarray(pad_width._host_view() if isinstance(pad_width, Array) else pad_width)
    if widths.size and widths.dtype.kind not in "iu":
        raise TypeError(f"pad: pad_width must be integers, not {pad_width!r}")
    try:
        widths = _np.broadcast_to(widths, (ndim, 2))
    except ValueError:
        raise ValueError(f"pad: pad_width {pad_width!r} does not fit an array of rank {ndim}: give n, (before, "
                         f"after) or one (before, after) pair per axis") from None
    if (widths < 0).any():
        raise ValueError(f"pad: pad_width {pad_width!r} has a negative width")
    return [(int(lo), int(hi)) for lo, hi in widths]


# The modes whose values are elements of the array: numpy's own pad of an index vector [0, n) gives, for
# each position of the padded axis, which element it copies; a take then gathers them (and its gradient
# scatters them back).
_INDEX_PAD_MODES = ("edge", "wrap", "reflect", "symmetric")


def pad(array, pad_width, mode="constant", **kwargs):
    """numpy's pad for the modes constant (constant_values: a scalar, traced too, or numpy's per-axis (before,
    after) forms), edge, wrap, reflect and symmetric (reflect_type="even")."""
    x = asarray(array)
    widths = _pad_widths(pad_width, x.ndim)
    if mode == "constant":
        unknown = set(kwargs) - {"constant_values"}
        if unknown:
            raise TypeError(f"pad: mode 'constant' takes constant_values, not {', '.join(sorted(unknown))}")
        return _pad_constant(x, widths, kwargs.get("constant_values", 0))
    if mode not in _INDEX_PAD_MODES:
        raise NotImplementedError(f"pad: mode {mode!r} (constant, {', '.join(_INDEX_PAD_MODES)} are supported)")
    if kwargs.get("reflect_type", "even") != "even" or set(kwargs) - {"reflect_type"}:
        raise NotImplementedError(f"pad: mode {mode!r} takes no arguments here but reflect_type='even', not {kwargs}")
    for axis, (lo, hi) in enumerate(widths):
        if lo or hi:
            if x.shape[axis] == 0:
                raise ValueError(f"pad: can't extend the empty axis {axis} in mode {mode!r}")
            x = _C.take(x, asarray(_np.pad(_np.arange(x.shape[axis]), (lo, hi), mode=mode)), axis)
    return x


def _pad_constant(x, widths, value):
    lows, highs = [lo for lo, _ in widths], [hi for _, hi in widths]
    zeros_ = [0] * x.ndim
    if isinstance(value, Array) and value.is_tracer:
        if value.ndim:
            raise NotImplementedError("pad: a traced constant_values must be a scalar")
        # Known only when run: pad with 0, then put the value where the padding is.
        inside = _C.pad(_C.full(list(x.shape), 1.0, "bool"), lows, highs, 0.0, zeros_)
        return _C.where(inside, _C.pad(x, lows, highs, 0.0, zeros_), _C.astype(value, x._dtype_name))
    values = _np.asarray(value._host_view() if isinstance(value, Array) else value, dtype=_np.float64)
    if values.ndim == 0:
        return _C.pad(x, lows, highs, float(values), zeros_)
    try:
        values = _np.broadcast_to(values, (x.ndim, 2))
    except ValueError:
        raise ValueError(f"pad: constant_values {value!r} does not fit an array of rank {x.ndim}") from None
    # One axis at a time, as numpy fills them: a later axis's values take the corners.
    for axis, ((lo, hi), (before, after)) in enumerate(zip(widths, values)):
        for side, width, v in ((0, lo, before), (1, hi, after)):
            if width:
                w = [0] * x.ndim
                w[axis] = width
                x = _C.pad(x, w if side == 0 else zeros_, zeros_ if side == 0 else w, float(v), zeros_)
    return x


def tile(A, reps):
    """A repeated reps times along each axis: [s0, s1] -> [1, s0, 1, s1] -> broadcast [r0, s0, r1, s1] ->
    [r0 s0, r1 s1] (one broadcast; its gradient is a sum)."""
    A = asarray(A)
    reps = (reps,) if isinstance(reps, (int, _np.integer)) else tuple(reps)
    reps = tuple(_operator.index(r) for r in reps)
    if _builtins.any(r < 0 for r in reps):
        raise ValueError(f"tile: negative repetitions {reps}")
    d = _builtins.max(A.ndim, len(reps))
    reps = (1,) * (d - len(reps)) + reps
    shape = (1,) * (d - A.ndim) + tuple(A.shape)
    x = _C.reshape(A, [v for s in shape for v in (1, s)])
    x = _C.broadcast_to(x, [v for r, s in zip(reps, shape) for v in (r, s)])
    return _C.reshape(x, [r * s for r, s in zip(reps, shape)])


def repeat(a, repeats, axis=None, *, total_repeat_length=None):
    """Each element repeats times along axis (None: of the flattened array). An int repeats is a broadcast;
    a known array of counts a gather. Traced counts need total_repeat_length= (the result's length, which
    must be known): element i fills the positions before the running count passes them, and the last
    element fills any that remain, as jax.numpy."""
    a = asarray(a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _canonical_axis(axis, a.ndim, "repeat")
    n = a.shape[axis]
    traced = isinstance(repeats, Array) and repeats.is_tracer
    if total_repeat_length is not None:
        from ._np_reductions import sum  # here, not at the top: _np_reductions imports this module
        counts = _C.broadcast_to(asarray(repeats, int32), [n])
        positions = _C.iota([total_repeat_length, 1], 0, "i32")
        # index[j] = how many running counts are <= j, clipped to the last element.
        index = sum(_C.less_equal(_C.reshape(_C.cumsum(counts, 0, False), [1, n]), positions), axis=1)
        return _C.take(a, _C.minimum(index, n - 1), axis)
    if traced:
        raise _C.ConcretizationError("repeat: the counts of a traced repeats are not known while tracing; give "
                                     "total_repeat_length= (the result's length)")
    counts = _np.asarray(repeats._host_view() if isinstance(repeats, Array) else repeats)
    if counts.dtype.kind not in "iu" or (counts < 0).any():
        raise ValueError(f"repeat: repeats must be non-negative integers, not {repeats!r}")
    if counts.ndim == 0 or counts.size == 1:
        r = int(counts.reshape(()))
        # [..., n, ...] -> [..., n, 1, ...] -> broadcast [..., n, r, ...] -> [..., n r, ...]
        x = _C.expand_dims(a, axis + 1)
        shape = list(a.shape)
        x = _C.broadcast_to(x, shape[:axis + 1] + [r] + shape[axis + 1:])
        return _C.reshape(x, shape[:axis] + [n * r] + shape[axis + 1:])
    if counts.shape != (n,):
        raise ValueError(f"repeat: {counts.size} counts for an axis of size {n}")
    return _C.take(a, asarray(_np.repeat(_np.arange(n, dtype=_np.int32), counts)), axis)


def _roll_axis(a, shift, axis):
    n = a.shape[axis]
    if n == 0:
        return a
    if isinstance(shift, Array) and not shift.is_tracer:
        shift = int(shift.item())
    if isinstance(shift, Array):
        # A traced shift: gather element (i - shift) mod n into position i.
        return _C.take(a, remainder(_C.iota([n], 0, "i32") - _C.astype(shift, "i32"), n), axis)
    s = _operator.index(shift) % n
    if s == 0:
        return a
    # The last s elements, then the first n - s.
    return concatenate([_C.slice(a, *_axis_slice(a, axis, n - s, n)), _C.slice(a, *_axis_slice(a, axis, 0, n - s))],
                       axis)


def _axis_slice(a, axis, lo, hi):
    starts, limits = [0] * a.ndim, list(a.shape)
    starts[axis], limits[axis] = lo, hi
    return starts, limits, [1] * a.ndim


def roll(a, shift, axis=None):
    """Elements shifted by shift along axis, those past the end coming back at the start; axis=None rolls
    the flattened array. shift and axis may be tuples (each pair in turn); a traced shift is a gather."""
    a = asarray(a)
    if axis is None:
        return _C.reshape(roll(ravel(a), shift, 0), list(a.shape))
    shifts = shift if isinstance(shift, (tuple, list)) else [shift]
    axes = _axis_list(axis)
    if isinstance(shift, Array) and shift.ndim:
        shifts = [shift[i] for i in range(shift.shape[0])]
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    elif len(axes) == 1:
        axes = axes * len(shifts)
    if len(shifts) != len(axes):
        raise ValueError(f"roll: {len(shifts)} shifts for {len(axes)} axes")
    for s, ax in zip(shifts, axes):
        a = _roll_axis(a, s, _canonical_axis(ax, a.ndim, "roll"))
    return a


def flip(a, axis=None):
    a = asarray(a)
    return _C.flip(a, list(range(a.ndim)) if axis is None else _axes(axis))
