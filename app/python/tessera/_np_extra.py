"""tessera.numpy's remaining jax.numpy names: the dtype aliases bool, double, single, float_ and int_; the index
tricks r_ and c_; packbits and unpackbits; place; histogramdd; and the host-side helpers jax.numpy takes from
numpy: frombuffer, fromiter, fromstring, fromfile, load, save, savez, array_repr, array_str and the print options."""

import builtins as _builtins
import operator as _operator

import numpy as _np

from . import _tessera as _C
from ._np_base import Array, float32, float64, int64, bool_, _canonical_axis
from ._np_creation import arange, asarray, linspace
from ._np_elementwise import bitwise_and, greater, left_shift, not_equal, _inexact
from ._np_layout import concatenate, expand_dims, pad, ravel, reshape, stack, swapaxes, transpose
from ._np_reductions import sum
from ._np_indexing import where
from ._np_arrays import resize
from ._np_composite import searchsorted
from ._np_stats import histogram_bin_edges

# numpy's names for the dtypes (jax.numpy's are scalar types of the same dtypes). The engine has int64 and
# float64 arrays, so these name them as numpy does; numpy's uint (uint64) has no engine dtype and is left out.
bool = bool_
double = float_ = float64
single = float32
int_ = int64

# Printing and files are numpy's: np.asarray(x) reads an Array, and tessera's repr does not follow numpy's
# print options (jax.numpy's aliases them all the same).
array_repr, array_str = _np.array_repr, _np.array_str
printoptions, get_printoptions, set_printoptions = _np.printoptions, _np.get_printoptions, _np.set_printoptions
save, savez = _np.save, _np.savez


def load(file, *args, **kwargs):
    """numpy's load; an array comes back as an Array (float64 and int64 as float32 and int32, as asarray makes
    them), an .npz archive or an array of a dtype the engine lacks as numpy gives it."""
    out = _np.load(file, *args, **kwargs)
    if isinstance(out, _np.ndarray):
        try:
            return asarray(out)
        except TypeError:
            pass
    return out


def frombuffer(buffer, dtype=float, count=-1, offset=0):
    """numpy's frombuffer, as an Array."""
    return asarray(_np.frombuffer(buffer, dtype=dtype, count=count, offset=offset))


def fromstring(string, dtype=float, count=-1, *, sep):
    """numpy's fromstring (text with a separator), as an Array."""
    return asarray(_np.fromstring(string, dtype=dtype, count=count, sep=sep))


# jax.numpy refuses these two (reading an iterator or a file is a side effect a traced function repeats only
# once); eagerly they are plain host reads, so tessera gives them.
def fromiter(iterable, dtype, count=-1):
    """numpy's fromiter, as an Array (the iterable is consumed on the host, once per call or trace)."""
    return asarray(_np.fromiter(iterable, dtype=dtype, count=count))


def fromfile(file, dtype=float, count=-1, sep="", offset=0):
    """numpy's fromfile, as an Array (the file is read on the host, once per call or trace)."""
    return asarray(_np.fromfile(file, dtype=dtype, count=count, sep=sep, offset=offset))


# ---- r_ and c_ ----------------------------------------------------------------------------------------------


def _grid_from_slice(s, name):
    """start:stop:step as arange; a complex step (5j) as linspace with that many points, stop included."""
    for v in (s.start, s.stop, s.step):
        if isinstance(v, Array):
            raise TypeError(f"{name}: slice bounds must be Python numbers, not arrays")
    start = 0 if s.start is None else s.start
    step = 1 if s.step is None else s.step
    if isinstance(step, complex) or _np.iscomplexobj(step):
        return linspace(start, s.stop, int(_builtins.abs(step)))
    return arange(start, s.stop, step)


def _at_least(x, ndmin):
    """x with leading size-1 axes up to ndmin (numpy's array(x, ndmin=))."""
    return x if x.ndim >= ndmin else reshape(x, (1,) * (ndmin - x.ndim) + tuple(x.shape))


