"""tessera.numpy's indexing: where, nonzero and take, x[key] (Array.__getitem__) and x.at[key]'s updates."""

import builtins as _builtins
import operator as _operator

import numpy as _np

from . import _tessera as _C
from ._np_base import Array, _canonical_axis, _no_out
from ._np_creation import asarray, _holds_array
from ._np_elementwise import maximum, minimum, multiply, remainder
from ._np_layout import ravel


def where(condition, x=None, y=None, *, size=None, fill_value=None):
    """x where condition, else y. With condition alone: nonzero(condition) (size= for traced arrays)."""
    if x is None and y is None:
        return nonzero(condition, size=size, fill_value=fill_value)
    if x is None or y is None:
        raise ValueError("where: give both x and y, or only the condition (which is nonzero(condition))")
    return _C.where(condition, x, y)


def nonzero(a, *, size=None, fill_value=None):
    """The indices of the nonzero elements, one int32 array per axis. Their number depends on the values, so
    a traced array needs size= (the result's length): the first `size` indices, the rest fill_value (0, or
    one per axis)."""
    a = asarray(a)
    if a.ndim == 0:
        raise ValueError("nonzero: a 0-d array has no indices (use atleast_1d or reshape to (1,))")
    if size is None:
        if a.is_tracer:
            raise _C.ConcretizationError(
                f"nonzero: the number of nonzero elements of a traced array ({a._dtype_name}{list(a.shape)}) is "
                "not known while tracing; give size= (and fill_value=), or use where(condition, x, y)")
        return tuple(asarray(i.astype(_np.int32)) for i in _np.nonzero(_np.asarray(a._host_view())))
    flat = _C.reshape(_C.not_equal(a, 0) if a._dtype_name != "bool" else a, [-1])
    counted = _C.astype(flat, "i32")
    # Nonzero element i goes to output position (running count - 1); the others to `size`, which the scatter
    # drops as out of range, as it drops those past `size`.
    target = _C.where(flat, _C.cumsum(counted, 0, False) - 1, size)
    flat_index = _C.scatter(_C.full([size], 0.0, "i32"), target, _C.iota([a.size], 0, "i32"), 0)
    filled = _C.less(_C.iota([size], 0, "i32"), _C.sum(counted, [], False))
    fills = _np.broadcast_to(_np.asarray(0 if fill_value is None else fill_value), (a.ndim,))
    out = []
    for axis, (dim, fill) in enumerate(zip(a.shape, fills)):
        stride = int(_np.prod(a.shape[axis + 1:]))
        index = _C.rem(_C.divide(flat_index, _builtins.max(stride, 1)), _builtins.max(dim, 1))
        out.append(_C.where(filled, index, int(fill)))
    return tuple(out)


def flatnonzero(a, *, size=None, fill_value=None):
    return nonzero(ravel(asarray(a)), size=size, fill_value=fill_value)[0]


def argwhere(a, *, size=None, fill_value=None):
    """nonzero's indices as rows: [count, ndim]."""
    a = asarray(a)
    if a.ndim == 0:  # [count, 0], as jax.numpy
        rows = argwhere(_C.reshape(a, [1]), size=size, fill_value=fill_value)
        return _C.slice(rows, [0, 0], [rows.shape[0], 0], [1, 1])
    return _C.stack(list(nonzero(a, size=size, fill_value=fill_value)), 1)


def _wrapped(indices, n):
    """Integer indices with the negative ones counted from the end of an axis of size n, as jax.numpy does
    before a gather (where(i < 0, i + n, i)); the engine's take clamps them to 0."""
    if isinstance(indices, Array):
        if indices._dtype_name == "u8":
            return _C.astype(indices, "i32")  # the engine's gathers take i32, i64 and u32 indices
        if indices._dtype_name in ("u32", "bool"):
            return indices
        return _C.where(_C.less(indices, 0), indices + n, indices)
    host = _np.asarray(indices)
    if host.dtype.kind == "i":
        host = _np.where(host < 0, host + n, host)
    return asarray(host.astype(_np.int32) if host.dtype == _np.uint8 else host)


