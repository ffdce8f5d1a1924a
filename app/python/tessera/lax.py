"""tessera.lax: structured control flow, as jax.lax. Each body is traced once into one scan, while_loop or cond op
(a loop of 12 layers is one block in the IR), and works eagerly, under jit, grad and vmap (while_loop: not grad,
whose number of iterations is known only at run time, as in JAX)."""

import builtins  # lax.max and lax.min below shadow the builtins in this module
import math
import numbers

import numpy as _np

from . import _tessera as _C
from . import numpy as _tnp
from . import _lax_slicing, _lax_types
from .numpy import asarray, astype
from .tree_util import tree_flatten, tree_unflatten

__all__ = ["scan", "while_loop", "fori_loop", "cond", "stop_gradient", "integer_pow", "square", "lgamma", "digamma", "cumsum",
           "cumprod", "cummax", "cumlogsumexp", "sort", "top_k",
           "conv_general_dilated", "conv", "conv_transpose", "add", "max", "min", "reduce_window", "optimization_barrier",
           "scatter", "scatter_add", "scatter_mul", "scatter_min", "scatter_max", "associative_scan"]


def stop_gradient(x):
    """The identity whose gradient is zero; applied to every leaf of a pytree."""
    leaves, tree = tree_flatten(x)
    return tree_unflatten(tree, [_C.stop_gradient(asarray(leaf)) for leaf in leaves])


def integer_pow(x, y):
    """x ** y for a Python int y (negative only for floating x)."""
    return _C.integer_pow(x, int(y))


square = _C.square
lgamma = _C.lgamma
digamma = _C.digamma


def cumsum(operand, axis=0, reverse=False):
    return _C.cumsum(operand, axis, reverse)


def cumprod(operand, axis=0, reverse=False):
    return _C.cumprod(operand, axis, reverse)


def cummax(operand, axis=0, reverse=False):
    return _C.cummax(operand, axis, reverse)


def cumlogsumexp(operand, axis=0, reverse=False):
    return _C.cumlogsumexp(operand, axis, reverse)


def _arrays(xs):
    return [asarray(x) for x in xs]


def scan(f, init, xs=None, length=None, reverse=False, unroll=1, _split_transpose=False):
    """f(carry, x) -> (carry, y) over the leading axis of xs; returns (final carry, ys stacked on axis 0).
    unroll is accepted for JAX's signature; it changes no result (the compiler decides the loop's form)."""
    carry_leaves, carry_tree = tree_flatten(init)
    x_leaves, x_tree = tree_flatten(xs)
    n_carry = len(carry_leaves)
    x_arrays = _arrays(x_leaves)
    if length is None:
        if not x_arrays:
            raise ValueError("scan: without xs, length must be given")
        length = x_arrays[0].shape[0] if x_arrays[0].ndim else -1
    y_tree = []

    def body(flat):
        carry = tree_unflatten(carry_tree, flat[:n_carry])
        x = tree_unflatten(x_tree, flat[n_carry:])
        new_carry, y = f(carry, x)
        new_leaves, new_tree = tree_flatten(new_carry)
        if new_tree != carry_tree:
            raise TypeError(f"scan: the body's carry {new_tree} differs from the initial carry {carry_tree}")
        y_leaves, tree = tree_flatten(y)
        y_tree[:] = [tree]
        return _arrays(new_leaves) + _arrays(y_leaves)

    out = _C.scan(body, _arrays(carry_leaves), x_arrays, length, reverse)
    return tree_unflatten(carry_tree, out[:n_carry]), tree_unflatten(y_tree[0], out[n_carry:])


def while_loop(cond_fun, body_fun, init_val):
    """while cond_fun(val): val = body_fun(val). cond_fun returns a scalar bool; body_fun a value of init_val's
    structure, shapes and dtypes. The condition is evaluated on the device; grad refuses the loop (use scan or
    fori_loop with int bounds)."""
    leaves, tree = tree_flatten(init_val)

    def cond_flat(xs):
        return [asarray(cond_fun(tree_unflatten(tree, xs)))]

    def body_flat(xs):
        new_leaves, new_tree = tree_flatten(body_fun(tree_unflatten(tree, xs)))
        if new_tree != tree:
            raise TypeError(f"while_loop: body_fun returns {new_tree} but init_val is {tree}")
        return _arrays(new_leaves)

    return tree_unflatten(tree, _C.while_loop(cond_flat, body_flat, _arrays(leaves)))


