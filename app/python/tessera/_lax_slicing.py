"""jax.lax.gather with XLA's GatherDimensionNumbers (tessera.lax re-exports it): each output element's operand
coordinates are computed from the start indices (clamped as XLA clamps them) and the window offsets, and the
elements are read with one engine gather (take) from the flattened operand, so gradients (a scatter_add) and
vmap come from take's rules. mode 'fill' then fills the windows that did not fit."""

import enum as _enum
import math as _math
import operator as _operator
from typing import NamedTuple as _NamedTuple

import numpy as _np

from . import _tessera as _C
from .numpy import asarray


class GatherDimensionNumbers(_NamedTuple):
    """XLA's gather dimensions (jax.lax.GatherDimensionNumbers). The index vector is start_indices' last dim.
    offset_dims: the output dims that run over the window (the operand dims not collapsed or batched, in
    order); collapsed_slice_dims: operand dims of window size 1 left out of the output; start_index_map: the
    operand dim each index-vector entry starts; operand_batching_dims / start_indices_batching_dims: operand
    dims read at the matching batch coordinate of start_indices."""
    offset_dims: tuple
    collapsed_slice_dims: tuple
    start_index_map: tuple
    operand_batching_dims: tuple = ()
    start_indices_batching_dims: tuple = ()


class GatherScatterMode(_enum.Enum):
    """jax.lax.GatherScatterMode: CLIP clamps the starts so every window fits; FILL_OR_DROP fills the windows
    that would not fit; PROMISE_IN_BOUNDS clamps (the caller promises nothing is out of range)."""
    CLIP = _enum.auto()
    FILL_OR_DROP = _enum.auto()
    PROMISE_IN_BOUNDS = _enum.auto()
    ONE_HOT = _enum.auto()

    @staticmethod
    def from_any(s):
        if isinstance(s, GatherScatterMode):
            return s
        if s == "clip":
            return GatherScatterMode.CLIP
        if s is None or s == "fill" or s == "drop":
            return GatherScatterMode.FILL_OR_DROP
        if s == "promise_in_bounds":
            return GatherScatterMode.PROMISE_IN_BOUNDS
        if s == "one_hot":
            return GatherScatterMode.ONE_HOT
        raise ValueError(f'Unknown gather mode "{s}"')


def _default_fill(dtype_name):
    """JAX's gather fill: NaN for floats, the most negative signed value, the largest unsigned one, True."""
    if dtype_name in ("f32", "f64", "f16", "bf16"):
        return _np.nan
    return {"i32": -2**31, "i64": -2**63, "u8": 255, "u32": 2**32 - 1, "bool": True}[dtype_name]


def _tuple(dims):
    return tuple(_operator.index(d) for d in dims)