_MODES = (None, "fill", "clip", "wrap", "promise_in_bounds")


def _default_fill(dtype_name):
    """jax.numpy's fill for out-of-range gathers: NaN, the most negative integer, the largest unsigned one, True."""
    if dtype_name in ("f32", "f64", "f16", "bf16"):
        return _np.nan
    return {"i32": -2**31, "i64": -2**63, "u8": 255, "u32": 2**32 - 1, "bool": True}[dtype_name]


def _filled(result, indices, n, fill_value, mask_shape):
    """result with fill_value where indices (before counting negatives from the end) lie outside [-n, n).
    mask_shape: the shape the in-range mask takes to broadcast against result."""
    indices = asarray(indices)
    if indices._dtype_name in ("u8", "u32"):
        inside = _C.less(indices, n)
    else:
        inside = _C.bitwise_and(_C.greater_equal(indices, -n), _C.less(indices, n))
    fill = _default_fill(result._dtype_name) if fill_value is None else fill_value
    return _C.where(_C.reshape(inside, list(mask_shape)), result, _C.scalar(fill, result))


def _check_mode(mode, name):
    if mode not in _MODES:
        raise ValueError(f"{name}: mode must be one of {_MODES[1:]} or None, not {mode!r}")


def take(a, indices, axis=None, out=None, mode=None, unique_indices=False, indices_are_sorted=False,
         fill_value=None):
    """jax.numpy's take. mode None or "fill": negative indices count from the end, others out of range give
    fill_value (NaN for floats, the most negative integer, the largest unsigned one, True for bools); "clip":
    indices clamped to the axis (negative ones to 0); "wrap": taken modulo the axis' size;
    "promise_in_bounds": negative ones count from the end, the rest clamped."""
    _no_out(out, "take")
    _check_mode(mode, "take")
    a = asarray(a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _canonical_axis(axis, a.ndim, "take")
    n = a.shape[axis]
    idx = asarray(indices)
    if mode == "wrap":
        return _C.take(a, remainder(idx, n), axis)
    if mode == "clip":
        return _C.take(a, idx, axis)  # the engine's take clamps
    r = _C.take(a, _wrapped(idx, n), axis)
    if mode == "promise_in_bounds":
        return r
    mask_shape = [1] * axis + list(idx.shape) + [1] * (a.ndim - axis - 1)
    return _filled(r, idx, n, fill_value, mask_shape)


def take_along_axis(arr, indices, axis, mode=None, fill_value=None):
    """jax.numpy's take_along_axis: negative indices count from the end; others out of range give fill_value
    (mode None or "fill", defaults as take's) or are clamped (mode="clip" or "promise_in_bounds")."""
    _check_mode(mode, "take_along_axis")
    arr = asarray(arr)
    idx = asarray(indices)
    n = arr.shape[axis]
    if mode == "wrap":
        return _C.take_along_axis(arr, remainder(idx, n), axis)
    r = _C.take_along_axis(arr, _wrapped(idx, n), axis)
    if mode in ("clip", "promise_in_bounds"):
        return r
    return _filled(r, idx, n, fill_value, idx.shape)


# ---- x[key] and x.at[key] ---------------------------------------------------------------------------------


class NonConcreteBooleanIndexError(IndexError):
    """x[mask] with a traced mask: the result's shape would depend on the mask's values (jax.errors' name)."""


def _is_mask(k):
    """A boolean array used as an index (not a 0-d one)."""
    if isinstance(k, Array):
        return k._dtype_name == "bool" and k.ndim > 0
    if isinstance(k, _np.ndarray):
        return k.dtype == _np.bool_ and k.ndim > 0
    return isinstance(k, list) and len(k) > 0 and not _holds_array(k) and _np.asarray(k).dtype == _np.bool_


def _mask_to_indices(x, key):
    """For a key (a tuple) holding a boolean mask after full slices: (x with the mask's dims flattened into
    one, the key with the mask replaced by the int32 flat indices of its True elements). The mask must be
    known: a traced one raises NonConcreteBooleanIndexError."""
    pos = next(i for i, k in enumerate(key) if _is_mask(k))
    if _builtins.any(not (isinstance(k, slice) and k == slice(None)) for k in key[:pos]):
        raise NotImplementedError("indexing: a boolean mask is supported first or after full slices (x[:, mask])")
    rest = key[pos + 1:]
    if _builtins.any(isinstance(k, (Array, _np.ndarray, list)) for k in rest):
        raise NotImplementedError("indexing: a boolean mask beside other array indices is not supported")
    mask = key[pos]
    if isinstance(mask, Array) and mask.is_tracer:
        raise NonConcreteBooleanIndexError(
            f"indexing with a traced boolean mask ({mask._dtype_name}{list(mask.shape)}): the number of selected "
            "elements is not known while tracing. Use tnp.where(mask, x, other) to keep the shape, or a mask "
            "known when tracing (a numpy array)")
    host = _np.asarray(mask._host_view() if isinstance(mask, Array) else mask, dtype=_np.bool_)
    if pos + host.ndim > x.ndim:
        raise IndexError(f"too many indices for an array of shape {x.shape}: a boolean mask of shape "
                         f"{host.shape} at axis {pos}")
    for axis, (n, m) in enumerate(zip(x.shape[pos:], host.shape), pos):
        if n != m:
            raise IndexError(f"boolean index did not match indexed array along axis {axis}; the axis has size "
                             f"{n} but the mask's dimension is {m} (mask shape {host.shape}, array {x.shape})")
    shape = list(x.shape)
    flat = _C.reshape(x, shape[:pos] + [host.size] + shape[pos + host.ndim:])
    return flat, key[:pos] + (asarray(_np.flatnonzero(host).astype(_np.int32)),) + rest


def _getitem(x, key):
    """Basic indexing (ints, slices, None, ...) with one slice op and one reshape; one integer array (Array,
    numpy array or list) on one axis gathers with take; a known boolean mask (after full slices) gathers the
    elements where it is True."""
    if not isinstance(key, tuple):
        key = (key,)
    if _builtins.any(_is_mask(k) for k in key if isinstance(k, (Array, _np.ndarray, list))):
        flat, key = _mask_to_indices(x, key)
        pos = next(i for i, k in enumerate(key) if isinstance(k, Array))
        taken = _C.take(flat, key[pos], pos)
        rest = key[pos + 1:]
        return _getitem(taken, (slice(None),) * (pos + 1) + rest) if rest else taken
    n_used = len([k for k in key if k is not None and k is not Ellipsis])
    ellipses = [i for i, k in enumerate(key) if k is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if n_used > x.ndim:
        raise IndexError(f"too many indices for an array of shape {x.shape}")
    if ellipses:
        at = ellipses[0]
        key = key[:at] + (slice(None),) * (x.ndim - n_used) + key[at + 1:]
    else:
        key = key + (slice(None),) * (x.ndim - n_used)
    advanced = [i for i, k in enumerate(key) if isinstance(k, (Array, _np.ndarray, list))]
    if advanced:
        if _builtins.any(k is None for k in key):
            # The new unit dims first (every other entry a full slice), then the key with them as full slices:
            # the same result and the same placement of the gathered dims as numpy's.
            x = _getitem(x, tuple(k if k is None else slice(None) for k in key))
            return _getitem(x, tuple(slice(None) if k is None else k for k in key))
        if len(advanced) == 1 and _builtins.all(isinstance(k, slice) and k == slice(None)
                                                for i, k in enumerate(key) if i != advanced[0]):
            return _C.take(x, _wrapped(key[advanced[0]], x.shape[advanced[0]]), advanced[0])
        return _advanced_getitem(x, key)
    starts, limits, strides, out_shape, reversed_axes = [], [], [], [], []
    dim = 0
    for k in key:
        if k is None:
            out_shape.append(1)
            continue
        n = x.shape[dim]
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            if step < 0:
                # Reversed: flip the axis, then slice it forwards.
                start, stop, step = n - 1 - start, n - 1 - stop, -step
                reversed_axes.append(dim)
            count = _builtins.max(0, -(-(stop - start) // step))
            starts.append(start)
            limits.append(start + _builtins.max(count - 1, 0) * step + (1 if count else 0))
            strides.append(step)
            out_shape.append(count)
        else:
            i = _operator.index(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}")
            i %= n
            starts.append(i)
            limits.append(i + 1)
            strides.append(1)
        dim += 1
    if reversed_axes:
        x = _C.flip(x, reversed_axes)
    y = _C.slice(x, starts, limits, strides)
    return y if list(y.shape) == out_shape else _C.reshape(y, out_shape)


def _advanced_getitem(x, key):
    """numpy's advanced indexing for a full-length key of slices, ints and integer arrays (at least one): the
    ints and arrays broadcast together to a shape B, each index counted from the end when negative and clamped
    to its axis (JAX's gather); B goes where the first of them was if they are adjacent, else in front. One
    take of the indexed axes flattened into one."""
    is_adv = [not isinstance(k, slice) for k in key]
    # The slices first (the indexed axes kept whole), then the indexed axes to the front, flattened.
    x = _getitem(x, tuple(slice(None) if adv else k for k, adv in zip(key, is_adv)))
    adv_axes = [i for i, adv in enumerate(is_adv) if adv]
    rest_axes = [i for i, adv in enumerate(is_adv) if not adv]
    indices = [asarray(key[i]) for i in adv_axes]
    for i in indices:
        if i._dtype_name in ("f32", "f64", "f16", "bf16", "bool"):
            raise IndexError(f"indexing: arrays used as indices must be of integer type, got {i._dtype_name}")
    shape = list(_np.broadcast_shapes(*[tuple(i.shape) for i in indices]))
    flat = None
    for axis, i in zip(adv_axes, indices):
        n = x.shape[axis]
        i = minimum(maximum(_wrapped(i, n), 0), _builtins.max(n - 1, 0))
        i = _C.broadcast_to(_C.astype(i, "i32"), shape)
        flat = i if flat is None else flat * n + i
    moved = _C.transpose(x, adv_axes + rest_axes)
    size = int(_np.prod([x.shape[a] for a in adv_axes]))
    moved = _C.reshape(moved, [size] + [x.shape[a] for a in rest_axes])
    out = _C.take(moved, flat, 0)  # [B..., rest...]
    adjacent = adv_axes == list(range(adv_axes[0], adv_axes[-1] + 1))
    if not adjacent or adv_axes[0] == 0:
        return out
    p, nb = adv_axes[0], len(shape)  # the rest axes before the first indexed one come first
    order = list(range(nb, nb + p)) + list(range(nb)) + list(range(nb + p, out.ndim))
    return _C.transpose(out, order)


def _basic_region(x, key):
    """For a basic index with positive steps: (starts, limits, strides, the region's shape with indexed dims
    kept as 1). None, negative steps and integer arrays are left to _getitem."""
    if not isinstance(key, tuple):
        key = (key,)
    if _builtins.any(k is None or isinstance(k, (Array, _np.ndarray, list)) for k in key):
        return None
    ellipses = [i for i, k in enumerate(key) if k is Ellipsis]
    n_used = len(key) - len(ellipses)
    if n_used > x.ndim or len(ellipses) > 1:
        raise IndexError(f"bad index {key} for an array of shape {x.shape}")
    if ellipses:
        key = key[:ellipses[0]] + (slice(None),) * (x.ndim - n_used) + key[ellipses[0] + 1:]
    key = key + (slice(None),) * (x.ndim - len(key))
    starts, limits, strides, shape = [], [], [], []
    for k, n in zip(key, x.shape):
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            if step < 0:
                return None
            count = _builtins.max(0, -(-(stop - start) // step))
            starts.append(start)
            limits.append(start + (count - 1) * step + 1 if count else start)
            strides.append(step)
            shape.append(count)
        else:
            i = _operator.index(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for size {n}")
            starts.append(i % n)
            limits.append(i % n + 1)
            strides.append(1)
            shape.append(1)
    return starts, limits, strides, shape


class _IndexUpdate:
    """x.at[index].set(v) / .add(v) / .mul(v) / .min(v) / .max(v) / .get(): a new array with the indexed
    elements replaced or combined with v, as jax.numpy's .at. Basic indices (ints, slices with positive steps,
    ...) place the values with a pad; one integer array on one axis scatters with the engine's scatter ops:
    negative indices count from the end, indices still out of range are dropped, and where an index repeats
    set keeps the last value in index order, add sums, mul multiplies and min / max keep the extreme."""

    def __init__(self, x, key):
        self._x, self._key = x, key

    def get(self, indices_are_sorted=False, unique_indices=False, mode=None, fill_value=None):
        """x[key]; mode="fill" gives fill_value (take's defaults) for out-of-range entries of an integer array
        on one axis, as jax.numpy's .at[].get(mode="fill")."""
        _check_mode(mode, "at[].get")
        key = self._key if isinstance(self._key, tuple) else (self._key,)
        arrays = [i for i, k in enumerate(key) if isinstance(k, (Array, _np.ndarray, list))]
        if mode == "fill" and arrays:
            if len(arrays) > 1 or _builtins.any(not (isinstance(k, slice) and k == slice(None))
                                                for i, k in enumerate(key) if i != arrays[0]):
                raise NotImplementedError("at[].get(mode='fill'): one integer array with full slices elsewhere")
            return take(self._x, key[arrays[0]], axis=arrays[0], fill_value=fill_value)
        return _getitem(self._x, self._key)

    def _placed(self, values):
        """values broadcast into the indexed region and padded to x's shape, and the region's mask."""
        x = self._x
        region = _basic_region(x, self._key)
        if region is None:
            raise NotImplementedError("at[]: basic indices with positive steps, or one integer array on one axis")
        starts, limits, strides, shape = region
        # values: broadcast to what x[key] gives, then shaped as the region (indexed dims kept as 1).
        indexed = list(_getitem(x, self._key).shape)
        v = _C.reshape(_C.broadcast_to(_C.astype(asarray(values), x._dtype_name), indexed), shape)
        high = [n - l for n, l in zip(x.shape, limits)]
        interior = [s - 1 for s in strides]
        mask = _C.pad(_C.full(shape, 1.0, "bool"), starts, high, 0.0, interior)
        return _C.pad(v, starts, high, 0.0, interior), mask

    def _scatter(self, op, values):
        """For one integer array on one axis: x with the values scattered by the engine op `op` (scatter,
        scatter_add, ...), or None for other indices."""
        key = self._key if isinstance(self._key, tuple) else (self._key,)
        arrays = [i for i, k in enumerate(key) if isinstance(k, (Array, _np.ndarray, list))]
        if not arrays:
            return None
        taken = _getitem(self._x, key)  # checks the index as indexing does
        single = len(arrays) == 1 and _builtins.all(isinstance(k, slice) and k == slice(None)
                                                   for i, k in enumerate(key) if i != arrays[0])
        if not single:
            return self._scatter_advanced(op, values, key, taken.shape)
        axis = arrays[0]
        idx = asarray(key[axis])
        idx = _C.where(idx < 0, idx + self._x.shape[axis], idx)
        v = _C.broadcast_to(_C.astype(asarray(values), self._x._dtype_name), list(taken.shape))
        return getattr(_C, op)(self._x, idx, v, axis)

    def _scatter_advanced(self, op, values, key, taken_shape):
        """Several integer arrays and ints (x.at[i, j], x.at[0, j]) with full slices elsewhere: one scatter
        over the indexed axes flattened into one. Entries out of range on any axis are dropped (JAX's mode)."""
        x = self._x
        n_used = len([k for k in key if k is not Ellipsis])
        ellipses = [i for i, k in enumerate(key) if k is Ellipsis]
        if ellipses:
            at = ellipses[0]
            key = key[:at] + (slice(None),) * (x.ndim - n_used) + key[at + 1:]
        key = key + (slice(None),) * (x.ndim - len(key))
        if _builtins.any(k is None or (isinstance(k, slice) and k != slice(None)) for k in key):
            raise NotImplementedError("at[]: integer arrays and ints with full slices elsewhere are supported")
        adv_axes = [i for i, k in enumerate(key) if not isinstance(k, slice)]
        rest_axes = [i for i, k in enumerate(key) if isinstance(k, slice)]
        indices = [asarray(key[i]) for i in adv_axes]
        shape = list(_np.broadcast_shapes(*[tuple(i.shape) for i in indices]))
        flat, inside = None, None
        for axis, i in zip(adv_axes, indices):
            n = x.shape[axis]
            i = _C.broadcast_to(_C.astype(_wrapped(i, n), "i32"), shape)
            ok = _C.bitwise_and(_C.greater_equal(i, 0), _C.less(i, n))
            inside = ok if inside is None else _C.bitwise_and(inside, ok)
            flat = i if flat is None else flat * n + i
        size = int(_np.prod([x.shape[a] for a in adv_axes]))
        flat = _C.where(inside, flat, size)  # out of range: dropped by the scatter
        moved = _C.reshape(_C.transpose(x, adv_axes + rest_axes), [size] + [x.shape[a] for a in rest_axes])
        v = _C.broadcast_to(_C.astype(asarray(values), x._dtype_name), list(taken_shape))
        nb = len(shape)
        adjacent = adv_axes == list(range(adv_axes[0], adv_axes[-1] + 1))
        if adjacent and adv_axes[0] > 0:  # x[key] put B after the rest axes before it: bring it to the front
            p = adv_axes[0]
            v = _C.transpose(v, list(range(p, p + nb)) + list(range(p)) + list(range(p + nb, v.ndim)))
        out = getattr(_C, op)(moved, flat, v, 0)
        out = _C.reshape(out, [x.shape[a] for a in adv_axes] + [x.shape[a] for a in rest_axes])
        return _C.transpose(out, list(_np.argsort(adv_axes + rest_axes)))

    def _selects_nothing(self):
        """A basic index whose region is empty (x.at[5:] of 5 elements, x.at[3:1]): the update changes
        nothing, as in numpy and JAX, where a pad to x's shape could not be made."""
        region = _basic_region(self._x, self._key)
        return region is not None and 0 in region[3]

    def _update(self, op, values, combine):
        scattered = self._scatter(op, values)
        if scattered is not None:
            return scattered
        if self._selects_nothing():
            return self._x
        placed, mask = self._placed(values)
        return _C.where(mask, combine(self._x, placed), self._x)

    def set(self, values):
        return self._update("scatter", values, lambda x, v: v)

    def add(self, values):
        scattered = self._scatter("scatter_add", values)
        if scattered is not None:
            return scattered
        if self._selects_nothing():
            return self._x
        return self._x + self._placed(values)[0]  # zeros outside the region: no mask needed

    def mul(self, values):
        return self._update("scatter_mul", values, multiply)

    multiply = mul

    def min(self, values):
        return self._update("scatter_min", values, minimum)

    def max(self, values):
        return self._update("scatter_max", values, maximum)


class _MaskUpdate:
    """x.at[mask]: the update of x with the mask's dims flattened, at the mask's True elements, reshaped back."""

    def __init__(self, x, key):
        self._shape = list(x.shape)
        self._inner = _IndexUpdate(*_mask_to_indices(x, key))

    def get(self, indices_are_sorted=False, unique_indices=False, mode=None, fill_value=None):
        return self._inner.get()

    def _reshaped(name):
        def update(self, values):
            return _C.reshape(getattr(self._inner, name)(values), self._shape)

        update.__name__ = name
        return update

    set, add, mul, min, max = _reshaped("set"), _reshaped("add"), _reshaped("mul"), _reshaped("min"), _reshaped("max")
    multiply = mul
    del _reshaped


class _IndexHelper:
    def __init__(self, x):
        self._x = x

    def __getitem__(self, key):
        keys = key if isinstance(key, tuple) else (key,)
        if _builtins.any(_is_mask(k) for k in keys if isinstance(k, (Array, _np.ndarray, list))):
            return _MaskUpdate(self._x, keys)
        return _IndexUpdate(self._x, key)