def fori_loop(lower, upper, body_fun, init_val):
    """for i in range(lower, upper): val = body_fun(i, val), i an int32 scalar. With int bounds (Python or numpy)
    a scan, which grad differentiates; with array bounds (traced under jit, say) a while_loop, as in JAX."""
    if isinstance(lower, numbers.Integral) and isinstance(upper, numbers.Integral):
        lower, upper = int(lower), int(upper)

        def step(carry, _):
            i, val = carry
            return (i + 1, body_fun(i, val)), None

        (_, val), _ = scan(step, (asarray(lower, "i32"), init_val), length=builtins.max(0, upper - lower))
        return val

    def cond_fun(carry):
        i, stop, _ = carry
        return i < stop

    def body(carry):
        i, stop, val = carry
        return i + 1, stop, body_fun(i, val)

    _, _, val = while_loop(cond_fun, body, (astype(asarray(lower), "i32"), astype(asarray(upper), "i32"), init_val))
    return val


def cond(pred, true_fun, false_fun, *operands):
    """true_fun(*operands) if pred else false_fun(*operands); both must return the same structure, shapes and
    dtypes."""
    leaves, tree = tree_flatten(operands)
    out_trees = {}

    def branch(fun, name):
        def flat(xs):
            out_leaves, out_trees[name] = tree_flatten(fun(*tree_unflatten(tree, xs)))
            return _arrays(out_leaves)

        return flat

    out = _C.cond(pred, branch(true_fun, "true"), branch(false_fun, "false"), _arrays(leaves))
    if len(set(out_trees.values())) > 1:
        raise TypeError(f"cond: the branches return different structures: {out_trees['true']} and {out_trees['false']}")
    return tree_unflatten(next(iter(out_trees.values())), out)


def _interleave(even, odd, axis):
    """even[0], odd[0], even[1], odd[1], ... along axis; even has as many elements as odd, or one more."""
    n_odd = odd.shape[axis]
    head = _C.slice(even, [0] * even.ndim, [n_odd if d == axis else s for d, s in enumerate(even.shape)],
                    [1] * even.ndim)
    pairs = _C.stack([head, odd], axis + 1)
    merged = _C.reshape(pairs, [2 * n_odd if d == axis else s for d, s in enumerate(odd.shape)])
    if even.shape[axis] == n_odd:
        return merged
    last = _C.slice(even, [n_odd if d == axis else 0 for d in range(even.ndim)], list(even.shape), [1] * even.ndim)
    return _C.concatenate([merged, last], axis)


def associative_scan(fn, elems, reverse=False, axis=0):
    """jax.lax.associative_scan: the inclusive prefix of elems (a pytree of arrays of one length along axis)
    under fn, an associative combination of two pytrees of elems' structure that broadcasts over the axis.
    JAX's parallel algorithm (Blelloch's odd-even recursion: fn on adjacent pairs, the half-length scan of those,
    then fn once more for the even positions): about 2 log2(n) calls of fn on slices, no loop. reverse scans
    from the end."""
    from ._lax_ops import slice_in_dim
    if not callable(fn):
        raise TypeError("lax.associative_scan: fn argument should be callable.")
    leaves, tree = tree_flatten(elems)
    leaves = _arrays(leaves)
    if not leaves:
        return elems
    axis = _tnp._canonical_axis(axis, leaves[0].ndim, "associative_scan")
    num = leaves[0].shape[axis]
    if any(leaf.ndim <= axis or leaf.shape[axis] != num for leaf in leaves[1:]):
        raise ValueError(f"associative_scan: the inputs must have the same size along axis {axis} "
                         f"(saw shapes {[tuple(leaf.shape) for leaf in leaves]})")
    if reverse:
        leaves = [_C.flip(leaf, [axis]) for leaf in leaves]

    def combine(a, b):
        out_leaves, out_tree = tree_flatten(fn(tree_unflatten(tree, a), tree_unflatten(tree, b)))
        if out_tree != tree:
            raise TypeError(f"associative_scan: fn returned {out_tree}, but the elements are {tree}")
        return _arrays(out_leaves)

    def scan_(xs):
        n = xs[0].shape[axis]
        if n < 2:
            return xs
        # Pairs (0, 1), (2, 3), ...: their scan is the result at the odd positions.
        odd = scan_(combine([slice_in_dim(x, 0, -1, 2, axis) for x in xs],
                            [slice_in_dim(x, 1, None, 2, axis) for x in xs]))
        # Each even position after the first: the odd result before it combined with its own element.
        before = odd if n % 2 else [slice_in_dim(o, 0, -1, 1, axis) for o in odd]
        even = combine(before, [slice_in_dim(x, 2, None, 2, axis) for x in xs])
        even = [_C.concatenate([slice_in_dim(x, 0, 1, 1, axis), e], axis) for x, e in zip(xs, even)]
        return [_interleave(e, o, axis) for e, o in zip(even, odd)]

    out = scan_(leaves)
    if reverse:
        out = [_C.flip(leaf, [axis]) for leaf in out]
    return tree_unflatten(tree, out)