def _check(operand, indices, dn, slice_sizes):
    """JAX's gather shape rule, with its messages (TypeError)."""
    rank = operand.ndim
    offset, collapsed, start_map = dn.offset_dims, dn.collapsed_slice_dims, dn.start_index_map
    obatch, ibatch = dn.operand_batching_dims, dn.start_indices_batching_dims
    if indices.ndim < 1:
        raise TypeError("Gather index leaf dimension must be within [0, rank(indices) + 1). rank(indices) is 0 and "
                        "gather index leaf dimension is 0.")
    batch_rank = indices.ndim - 1
    if list(offset) != sorted(offset) or len(set(offset)) != len(offset):
        raise TypeError(f"offset_dims in gather op must be sorted and have no repeats; got {offset}.")
    out_rank = batch_rank + len(offset)
    for d in offset:
        if not 0 <= d < out_rank:
            raise TypeError(f"Offset dimension {d} in gather op is out of bounds; got {d}, but should have been in "
                            f"[0, {out_rank})")
    for name, dims in (("collapsed_slice_dims", collapsed), ("operand_batching_dims", obatch)):
        if list(dims) != sorted(dims) or len(set(dims)) != len(dims):
            raise TypeError(f"{name} in gather op must be sorted and have no repeats; got {dims}.")
        for d in dims:
            if not 0 <= d < rank:
                raise TypeError(f"Invalid {name} set in gather op; valid range is [0, {rank}); got: {d}.")
    if set(collapsed) & set(obatch):
        raise TypeError(f"collapsed_slice_dims {collapsed} and operand_batching_dims {obatch} in gather op must "
                        "be disjoint")
    if len(set(start_map)) != len(start_map):
        raise TypeError(f"start_index_map in gather op must have no repeats; got {start_map}.")
    for d in start_map:
        if not 0 <= d < rank or d in obatch:
            raise TypeError(f"Invalid start_index_map in gather op: {d} is out of range [0, {rank}) or an "
                            "operand batching dim")
    if len(start_map) != indices.shape[-1]:
        raise TypeError(f"Gather op has {len(start_map)} elements in start_index_map and the bound of dimension "
                        f"index_vector_dim={indices.ndim - 1} of indices is {indices.shape[-1]}. These two numbers "
                        "must be equal.")
    if len(obatch) != len(ibatch):
        raise TypeError(f"operand_batching_dims {obatch} and start_indices_batching_dims {ibatch} in gather op "
                        "must be of the same length")
    if len(set(ibatch)) != len(ibatch) or any(not 0 <= d < batch_rank for d in ibatch):
        raise TypeError(f"start_indices_batching_dims in gather op must have no repeats and lie in "
                        f"[0, {batch_rank}); got {ibatch}.")
    for i, j in zip(obatch, ibatch):
        if operand.shape[i] != indices.shape[j]:
            raise TypeError(f"Gather op requires operand batching dimensions and indices batching dimensions to "
                            f"have the same shape; got {operand.shape[i]} and {indices.shape[j]}.")
    if len(slice_sizes) != rank:
        raise TypeError(f"Gather op must have one slice size for every input dimension; got: len(slice_sizes)="
                        f"{len(slice_sizes)}, input_shape.rank={rank}")
    for i, (s, d) in enumerate(zip(slice_sizes, operand.shape)):
        if not 0 <= s <= d:
            raise TypeError(f"Slice size at index {i} in gather op is out of range, must be within [0, {d} + 1), "
                            f"got {s}.")
    for name, dims in (("collapsed", collapsed), ("operand batching", obatch)):
        for d in dims:
            if slice_sizes[d] > 1:
                raise TypeError(f"Gather op can only have {name} dims with slice size 0 or 1, but got "
                                f"{slice_sizes[d]} for dim {d}.")
    windowed = [d for d in range(rank) if d not in collapsed and d not in obatch]
    if len(windowed) != len(offset):
        raise TypeError(f"All components of the offset index in a gather op must either be a offset dimension or "
                        f"explicitly collapsed/batching; got len(slice_sizes)={rank}, output_slice_sizes="
                        f"{[slice_sizes[d] for d in windowed]}, collapsed_slice_dims={collapsed}, "
                        f"operand_batching_dims={obatch}.")
    return windowed


def _flat_positions(operand_shape, indices, shape, batch_dims, sizes, start_map, batching, window_of, mode):
    """The flat operand position (i32, `shape`) that each element of a gather's result or a scatter's updates
    reads or writes, the operand's dims taken from the last: a dim in start_map starts at its index-vector entry
    (clamped into [0, dim - sizes[dim]]), a batching dim at the element's coordinate along the index batch dim it
    pairs with, a windowed dim adds the element's coordinate along its window dim (window_of). Also where every
    start fitted (None unless mode is FILL_OR_DROP), over the index batch dims, and from_batch, which lays an array
    over those dims out to broadcast against `shape` (batch_dims: where they sit in it)."""
    batch_shape = list(indices.shape[:-1])

    def from_batch(x):
        dims = [1] * len(shape)
        for d, s in zip(batch_dims, batch_shape):
            dims[d] = s
        return _C.reshape(x, dims)

    idx = _C.astype(indices, "i32")
    inside, linear, stride = None, None, 1
    for d in range(len(operand_shape) - 1, -1, -1):
        dim, size = operand_shape[d], sizes[d]
        coord = None
        if d in start_map:
            k = start_map.index(d)
            start = _C.reshape(_C.slice(idx, [0] * (idx.ndim - 1) + [k], batch_shape + [k + 1], [1] * idx.ndim),
                               batch_shape)
            if mode == GatherScatterMode.FILL_OR_DROP:
                ok = _C.bitwise_and(_C.greater_equal(start, 0), _C.less_equal(start, dim - size))
                inside = ok if inside is None else _C.bitwise_and(inside, ok)
            coord = from_batch(_C.minimum(_C.maximum(start, 0), dim - size))
        elif d in batching:
            coord = _C.iota(shape, batch_dims[batching[d]], "i32")
        if d in window_of:
            w = _C.iota(shape, window_of[d], "i32")
            coord = w if coord is None else coord + w
        if coord is not None:
            term = coord * stride if stride != 1 else coord
            linear = term if linear is None else linear + term
        stride *= dim
    linear = _C.broadcast_to(_C.full(shape, 0, "i32") if linear is None else linear, shape)
    return linear, inside, from_batch