class _AxisConcatenator:
    """numpy's AxisConcatenator: the items of x[...] joined along an axis. A leading string is a directive:
    'r' or 'c' (a 1-d result becomes a row or a column matrix) or 'axis[,ndmin[,trans1d]]'."""

    def __init__(self, axis, ndmin, trans1d, name):
        self._params = (axis, ndmin, trans1d)
        self._name = name

    def __getitem__(self, key):
        items = key if isinstance(key, tuple) else (key,)
        axis, ndmin, trans1d = self._params
        matrix = -1
        if items and isinstance(items[0], str):
            directive, items = items[0], items[1:]
            if directive in ("r", "c"):
                matrix = 0 if directive == "r" else 1
            else:
                fields = directive.split(",")[:3]
                try:
                    values = [int(f) for f in fields]
                except ValueError as err:
                    raise ValueError(f"{self._name}: could not understand directive {directive!r}") from err
                axis, ndmin, trans1d = (values + [axis, ndmin, trans1d][len(values):])
        parts = []
        for item in items:
            if isinstance(item, slice):
                part, item_ndim = _grid_from_slice(item, self._name), 0
            elif isinstance(item, str):
                raise ValueError(f"{self._name}: string directive must be placed at the beginning")
            else:
                part = asarray(item)
                item_ndim = part.ndim
            part = _at_least(part, ndmin)
            if trans1d != -1 and ndmin - item_ndim > 0:
                # numpy's rule: the item's own axes move to position trans1d of the ndmin axes.
                order = tuple(range(ndmin))
                shift = ndmin - _builtins.abs(ndmin + trans1d + 1) % ndmin
                part = transpose(part, order[shift:] + order[:shift])
            parts.append(part)
        out = concatenate(parts, axis=axis)
        if matrix != -1 and out.ndim == 1:
            out = expand_dims(out, matrix)
        return out

    def __len__(self):
        return 0


r_ = _AxisConcatenator(0, 1, -1, "r_")
c_ = _AxisConcatenator(-1, 2, 0, "c_")


# ---- bits ---------------------------------------------------------------------------------------------------


def _bit_order(bitorder):
    """The bit weights of one byte, first bit first: [128 .. 1] for 'big', [1 .. 128] for 'little'."""
    if bitorder not in ("big", "little"):
        raise ValueError("'order' must be either 'little' or 'big'")
    bits = left_shift(asarray(1, "u8"), arange(8, dtype="u8"))
    return bits[::-1] if bitorder == "big" else bits