def sort(operand, dimension=-1, is_stable=True, num_keys=1):
    """lax.sort: one array, or a sequence of arrays sorted together by the first num_keys of them."""
    if isinstance(operand, (list, tuple)):
        return tuple(_C.sort(_arrays(operand), dimension, is_stable, num_keys))
    return _C.sort([asarray(operand)], dimension, is_stable, num_keys)[0]


def top_k(operand, k):
    """The k largest along the last axis, largest first, and their int32 indices."""
    return _C.top_k(operand, int(k))


def conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                         dimension_numbers=None, feature_group_count=1, batch_group_count=1, precision=None,
                         preferred_element_type=None, out_sharding=None):
    """jax.lax.conv_general_dilated: padding is "SAME", "SAME_LOWER", "VALID" or (low, high) pairs per spatial
    dim; dimension_numbers None, three strings such as ("NHWC", "HWIO", "NHWC") or a ConvDimensionNumbers.
    precision: as lax.dot's (checked; float32 products); preferred_element_type: the result's dtype."""
    _lax_types.canonicalize_precision(precision)
    lhs, rhs = asarray(lhs), asarray(rhs)
    dimension_numbers = _lax_types.conv_spec_strings(dimension_numbers, lhs.ndim)
    lhs_spec, rhs_spec, out_spec = dimension_numbers if dimension_numbers is not None else ("", "", "")
    if isinstance(padding, str) and padding.upper() == "SAME_LOWER":
        dn = _lax_types.conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
        dilated = [(rhs.shape[d] - 1) * r + 1 for d, r in zip(dn.rhs_spec[2:], rhs_dilation or [1] * (lhs.ndim - 2))]
        base = [(lhs.shape[d] - 1) * r + 1 for d, r in zip(dn.lhs_spec[2:], lhs_dilation or [1] * (lhs.ndim - 2))]
        padding = _lax_types.padtype_to_pads(base, dilated, window_strides, "SAME_LOWER")
    if not isinstance(padding, str):
        padding = [(int(lo), int(hi)) for lo, hi in padding]
    out = _C.conv_general_dilated(lhs, rhs, list(window_strides), padding, list(lhs_dilation or []),
                                  list(rhs_dilation or []), lhs_spec, rhs_spec, out_spec or lhs_spec,
                                  feature_group_count, batch_group_count)
    return out if preferred_element_type is None else astype(out, preferred_element_type)


_conv_transpose_padding = _lax_types.conv_transpose_padding  # (low, high) of the dilated input per spatial dim


def conv_transpose(lhs, rhs, strides, padding, rhs_dilation=None, dimension_numbers=None, transpose_kernel=False,
                   precision=None, preferred_element_type=None, use_consistent_padding=False):
    """jax.lax.conv_transpose: the lhs dilated by strides and convolved at stride 1 (lhs_dilation); padding
    "SAME" (outputs = inputs * strides), "VALID", or (low, high) pairs of the dilated input. transpose_kernel
    flips the kernel's spatial dims and swaps its I and O, which makes this the gradient of conv.
    dimension_numbers: None, three strings or a ConvDimensionNumbers; precision as lax.dot's."""
    if use_consistent_padding:
        raise NotImplementedError("conv_transpose: use_consistent_padding=True is not supported")
    lhs, rhs = asarray(lhs), asarray(rhs)
    n = len(strides)
    dimension_numbers = _lax_types.conv_spec_strings(dimension_numbers, lhs.ndim)
    lhs_spec, rhs_spec, out_spec = dimension_numbers if dimension_numbers is not None else (
        "NC" + "DHW"[3 - n:], "OI" + "DHW"[3 - n:], "NC" + "DHW"[3 - n:])
    spatial = [i for i, c in enumerate(rhs_spec) if c not in "IO"]
    dilation = list(rhs_dilation or [1] * n)
    if isinstance(padding, str):
        extents = [(rhs.shape[d] - 1) * r + 1 for d, r in zip(spatial, dilation)]
        padding = [_conv_transpose_padding(k, s, padding) for k, s in zip(extents, strides)]
    if transpose_kernel:
        rhs = _tnp.flip(rhs, axis=tuple(spatial))
        rhs_spec = rhs_spec.replace("I", "?").replace("O", "I").replace("?", "O")
    return conv_general_dilated(lhs, rhs, (1,) * n, padding, lhs_dilation=strides, rhs_dilation=dilation,
                                dimension_numbers=(lhs_spec, rhs_spec, out_spec), precision=precision,
                                preferred_element_type=preferred_element_type)