def gather(operand, start_indices, dimension_numbers, slice_sizes, *, unique_indices=False,
           indices_are_sorted=False, mode=None, fill_value=None):
    """jax.lax.gather: the windows of operand of size slice_sizes starting at start_indices[..., :] (the last
    dim the index vector), laid out as dimension_numbers says. mode 'clip' / 'promise_in_bounds' clamp each
    start into [0, dim - size]; 'fill' (None, the default) reads fill_value (NaN, the most negative integer,
    the largest unsigned, True) for a window that does not fit. Differentiable in operand; batches under vmap."""
    operand, indices = asarray(operand), asarray(start_indices)
    dn = dimension_numbers
    dn = GatherDimensionNumbers(_tuple(dn.offset_dims), _tuple(dn.collapsed_slice_dims), _tuple(dn.start_index_map),
                                _tuple(getattr(dn, "operand_batching_dims", ())),
                                _tuple(getattr(dn, "start_indices_batching_dims", ())))
    slice_sizes = _tuple(slice_sizes)
    mode = GatherScatterMode.PROMISE_IN_BOUNDS if mode is None else GatherScatterMode.from_any(mode)
    if mode == GatherScatterMode.ONE_HOT:
        raise NotImplementedError("gather: mode 'one_hot' is not supported")
    if indices._dtype_name not in ("i32", "i64", "u8", "u32"):
        raise ValueError(f"indices must have an integer type, got {indices.dtype}")
    windowed = _check(operand, indices, dn, slice_sizes)
    batch_shape = list(indices.shape[:-1])
    out_rank = len(batch_shape) + len(dn.offset_dims)
    batch_out = [d for d in range(out_rank) if d not in dn.offset_dims]
    out_shape = [0] * out_rank
    for d, s in zip(batch_out, batch_shape):
        out_shape[d] = s
    for d, od in zip(windowed, dn.offset_dims):
        out_shape[od] = slice_sizes[d]

    linear, inside, from_batch = _flat_positions(
        operand.shape, indices, out_shape, batch_out, dict(enumerate(slice_sizes)), dn.start_index_map,
        dict(zip(dn.operand_batching_dims, dn.start_indices_batching_dims)), dict(zip(windowed, dn.offset_dims)),
        mode)
    if operand.size == 0 or _math.prod(out_shape) == 0:
        out = _C.full(out_shape, 0, operand._dtype_name)
    else:
        out = _C.take(_C.reshape(operand, [-1]), linear, 0)
    if inside is not None:
        fill = _default_fill(operand._dtype_name) if fill_value is None else fill_value
        host = "float32" if out._dtype_name == "bf16" else _np.dtype(str(out.dtype))
        fill = _C.astype(asarray(_np.asarray(fill, host), host), out._dtype_name)  # u32's max overflows scalar()
        out = _C.where(from_batch(inside), out, fill)
    return out


class ScatterDimensionNumbers(_NamedTuple):
    """XLA's scatter dimensions (jax.lax.ScatterDimensionNumbers). The index vector is scatter_indices' last dim.
    update_window_dims: the updates dims that run over the window (the operand dims not inserted or batched, in
    order); inserted_window_dims: operand dims of window size 1 that updates leave out; scatter_dims_to_operand_dims:
    the operand dim each index-vector entry starts; operand_batching_dims / scatter_indices_batching_dims: operand
    dims written at the matching batch coordinate of scatter_indices."""
    update_window_dims: tuple
    inserted_window_dims: tuple
    scatter_dims_to_operand_dims: tuple
    operand_batching_dims: tuple = ()
    scatter_indices_batching_dims: tuple = ()