def packbits(a, axis=None, bitorder="big"):
    """The truth of a's elements (integers or bools), eight to a uint8 along axis (flattened when None), the
    last byte padded with zeros."""
    a = asarray(a)
    if a._dtype_name not in ("bool", "u8", "u32", "i32", "i64"):
        raise TypeError("Expected an input array of integer or boolean data type")
    weights = _bit_order(bitorder)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _canonical_axis(axis, a.ndim, "packbits")
    bits = swapaxes(_C.astype(not_equal(a, 0), "u8"), axis, -1)  # [..., n]
    extra = -bits.shape[-1] % 8
    if extra:
        bits = pad(bits, [(0, 0)] * (bits.ndim - 1) + [(0, extra)])
    bits = reshape(bits, tuple(bits.shape[:-1]) + (bits.shape[-1] // 8, 8))  # [..., n/8, 8]
    # The weights are distinct powers of two, so the sum is their bitwise or.
    packed = _C.astype(sum(bits * weights, axis=-1), "u8")
    return swapaxes(packed, axis, -1)


def unpackbits(a, axis=None, count=None, bitorder="big"):
    """The bits of the uint8 array a as uint8 zeros and ones, eight per element along axis (flattened when
    None); count keeps that many (padding with zeros past the end) or, negative, drops that many from the end."""
    a = asarray(a)
    if a._dtype_name != "u8":
        raise TypeError("Expected an input array of unsigned byte data type")
    weights = _bit_order(bitorder)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _canonical_axis(axis, a.ndim, "unpackbits")
    a = swapaxes(a, axis, -1)
    bits = _C.astype(greater(bitwise_and(expand_dims(a, -1), weights), 0), "u8")  # [..., n, 8]
    bits = reshape(bits, tuple(bits.shape[:-2]) + (bits.shape[-2] * 8,))
    if count is not None:
        count = _operator.index(count)
        n = bits.shape[-1]
        if count > n:
            bits = pad(bits, [(0, 0)] * (bits.ndim - 1) + [(0, count - n)])
        else:
            bits = bits[..., :count]
    return swapaxes(bits, axis, -1)


# ---- place --------------------------------------------------------------------------------------------------


def place(arr, mask, vals, *, inplace=True):
    """arr with the elements where mask is True set to vals in order, repeated as needed. inplace=False is
    required, as JAX requires it (arrays are immutable)."""
    if inplace:
        raise ValueError("place: tessera arrays are immutable, so it cannot modify its argument in place: pass "
                         "inplace=False for the updated array as its result")
    data, mask, vals = asarray(arr), asarray(mask), asarray(vals)
    n = data.size
    if mask.size != n:
        raise ValueError("place: arr and mask must be the same size")
    if vals.size == 0:
        raise ValueError("place: cannot place values from an empty array")
    if n == 0:
        return data
    # Positions of the True elements first, then n (out of range, so dropped): a fixed size, so it traces.
    index = where(ravel(mask), size=n, fill_value=n)[0]
    values = resize(ravel(vals), (n,))
    if values._dtype_name != data._dtype_name:
        values = _C.astype(values, data._dtype_name)
    return reshape(ravel(data).at[index].set(values), tuple(data.shape))


# ---- histogramdd --------------------------------------------------------------------------------------------


def histogramdd(sample, bins=10, range=None, weights=None, density=None):
    """(counts, [edges per dim]): the (weighted) count of the N points of sample ([N, D], or D sequences of N
    coordinates) in each cell; bins an int, or per dim an int or an array of edges; range per dim (lo, hi) or
    None. Cells are half-open but the last of each dim closed, as histogram's. Counts are floating (jax.numpy's)."""
    if isinstance(sample, Array) or hasattr(sample, "shape"):
        sample = _inexact(sample)
        if sample.ndim == 1:
            sample = reshape(sample, (-1, 1))
    else:
        sample = stack([_inexact(s) for s in sample], 1)
    if sample.ndim != 2:
        raise ValueError(f"histogramdd: sample must be [N, D]; got shape {tuple(sample.shape)}")
    n_points, dims = sample.shape
    if isinstance(bins, (int, _np.integer)):
        bins = [bins] * dims
    if len(bins) != dims:
        raise ValueError("The dimension of bins must be equal to the dimension of the sample x.")
    if range is None:
        range = [None] * dims
    if len(range) != dims:
        raise ValueError(f"histogramdd: range must give (lo, hi) or None for each of the {dims} dims")
    edges = [histogram_bin_edges(sample[:, d], bins[d], range[d]) for d in _builtins.range(dims)]
    nbins = [e.shape[0] - 1 for e in edges]
    total = 1
    for nb in nbins:
        total *= nb
    dt = sample._dtype_name
    w = _C.full([n_points], 1.0, dt) if weights is None else _C.astype(ravel(asarray(weights)), dt)
    flat = _C.full([n_points], 0, "i32")
    outside = _C.full([n_points], False, "bool")
    for d, (e, nb) in enumerate(zip(edges, nbins)):
        x = sample[:, d]
        i = searchsorted(e, x, side="right") - 1
        i = where(_C.equal(x, e[-1]), nb - 1, i)  # the last edge belongs to the last cell
        outside = _C.bitwise_or(outside, _C.bitwise_or(_C.less(i, _C.scalar(0, i)),
                                                       _C.greater_equal(i, _C.scalar(nb, i))))
        flat = flat * nb + i
    flat = where(outside, total, flat)  # points outside go to a last slot that is cut off
    counts = _C.scatter_add(_C.full([total + 1], 0.0, dt), flat, w, 0, 0)
    counts = reshape(counts[:total], tuple(nbins))
    if density:
        volume = _C.full(nbins, 1.0, dt)
        for d, e in enumerate(edges):
            shape = [1] * dims
            shape[d] = nbins[d]
            volume = volume * reshape(e[1:] - e[:-1], tuple(shape))
        counts = counts / volume / sum(counts)
    return counts, edges