def conv(lhs, rhs, window_strides, padding, precision=None, preferred_element_type=None):
    """jax.lax.conv: lhs NC..., rhs OI..., result NC...."""
    return conv_general_dilated(lhs, rhs, window_strides, padding, precision=precision,
                                preferred_element_type=preferred_element_type)


def add(x, y):
    """x + y, elementwise (also reduce_window's sum)."""
    return _C.add(x, y)


def max(x, y):  # noqa: A001 (lax's name)
    """The elementwise maximum (also reduce_window's max)."""
    return _C.maximum(x, y)


def min(x, y):  # noqa: A001 (lax's name)
    """The elementwise minimum (also reduce_window's min)."""
    return _C.minimum(x, y)


def _scatter(op, operand, indices, updates, axis, batch_dims, dimension_numbers=None, mode=None):
    """A ScatterDimensionNumbers (4th argument, as JAX's, or dimension_numbers=) makes this XLA's scatter: every
    update element's flat operand position (_lax_slicing.scatter_linear_indices) feeds one scatter along axis 0
    of the flattened operand, whose rules give the gradients and vmap."""
    x = asarray(operand)
    if dimension_numbers is None and hasattr(axis, "update_window_dims"):
        dimension_numbers = axis
    if dimension_numbers is not None:
        updates = asarray(updates)
        linear = _lax_slicing.scatter_linear_indices(x, indices, updates, dimension_numbers, mode)
        flat = getattr(_C, op)(_C.reshape(x, [-1]), _C.reshape(linear, [-1]),
                               _C.reshape(_C.astype(updates, x._dtype_name), [-1]), 0, 0)
        return _C.reshape(flat, list(x.shape))
    return getattr(_C, op)(x, asarray(indices), asarray(updates), int(axis), int(batch_dims))


def scatter(operand, indices, updates, axis=0, batch_dims=0, *, dimension_numbers=None, indices_are_sorted=False,
            unique_indices=False, mode=None):
    """jax.lax.scatter, with a ScatterDimensionNumbers as the 4th argument (XLA's layout; mode 'fill'/'drop',
    the default, drops the windows that do not fit, 'clip' clamps them), or in tf.gather's layout: updates
    (operand.shape[:axis] + indices.shape[batch_dims:] + operand.shape[axis+1:]) replace operand's elements at
    their indices along axis; the first batch_dims dims of operand and indices match. Out-of-range indices are
    dropped; where an index repeats, the last update in index order stays. Gradients: none to the updates that
    were overwritten or dropped. indices_are_sorted and unique_indices are hints and change nothing."""
    return _scatter("scatter", operand, indices, updates, axis, batch_dims, dimension_numbers, mode)


def scatter_add(operand, indices, updates, axis=0, batch_dims=0, *, dimension_numbers=None,
                indices_are_sorted=False, unique_indices=False, mode=None):
    """jax.lax.scatter_add in scatter's layouts: repeated indices sum."""
    return _scatter("scatter_add", operand, indices, updates, axis, batch_dims, dimension_numbers, mode)


def scatter_mul(operand, indices, updates, axis=0, batch_dims=0, *, dimension_numbers=None,
                indices_are_sorted=False, unique_indices=False, mode=None):
    """jax.lax.scatter_mul in scatter's layouts: repeated indices multiply. Gradients are exact with repeated
    indices and zero updates (JAX needs unique indices)."""
    return _scatter("scatter_mul", operand, indices, updates, axis, batch_dims, dimension_numbers, mode)


def scatter_min(operand, indices, updates, axis=0, batch_dims=0, *, dimension_numbers=None,
                indices_are_sorted=False, unique_indices=False, mode=None):
    """jax.lax.scatter_min in scatter's layouts; NaN wins. The gradient is split evenly between tied values."""
    return _scatter("scatter_min", operand, indices, updates, axis, batch_dims, dimension_numbers, mode)


def scatter_max(operand, indices, updates, axis=0, batch_dims=0, *, dimension_numbers=None,
                indices_are_sorted=False, unique_indices=False, mode=None):
    """jax.lax.scatter_max in scatter's layouts; NaN wins. The gradient is split evenly between tied values."""
    return _scatter("scatter_max", operand, indices, updates, axis, batch_dims, dimension_numbers, mode)


_COMPUTATIONS = {add: "add", max: "max", min: "min", _tnp.add: "add", _tnp.maximum: "max", _tnp.minimum: "min"}