def _scatter_check(operand, indices, updates, dn):
    """JAX's scatter shape rule (the updates' shape), with its messages (TypeError); returns the windowed
    operand dims."""
    rank = operand.ndim
    window, inserted, to_operand = dn.update_window_dims, dn.inserted_window_dims, dn.scatter_dims_to_operand_dims
    obatch, ibatch = dn.operand_batching_dims, dn.scatter_indices_batching_dims
    if indices.ndim < 1:
        raise TypeError("Scatter index leaf dimension must be within [0, rank(indices) + 1). rank(indices) is 0.")
    for name, dims in (("update_window_dims", window), ("inserted_window_dims", inserted),
                       ("operand_batching_dims", obatch)):
        if list(dims) != sorted(dims) or len(set(dims)) != len(dims):
            raise TypeError(f"{name} in scatter op must be sorted and have no repeats; got {dims}.")
    for name, dims in (("inserted_window_dims", inserted), ("operand_batching_dims", obatch),
                       ("scatter_dims_to_operand_dims", to_operand)):
        for d in dims:
            if not 0 <= d < rank:
                raise TypeError(f"Invalid {name} set in scatter op; valid range is [0, {rank}); got: {d}.")
    if len(to_operand) != indices.shape[-1]:
        raise TypeError(f"Scatter op has {len(to_operand)} elements in scatter_dims_to_operand_dims and the bound "
                        f"of dimension index_vector_dim={indices.ndim - 1} of indices is {indices.shape[-1]}. "
                        "These two numbers must be equal")
    if len(obatch) != len(ibatch):
        raise TypeError(f"operand_batching_dims {obatch} and scatter_indices_batching_dims {ibatch} in scatter "
                        "op must be of the same length")
    windowed = [d for d in range(rank) if d not in inserted and d not in obatch]
    if len(windowed) != len(window):
        raise TypeError(f"Scatter op has window of size {len(window)}; doesn't match operand of rank {rank} less "
                        f"{len(inserted)} inserted and {len(obatch)} batching dims.")
    batch_shape = list(indices.shape[:-1])
    if updates.ndim != len(batch_shape) + len(window):
        raise TypeError(f"Updates tensor must be of rank {len(batch_shape) + len(window)}; got {updates.ndim}.")
    scatter_dims = [d for d in range(updates.ndim) if d not in window]
    for d, s in zip(scatter_dims, batch_shape):
        if updates.shape[d] != s:
            raise TypeError(f"Bounds of the scatter dimensions of updates must be the same as the bounds of the "
                            f"corresponding dimensions of scatter indices. For scatter dimension {d}, updates "
                            f"bound is {updates.shape[d]}, indices bound is {s}.")
    for d, ud in zip(windowed, window):
        if updates.shape[ud] > operand.shape[d]:
            raise TypeError(f"Bounds of the window dimensions of updates must not exceed the bounds of the "
                            f"corresponding dimensions of operand. For dimension {ud}, updates bound is "
                            f"{updates.shape[ud]}, operand bound is {operand.shape[d]}.")
    return windowed, scatter_dims


def scatter_linear_indices(operand, scatter_indices, updates, dimension_numbers, mode):
    """The flat operand position (i32, updates' shape) each update element lands on: operand.size where its
    window does not fit (mode FILL_OR_DROP, the default) so that the flat scatter drops it; CLIP and
    PROMISE_IN_BOUNDS clamp each start into [0, dim - window]."""
    operand, indices, updates = asarray(operand), asarray(scatter_indices), asarray(updates)
    dn = dimension_numbers
    dn = ScatterDimensionNumbers(_tuple(dn.update_window_dims), _tuple(dn.inserted_window_dims),
                                 _tuple(dn.scatter_dims_to_operand_dims),
                                 _tuple(getattr(dn, "operand_batching_dims", ())),
                                 _tuple(getattr(dn, "scatter_indices_batching_dims", ())))
    mode = GatherScatterMode.from_any(mode)
    if mode == GatherScatterMode.ONE_HOT:
        raise NotImplementedError("scatter: mode 'one_hot' is not supported")
    if indices._dtype_name not in ("i32", "i64", "u8", "u32"):
        raise ValueError(f"indices must have an integer type, got {indices.dtype}")
    windowed, scatter_dims = _scatter_check(operand, indices, updates, dn)
    shape = list(updates.shape)
    sizes = {d: 1 for d in range(operand.ndim)}
    sizes.update({d: shape[ud] for d, ud in zip(windowed, dn.update_window_dims)})
    linear, inside, from_batch = _flat_positions(
        operand.shape, indices, shape, scatter_dims, sizes, dn.scatter_dims_to_operand_dims,
        dict(zip(dn.operand_batching_dims, dn.scatter_indices_batching_dims)),
        dict(zip(windowed, dn.update_window_dims)), mode)
    if inside is not None:
        linear = _C.where(from_batch(inside), linear, _C.full(shape, _math.prod(operand.shape), "i32"))
    return linear