def _window_identity(name, dtype):
    """The monoid's identity in dtype: what padded positions hold, and the only init value reduce_window takes."""
    if name == "add":
        return 0
    if _tnp._engine_dtype(dtype) in ("i32", "i64"):
        info = _np.iinfo(_np.dtype(str(dtype)))
        return int(info.min) if name == "max" else int(info.max)
    return -math.inf if name == "max" else math.inf


def reduce_window(operand, init_value, computation, window_dimensions, window_strides, padding, base_dilation=None,
                  window_dilation=None):
    """jax.lax.reduce_window with the monoid fixed: computation lax.add, lax.max or lax.min (or "add", "max",
    "min"; tnp.add, tnp.maximum, tnp.minimum), init_value its identity (0, -inf, +inf; an integer type's limits).
    padding: "SAME", "VALID" or (low, high) pairs, one per dim. No base dilation."""
    operand = asarray(operand)
    name = computation if isinstance(computation, str) else _COMPUTATIONS.get(computation)
    if name not in ("add", "max", "min"):
        raise ValueError(f"reduce_window: computation must be lax.add, lax.max or lax.min (or 'add', 'max', "
                         f"'min'), not {computation!r}")
    identity = _window_identity(name, operand.dtype)
    try:
        init = float(asarray(init_value)) if not isinstance(init_value, (int, float)) else init_value
    except (TypeError, ValueError):
        init = None
    if init is None or init != identity:
        raise ValueError(f"reduce_window: init_value {init_value!r} is not the identity of {name} for "
                         f"{operand.dtype} ({identity}); only the monoid's identity is supported")
    if base_dilation is not None and any(d != 1 for d in base_dilation):
        raise ValueError(f"reduce_window: base_dilation {tuple(base_dilation)} is not supported (only 1s)")
    if not isinstance(padding, str):
        padding = [(int(lo), int(hi)) for lo, hi in padding]
    return _C.reduce_window(operand, name, [int(w) for w in window_dimensions],
                            [int(s) for s in (window_strides or [])], padding,
                            [int(d) for d in (window_dilation or [])])


def optimization_barrier(operand):
    """jax.lax.optimization_barrier: the identity on a pytree of arrays, which no compiler pass looks through or
    moves work across: every output exists only once every input does."""
    leaves, tree = tree_flatten(operand)
    return tree_unflatten(tree, _C.optimization_barrier(_arrays(leaves)))


# jax.lax's elementwise, shape and indexing functions (tessera/_lax_ops.py), looked up as attributes of this
# module (PEP 562) so that names such as abs, round, slice and map do not shadow the builtins in the code above.
from . import _lax_ops  # noqa: E402

__all__ += [_n for _n in _lax_ops.__all__ if _n not in __all__]


def __getattr__(name):
    if name in _lax_ops.__all__:
        return getattr(_lax_ops, name)
    raise AttributeError(f"module 'tessera.lax' has no attribute '{name}'")


def __dir__():
    return sorted(set(globals()) | set(_lax_ops.__all__))


# jax.lax.gather and its dimension numbers (tessera/_lax_slicing.py).
from ._lax_slicing import gather, GatherDimensionNumbers, GatherScatterMode  # noqa: E402

__all__ += ["gather", "GatherDimensionNumbers", "GatherScatterMode"]


# The collectives of shard_map bodies (tessera/_shard_map.py): psum, all_gather, ppermute, axis_index, ...
from ._shard_map import (psum, pmean, pmax, pmin, all_gather, psum_scatter, all_to_all, ppermute,  # noqa: E402
                         pshuffle, pswapaxes, pbroadcast, pcast, axis_index, axis_size)

__all__ += ["psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "all_to_all", "ppermute", "pshuffle",
            "pswapaxes", "pbroadcast", "pcast", "axis_index", "axis_size"]


# jax.lax.linalg (tessera/_lax_linalg.py): cholesky, triangular_solve, lu, eigh, svd, qr.
from . import _lax_linalg as linalg  # noqa: E402


# jax.lax's option types, dimension numbers and shape helpers (tessera/_lax_types.py), XLA's scatter dimension
# numbers (tessera/_lax_slicing.py) and the functions composed of other ops (tessera/_lax_more.py).
from . import _lax_more  # noqa: E402

globals().update({_n: getattr(_m, _n) for _m in (_lax_types, _lax_more) for _n in _m.__all__})
ScatterDimensionNumbers = _lax_slicing.ScatterDimensionNumbers
__all__ += _lax_types.__all__ + ["ScatterDimensionNumbers"] + _lax_more.__all__
