"""jax.lax's elementwise, shape and indexing functions over the engine's ops (tessera.lax re-exports them).
Operands are promoted as tessera.numpy promotes them, where jax.lax requires equal dtypes."""

import builtins as _builtins
import math

import numpy as _np

from . import _tessera as _C
from . import _lax_types
from . import numpy as _tnp
from .numpy import asarray, _engine_dtype

__all__ = ["abs", "acos", "asin", "atan", "atan2", "ceil", "cos", "cosh", "div", "eq", "ne", "lt", "le", "gt",
           "ge", "erf", "erf_inv", "exp", "exp2", "expm1", "floor", "is_finite", "log", "log1p", "logistic", "mul",
           "neg", "sub", "pow", "rem", "round", "rsqrt", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "shift_left",
           "shift_right_arithmetic", "shift_right_logical", "bitwise_and", "bitwise_or", "bitwise_xor",
           "bitwise_not", "clamp", "select", "select_n", "convert_element_type", "broadcast", "broadcast_in_dim",
           "reshape", "transpose", "squeeze", "expand_dims", "concatenate", "rev", "pad", "slice", "slice_in_dim",
           "dynamic_slice", "dynamic_slice_in_dim", "dynamic_index_in_dim", "dynamic_update_slice",
           "dynamic_update_slice_in_dim", "dynamic_update_index_in_dim", "iota", "full", "full_like",
           "reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin", "cummin", "dot", "dot_general",
           "sort_key_val", "switch", "map"]

abs = _C.abs
acos = _tnp.arccos
asin = _tnp.arcsin
atan = _tnp.arctan
atan2 = _C.arctan2
ceil = _C.ceil
cos = _C.cos
cosh = _tnp.cosh
sinh = _tnp.sinh
eq, ne, lt, le, gt, ge = _C.equal, _C.not_equal, _C.less, _C.less_equal, _C.greater, _C.greater_equal
erf = _C.erf
erf_inv = _C.erf_inv
exp = _C.exp
exp2 = _C.exp2
expm1 = _C.expm1
floor = _C.floor
is_finite = _C.isfinite
log = _C.log
log1p = _C.log1p
logistic = _C.sigmoid
mul = _C.multiply
neg = _C.neg
sub = _C.subtract
pow = _C.power
rsqrt = _C.rsqrt
sign = _C.sign
sin = _C.sin
sqrt = _C.sqrt
tan = _C.tan
tanh = _C.tanh
shift_left = _C.left_shift
bitwise_and, bitwise_or, bitwise_xor = _C.bitwise_and, _C.bitwise_or, _C.bitwise_xor
bitwise_not = _C.logical_not


def div(x, y):
    """Division; integers round towards zero (C's), unlike tnp's floor_divide."""
    return _C.divide(x, y)


def rem(x, y):
    """The remainder with the dividend's sign (C's fmod), lax.rem's."""
    return _C.rem(x, y)


def round(x, rounding_method=0):
    """Halves away from zero (RoundingMethod.AWAY_FROM_ZERO, 0, lax's default) or to even (TO_NEAREST_EVEN, 1)."""
    method = _lax_types.RoundingMethod[rounding_method] if isinstance(rounding_method, str) else \
        _lax_types.RoundingMethod(rounding_method)
    if method == _lax_types.RoundingMethod.TO_NEAREST_EVEN:
        return _tnp.round(x)
    return _C.round(x)


def shift_right_arithmetic(x, y):
    """The sign bit shifted in; unsigned values are read as signed ones of their width."""
    x = asarray(x)
    if x._dtype_name == "u32":
        return _C.astype(_C.right_shift(_C.astype(x, "i32"), y), "u32")
    if x._dtype_name == "u8":
        signed = _C.astype(x, "i32") - 256 * _C.astype(_C.greater_equal(x, 128), "i32")
        return _C.astype(_C.bitwise_and(_C.right_shift(signed, y), 255), "u8")
    return _C.right_shift(x, y)


def shift_right_logical(x, y):
    """Zeros shifted in from the left, whatever the sign (through the unsigned type of the same width)."""
    x = asarray(x)
    if x._dtype_name == "i32":
        return _C.astype(_C.right_shift(_C.astype(x, "u32"), _C.astype(asarray(y), "u32")), "i32")
    return _C.right_shift(x, y)


def clamp(min, x, max):
    return _C.minimum(_C.maximum(x, min), max)


def select(pred, on_true, on_false):
    return _C.where(pred, on_true, on_false)


def select_n(which, *cases):
    """cases[which]: which is a bool (two cases) or an integer array."""
    if not cases:
        raise ValueError("select_n: at least one case is required")
    which = asarray(which)
    if which._dtype_name == "bool":
        if len(cases) != 2:
            raise ValueError("select_n: a bool selector takes exactly two cases")
        return _C.where(which, cases[1], cases[0])
    out = cases[-1]
    for k in range(len(cases) - 2, -1, -1):
        out = _C.where(_C.equal(which, k), cases[k], out)
    return out


def convert_element_type(operand, new_dtype):
    return _C.astype(asarray(operand), _engine_dtype(new_dtype))


def broadcast(operand, sizes):
    operand = asarray(operand)
    return _C.broadcast_to(operand, list(sizes) + list(operand.shape))


def broadcast_in_dim(operand, shape, broadcast_dimensions):
    """operand's dim i becomes dim broadcast_dimensions[i] of shape; the others are broadcast."""
    operand = asarray(operand)
    expanded = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        expanded[d] = operand.shape[i]
    return _C.broadcast_to(_C.reshape(operand, expanded), list(shape))


def reshape(operand, new_sizes, dimensions=None):
    operand = asarray(operand)
    if dimensions is not None:
        operand = _C.transpose(operand, list(dimensions))
    return _C.reshape(operand, list(new_sizes))


def transpose(operand, permutation):
    return _C.transpose(asarray(operand), list(permutation))


def squeeze(array, dimensions):
    return _C.squeeze(asarray(array), list(dimensions))


def expand_dims(array, dimensions):
    return _tnp.expand_dims(array, tuple(dimensions))


def concatenate(operands, dimension):
    return _C.concatenate([asarray(o) for o in operands], dimension)


def rev(operand, dimensions):
    return _C.flip(asarray(operand), list(dimensions))


def pad(operand, padding_value, padding_config):
    """padding_config: one (low, high, interior) per dim."""
    lo, hi, interior = zip(*padding_config) if padding_config else ((), (), ())
    return _C.pad(asarray(operand), list(lo), list(hi), float(padding_value), list(interior))


def slice(operand, start_indices, limit_indices, strides=None):
    operand = asarray(operand)
    return _C.slice(operand, list(start_indices), list(limit_indices), list(strides or [1] * operand.ndim))


def slice_in_dim(operand, start_index, limit_index, stride=1, axis=0):
    operand = asarray(operand)
    axis %= operand.ndim
    n = operand.shape[axis]
    start, limit, _ = _builtins.slice(start_index, limit_index).indices(n)
    starts = [start if i == axis else 0 for i in range(operand.ndim)]
    limits = [limit if i == axis else d for i, d in enumerate(operand.shape)]
    strides = [stride if i == axis else 1 for i in range(operand.ndim)]
    return _C.slice(operand, starts, limits, strides)


def _clamped_start(start, dim, size):
    """A start index (int or 0-d array): counted from the end when negative (jax.lax's), then clamped so that
    [start, start + size) lies inside the dim, as XLA's."""
    if isinstance(start, (int, _np.integer)):
        start = int(start) + dim if start < 0 else int(start)
        return _builtins.min(_builtins.max(start, 0), dim - size)
    start = _C.astype(asarray(start), "i32")
    start = _C.where(_C.less(start, 0), start + dim, start)
    return _C.minimum(_C.maximum(start, 0), dim - size)


def dynamic_slice(operand, start_indices, slice_sizes):
    """operand[start : start + size] on every dim, the starts (ints or traced scalars) clamped into range as
    XLA's: one gather per dim whose start is traced, a slice for the rest."""
    operand = asarray(operand)
    starts = list(start_indices)
    if len(starts) != operand.ndim or len(slice_sizes) != operand.ndim:
        raise ValueError(f"dynamic_slice: {len(starts)} starts and {len(slice_sizes)} sizes for an array of rank "
                         f"{operand.ndim}")
    out = operand
    for axis, (start, size) in enumerate(zip(starts, slice_sizes)):
        dim = operand.shape[axis]
        if size > dim:
            raise ValueError(f"dynamic_slice: slice size {size} exceeds dim {axis} of size {dim}")
        s = _clamped_start(start, dim, size)
        if isinstance(s, int):
            out = slice_in_dim(out, s, s + size, 1, axis)
        else:
            out = _C.take(out, _C.iota([size], 0, "i32") + s, axis)
    return out


def dynamic_slice_in_dim(operand, start_index, slice_size, axis=0):
    operand = asarray(operand)
    axis %= operand.ndim
    starts = [start_index if i == axis else 0 for i in range(operand.ndim)]
    sizes = [slice_size if i == axis else d for i, d in enumerate(operand.shape)]
    return dynamic_slice(operand, starts, sizes)


def dynamic_index_in_dim(operand, index, axis=0, keepdims=True):
    out = dynamic_slice_in_dim(operand, index, 1, axis)
    return out if keepdims else _C.squeeze(out, [axis % out.ndim])


def dynamic_update_slice(operand, update, start_indices):
    """operand with update written at the starts (clamped so that it fits, as XLA's): update gathered to
    operand's shape, then selected inside the window. Differentiable in both, batches under vmap."""
    operand, update = asarray(operand), asarray(update)
    if update.ndim != operand.ndim:
        raise ValueError(f"dynamic_update_slice: update of rank {update.ndim} for an operand of rank {operand.ndim}")
    if update.size == 0:
        return operand
    placed, inside = update, None
    for axis, (start, size) in enumerate(zip(start_indices, update.shape)):
        dim = operand.shape[axis]
        if size > dim:
            raise ValueError(f"dynamic_update_slice: update dim {axis} of size {size} exceeds the operand's {dim}")
        s = _clamped_start(start, dim, size)
        rel = _C.iota([dim], 0, "i32") - s
        placed = _C.take(placed, _C.minimum(_C.maximum(rel, 0), size - 1), axis)
        ok = _C.bitwise_and(_C.greater_equal(rel, 0), _C.less(rel, size))
        ok = _C.reshape(ok, [dim if i == axis else 1 for i in range(operand.ndim)])
        inside = ok if inside is None else _C.bitwise_and(inside, ok)
    if inside is None:  # a 0-d operand
        return _C.astype(update, operand._dtype_name)
    return _C.where(inside, _C.astype(placed, operand._dtype_name), operand)


def dynamic_update_slice_in_dim(operand, update, start_index, axis):
    operand = asarray(operand)
    axis %= operand.ndim
    return dynamic_update_slice(operand, update, [start_index if i == axis else 0 for i in range(operand.ndim)])


def dynamic_update_index_in_dim(operand, update, index, axis):
    operand, update = asarray(operand), asarray(update)
    axis %= operand.ndim
    if update.ndim == operand.ndim - 1:
        update = _C.expand_dims(update, axis)
    return dynamic_update_slice_in_dim(operand, update, index, axis)


def iota(dtype, size):
    return _C.iota([int(size)], 0, _engine_dtype(dtype))


def full(shape, fill_value, dtype=None):
    if dtype is None:
        fill = asarray(fill_value)
        return _C.broadcast_to(fill, list(shape)) if fill.ndim == 0 else _tnp.full(shape, fill_value)
    return _tnp.full(shape, fill_value, dtype)


def full_like(x, fill_value, dtype=None, shape=None):
    x = asarray(x)
    return _tnp.full(x.shape if shape is None else shape, fill_value, x.dtype if dtype is None else dtype)


def reduce_sum(operand, axes):
    return _C.sum(asarray(operand), list(axes), False) if len(axes) else asarray(operand)


def reduce_max(operand, axes):
    return _C.max(asarray(operand), list(axes), False) if len(axes) else asarray(operand)


def reduce_min(operand, axes):
    return _C.min(asarray(operand), list(axes), False) if len(axes) else asarray(operand)


def reduce_prod(operand, axes):
    return _C.prod(asarray(operand), list(axes), False) if len(axes) else asarray(operand)


def argmax(operand, axis, index_dtype):
    return _C.astype(_tnp.argmax(operand, axis), _engine_dtype(index_dtype))


def argmin(operand, axis, index_dtype):
    return _C.astype(_tnp.argmin(operand, axis), _engine_dtype(index_dtype))


def cummin(operand, axis=0, reverse=False):
    operand = asarray(operand)
    if operand._dtype_name in ("u8", "u32", "bool"):
        flipped = _C.logical_not(operand)  # ~x reverses the order of unsigned values
        return _C.logical_not(_C.cummax(flipped, axis, reverse))
    return _C.neg(_C.cummax(_C.neg(operand), axis, reverse))


def dot(lhs, rhs, precision=None, preferred_element_type=None, *, dimension_numbers=None, out_sharding=None):
    """The contraction of lhs's last dim with rhs's first (vector and matrix operands); dot_general's with
    dimension_numbers. precision: anything JAX takes (lax.Precision, a DotAlgorithmPreset, ...), checked;
    products are float32 ones whatever it asks (tessera/_lax_types.py)."""
    _lax_types.canonicalize_precision(precision)
    if dimension_numbers is not None:
        return dot_general(lhs, rhs, dimension_numbers, precision, preferred_element_type)
    lhs, rhs = asarray(lhs), asarray(rhs)
    if lhs.ndim > 2 or rhs.ndim > 2:
        raise TypeError(f"lax.dot: operands of rank 1 or 2, got {lhs.shape} and {rhs.shape}")
    out = _tnp.matmul(lhs, rhs)
    return out if preferred_element_type is None else _C.astype(out, _engine_dtype(preferred_element_type))


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _dims(dims, rank, name):
    dims = tuple(_builtins.int(d) for d in dims)
    for d in dims:
        if not 0 <= d < rank:
            raise TypeError(f"dot_general: {name} dimension {d} is out of range for an operand of rank {rank}")
    if len(set(dims)) != len(dims):
        raise TypeError(f"dot_general: {name} dimensions {dims} repeat a dimension")
    return dims


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, out_sharding=None):
    """jax.lax.dot_general: dimension_numbers ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch)).
    The result's dims are the batch dims, then lhs's free dims, then rhs's, each in operand order. One engine
    dot_general (written as a two-operand einsum over letters named after the dims). preferred_element_type:
    the result's dtype; operands are read in it when it holds them exactly (bf16 operands, f32 result), else
    the product is computed in their promoted dtype and converted. precision: as dot's."""
    _lax_types.canonicalize_precision(precision)
    lhs, rhs = asarray(lhs), asarray(rhs)
    (lc, rc), (lb, rb) = dimension_numbers
    lc, lb = _dims(lc, lhs.ndim, "lhs contracting"), _dims(lb, lhs.ndim, "lhs batch")
    rc, rb = _dims(rc, rhs.ndim, "rhs contracting"), _dims(rb, rhs.ndim, "rhs batch")
    if len(lc) != len(rc) or len(lb) != len(rb):
        raise TypeError(f"dot_general: {len(lc)} lhs and {len(rc)} rhs contracting dimensions, {len(lb)} lhs and "
                        f"{len(rb)} rhs batch dimensions; each pair must have equal lengths")
    if set(lc) & set(lb) or set(rc) & set(rb):
        raise TypeError(f"dot_general: a dimension is both batch and contracting in {dimension_numbers}")
    for kind, ld, rd in (("batch", lb, rb), ("contracting", lc, rc)):
        for i, j in zip(ld, rd):
            if lhs.shape[i] != rhs.shape[j]:
                raise TypeError(f"dot_general: {kind} dimension {i} of lhs {lhs.shape} has size {lhs.shape[i]} "
                                f"but dimension {j} of rhs {rhs.shape} has {rhs.shape[j]}")
    if lhs.ndim + rhs.ndim - len(lb) - len(lc) > len(_LETTERS):
        raise ValueError(f"dot_general: operands of ranks {lhs.ndim} and {rhs.ndim} have too many dimensions")
    letters = iter(_LETTERS)
    sl, sr = [None] * lhs.ndim, [None] * rhs.ndim
    for i, j in (*zip(lb, rb), *zip(lc, rc)):
        sl[i] = sr[j] = next(letters)
    for s in (sl, sr):
        for k, c in enumerate(s):
            if c is None:
                s[k] = next(letters)
    out = ([sl[i] for i in lb] + [c for i, c in enumerate(sl) if i not in lb and i not in lc]
           + [c for j, c in enumerate(sr) if j not in rb and j not in rc])
    if preferred_element_type is not None:
        want = _engine_dtype(preferred_element_type)
        have = _engine_dtype(_tnp.promote_types(lhs.dtype, rhs.dtype))
        if _engine_dtype(_tnp.promote_types(have, want)) == want:
            lhs, rhs = _C.astype(lhs, want), _C.astype(rhs, want)
    r = _C.einsum("".join(sl) + "," + "".join(sr) + "->" + "".join(out), lhs, rhs)
    return r if preferred_element_type is None else _C.astype(r, _engine_dtype(preferred_element_type))


def sort_key_val(keys, values, dimension=-1, is_stable=True):
    return tuple(_C.sort([asarray(keys), asarray(values)], dimension, is_stable, 1))


def switch(index, branches, *operands):
    """branches[index](*operands), index clamped to the branches (lax.switch); a traced index becomes nested
    conds."""
    from .lax import cond
    branches = list(branches)
    if not branches:
        raise ValueError("switch: at least one branch is required")
    if isinstance(index, (int, _np.integer)):
        return branches[_builtins.min(_builtins.max(int(index), 0), len(branches) - 1)](*operands)
    index = _C.minimum(_C.maximum(_C.astype(asarray(index), "i32"), 0), len(branches) - 1)
    chosen = branches[-1]
    for k in range(len(branches) - 2, -1, -1):
        chosen = (lambda k, rest: lambda *ops: cond(_C.equal(index, k), branches[k], rest, *ops))(k, chosen)
    return chosen(*operands)


def map(f, xs):
    """f over the leading axis of xs (a pytree), one scan."""
    from .lax import scan
    return scan(lambda carry, x: (carry, f(x)), (), xs)[1]


# ---- more of jax.lax, written with the ops above --------------------------------------------------------

__all__ += ["acosh", "asinh", "atanh", "cbrt", "erfc", "reciprocal", "broadcasted_iota", "broadcast_to_rank",
            "broadcast_shapes", "collapse", "index_in_dim", "index_take", "batch_matmul", "reduce_and", "reduce_or",
            "reduce_xor", "split", "tile", "real", "imag", "conj", "population_count", "clz", "scatter_sub",
            "approx_max_k", "approx_min_k", "bessel_i0e", "bitcast_convert_type", "nextafter", "igamma", "igammac",
            "betainc", "stack", "unstack", "empty", "broadcast_like", "with_sharding_constraint", "zeta", "polygamma"]

acosh = _tnp.arccosh
asinh = _tnp.arcsinh
atanh = _tnp.arctanh
cbrt = _tnp.cbrt
real = _tnp.real
imag = _tnp.imag
conj = _tnp.conj


# erfc's rational Chebyshev fit (Press et al., Numerical Recipes, "erfcc"): relative error under 1.2e-7 for
# every x >= 0, where 1 - erf(x) in float32 loses all digits past x = 4.
_ERFC_FIT = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
             -0.82215223, 0.17087277)


def _erfc_parts(a):
    """For a >= 0: (t, e) with erfc(a) = t exp(-a^2 + e), t = 1/(1 + a/2) and e the fit's polynomial in t;
    erfcx and log_ndtr (tessera.scipy.special) use the parts without forming erfc."""
    t = 1.0 / (1.0 + 0.5 * a)
    poly = _C.scalar(_ERFC_FIT[-1], t) * t
    for c in reversed(_ERFC_FIT[1:-1]):
        poly = (poly + c) * t
    return t, _ERFC_FIT[0] + poly


def erfc(x):
    """1 - erf(x), accurate in the tail (erfc(10) = 2.1e-45 is not 1 - 1): a rational fit in t = 1/(1 + |x|/2)
    for |x|, and 2 - erfc(-x) for negative x."""
    x = _tnp.asarray(x)
    x = x if x._dtype_name in ("f32", "f64", "f16", "bf16") else _C.astype(x, "f32")
    a = _tnp.abs(x)
    t, e = _erfc_parts(a)
    pos = t * _tnp.exp(-a * a + e)
    return _tnp.where(x < 0, 2.0 - pos, pos)


def reciprocal(x):
    """1 / x."""
    x = asarray(x)
    return _C.scalar(1, x) / x


def broadcasted_iota(dtype, shape, dimension):
    """An array of shape whose values count along dimension (0, 1, 2, ...)."""
    shape = [int(d) for d in shape]
    return _C.iota(shape, int(dimension) % _builtins.max(len(shape), 1), _engine_dtype(dtype))


def broadcast_to_rank(x, rank):
    """x with leading 1-sized dims added up to rank."""
    x = asarray(x)
    return x if x.ndim >= rank else _C.reshape(x, [1] * (rank - x.ndim) + list(x.shape))


def broadcast_shapes(*shapes):
    return tuple(_np.broadcast_shapes(*[tuple(s) for s in shapes]))


def collapse(operand, start_dimension, stop_dimension=None):
    """operand with dims [start, stop) merged into one."""
    operand = asarray(operand)
    n = operand.ndim
    start = start_dimension % n if n else 0
    stop = n if stop_dimension is None else (stop_dimension if stop_dimension >= 0 else stop_dimension + n)
    size = int(_np.prod(operand.shape[start:stop]))
    return _C.reshape(operand, list(operand.shape[:start]) + [size] + list(operand.shape[stop:]))


def index_in_dim(operand, index, axis=0, keepdims=True):
    """The slice at a static index along axis (negative counts from the end)."""
    operand = asarray(operand)
    axis %= operand.ndim
    n = operand.shape[axis]
    if not -n <= index < n:
        raise IndexError(f"index_in_dim: index {index} is out of bounds for axis {axis} of size {n}")
    index %= n
    out = slice_in_dim(operand, index, index + 1, 1, axis)
    return out if keepdims else _C.squeeze(out, [axis])


def index_take(src, idxs, axes):
    """src indexed by one integer array per axis in axes (broadcast together), the other axes kept after."""
    src = asarray(src)
    axes = [a % src.ndim for a in axes]
    front = _tnp.moveaxis(src, axes, list(range(len(axes))))  # the indexed axes first, then the rest in order
    return front[tuple(asarray(i) for i in idxs)]


def batch_matmul(lhs, rhs, precision=None):
    """lhs [..., m, k] times rhs [..., k, n] with equal batch dims (precision: as dot's)."""
    _lax_types.canonicalize_precision(precision)
    lhs, rhs = asarray(lhs), asarray(rhs)
    if lhs.ndim < 2 or lhs.ndim != rhs.ndim or tuple(lhs.shape[:-2]) != tuple(rhs.shape[:-2]):
        raise ValueError(f"batch_matmul: operands of one rank >= 2 with equal batch dims expected; got shapes "
                         f"{tuple(lhs.shape)} and {tuple(rhs.shape)}")
    return _tnp.matmul(lhs, rhs)


def reduce_and(operand, axes):
    return _tnp.all(asarray(operand), axis=tuple(axes)) if len(axes) else asarray(operand)


def reduce_or(operand, axes):
    return _tnp.any(asarray(operand), axis=tuple(axes)) if len(axes) else asarray(operand)


def reduce_xor(operand, axes):
    """The parity of the True values (bools), or the bitwise xor (integers), over axes: a sum modulo 2 for bools,
    a loop over the axis for integers."""
    x = asarray(operand)
    if not len(axes):
        return x
    if x._dtype_name == "bool":
        ones = _tnp.sum(_C.astype(x, "i32"), axis=tuple(axes))
        return _C.equal(ones % 2, _C.scalar(1, ones))
    moved = _tnp.moveaxis(x, list(axes), list(range(len(axes))))
    flat = _C.reshape(moved, [-1] + list(moved.shape[len(axes):]))
    out = flat[0]
    for i in range(1, flat.shape[0]):
        out = _C.bitwise_xor(out, flat[i])
    return out


def split(operand, sizes, axis=0):
    """operand cut along axis into consecutive pieces of the given sizes (which sum to the axis)."""
    operand = asarray(operand)
    sizes = [int(s) for s in sizes]
    axis %= operand.ndim
    if _builtins.sum(sizes) != operand.shape[axis]:
        raise ValueError(f"split: sizes {sizes} do not sum to axis {axis}'s size {operand.shape[axis]}")
    return _tnp.split(operand, list(_np.cumsum(sizes)[:-1]), axis)


def tile(operand, multiples):
    return _tnp.tile(operand, tuple(multiples))


def population_count(x):
    """The number of set bits of each unsigned or signed 32-bit integer (two's complement), by the SWAR sums."""
    x = asarray(x)
    if x._dtype_name not in ("i32", "u32", "u8"):
        raise TypeError(f"population_count: an integer operand expected; got {x.dtype}")
    v = _C.astype(x, "u32") if x._dtype_name != "u32" else x
    c = lambda n: _C.scalar(n, v)  # noqa: E731
    v = v - _C.bitwise_and(shift_right_logical(v, c(1)), c(0x55555555))
    v = _C.bitwise_and(v, c(0x33333333)) + _C.bitwise_and(shift_right_logical(v, c(2)), c(0x33333333))
    v = _C.bitwise_and(v + shift_right_logical(v, c(4)), c(0x0F0F0F0F))
    v = shift_right_logical(v * c(0x01010101), c(24))
    return _C.astype(v, x._dtype_name)


_BIT_WIDTH = {"f32": 32, "i32": 32, "u32": 32, "f64": 64, "i64": 64, "u8": 8}
# The integer type that holds a word of each width as bits (i64's shifts are masked back to 32 bits).
_WORD = {8: "u8", 32: "u32", 64: "i64"}


def bitcast_convert_type(operand, new_dtype):
    """operand's bits read as new_dtype, as jax.lax's: same width keeps the shape; to a narrower type adds a
    trailing axis of width ratio (the low-order part first, as on a little-endian machine); from a narrower type
    takes that trailing axis away. bf16/f16 have no 16-bit integer partner here, and bool is not bits."""
    x = asarray(operand)
    src, dst = x._dtype_name, _engine_dtype(new_dtype)
    for dt in (src, dst):
        if dt not in _BIT_WIDTH:
            raise TypeError(f"bitcast_convert_type: {_tnp.dtype(dt) if dt != 'bf16' else 'bfloat16'} has no "
                            f"integer type of its width to bitcast through ({src} -> {dst})")
    ws, wd = _BIT_WIDTH[src], _BIT_WIDTH[dst]
    if ws == wd:
        return x if src == dst else _C.bitcast(x, dst)
    word = lambda v, width: v if v._dtype_name == _WORD[width] else _C.bitcast(v, _WORD[width])  # noqa: E731
    if ws > wd:
        ratio, bits = ws // wd, word(x, ws)
        mask = _C.scalar((1 << wd) - 1, bits)
        parts = [_C.bitwise_and(shift_right_logical(bits, _C.scalar(k * wd, bits)) if k else bits, mask)
                 for k in range(ratio)]
        parts = [word(_C.astype(p, _WORD[wd]), wd) for p in parts]
        out = _C.stack(parts, x.ndim)
        return out if dst == _WORD[wd] else _C.bitcast(out, dst)
    ratio = wd // ws
    if x.ndim == 0 or x.shape[-1] != ratio:
        raise ValueError(f"bitcast_convert_type: {src} -> {dst} takes a trailing axis of {ratio}; got shape "
                         f"{tuple(x.shape)}")
    bits = word(x, ws)
    acc = None
    for k in range(ratio):
        part = _C.astype(_C.squeeze(_C.slice(bits, [0] * (x.ndim - 1) + [k], list(x.shape[:-1]) + [k + 1],
                                             [1] * x.ndim), [x.ndim - 1]), _WORD[wd])
        part = _C.left_shift(part, _C.scalar(k * ws, part)) if k else part
        acc = part if acc is None else _C.bitwise_or(acc, part)
    return acc if dst == _WORD[wd] else _C.bitcast(acc, dst)


def clz(x):
    """The number of leading zero bits of each 32-bit integer (32 for 0): smear the highest set bit down, then
    count the bits that remain unset."""
    x = asarray(x)
    if x._dtype_name not in ("i32", "u32"):
        raise TypeError(f"clz: a 32-bit integer operand expected; got {x.dtype}")
    v = _C.astype(x, "u32") if x._dtype_name != "u32" else x
    for s in (1, 2, 4, 8, 16):
        v = _C.bitwise_or(v, shift_right_logical(v, _C.scalar(s, v)))
    return _C.astype(_C.scalar(32, v) - population_count(v), x._dtype_name)


def scatter_sub(operand, indices, updates, axis=0, batch_dims=0, *, dimension_numbers=None,
                indices_are_sorted=False, unique_indices=False, mode=None):
    """operand with updates subtracted at indices (scatter_add of -updates), in scatter's layouts."""
    from .lax import scatter_add
    return scatter_add(operand, indices, -asarray(updates), axis, batch_dims, dimension_numbers=dimension_numbers,
                       mode=mode)


def approx_max_k(operand, k, reduction_dimension=-1, recall_target=0.95, is_max_k=True,
                 reduction_input_size_override=-1, aggregate_to_topk=True):
    """The k largest values along the last dim and their indices: exactly (top_k), which any recall target
    allows."""
    from .lax import top_k
    operand = asarray(operand)
    if reduction_dimension not in (-1, operand.ndim - 1):
        raise NotImplementedError("approx_max_k: only the last dimension (reduction_dimension=-1)")
    if not is_max_k:
        values, idx = top_k(-operand, k)
        return -values, idx
    return top_k(operand, k)


def approx_min_k(operand, k, reduction_dimension=-1, recall_target=0.95, reduction_input_size_override=-1,
                 aggregate_to_topk=True):
    """The k smallest values along the last dim and their indices (exactly)."""
    return approx_max_k(operand, k, reduction_dimension, recall_target, False)


def bessel_i0e(x):
    """exp(-|x|) I0(x), the exponentially scaled modified Bessel function of order 0: finite for every x."""
    from ._np_grids import _i0_scaled
    return _i0_scaled(asarray(x))


# ---- jax.lax's names for functions tessera.numpy and tessera.scipy hold ------------------------------------


def nextafter(x1, x2):
    """The next representable number after x1 towards x2 (tessera.numpy.nextafter)."""
    return _tnp.nextafter(x1, x2)


def igamma(a, x):
    """The regularized lower incomplete gamma function P(a, x) (scipy.special.gammainc)."""
    from ._scipy import gammainc
    return gammainc(a, x)


def igammac(a, x):
    """The regularized upper incomplete gamma function Q(a, x) (scipy.special.gammaincc)."""
    from ._scipy import gammaincc
    return gammaincc(a, x)


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b) (jax.lax.betainc, scipy.special.betainc)."""
    from ._scipy import betainc as _betainc
    return _betainc(a, b, x)


def zeta(x, q):
    """The Hurwitz zeta function (tessera.scipy.special.zeta)."""
    from ._scipy import zeta as _zeta
    return _zeta(x, q)


def polygamma(m, x):
    """The m-th derivative of digamma (tessera.scipy.special.polygamma)."""
    from ._scipy import polygamma as _polygamma
    return _polygamma(m, x)


def stack(operands, axis=0):
    """The operands, of one shape, stacked along a new axis."""
    return _tnp.stack(operands, axis)


def unstack(operand, axis=0):
    """The slices of operand along axis, as a list."""
    operand = asarray(operand)
    return [index_in_dim(operand, i, axis, keepdims=False) for i in range(operand.shape[axis])]


def empty(dtype):
    """An array of shape () and this dtype (jax.lax.empty; its value is unspecified: here 0)."""
    return _C.full([], 0.0, _engine_dtype(dtype))


def broadcast_like(x, target):
    """x broadcast to target's shape (numpy's rules: trailing dims align)."""
    return _C.broadcast_to(asarray(x), list(asarray(target).shape))


def with_sharding_constraint(x, shardings):
    """tessera.sharding.with_sharding_constraint."""
    from .sharding import with_sharding_constraint as _constraint
    return _constraint(x, shardings)


# ---- reduce, mulhi, bessel_i1e --------------------------------------------------------------------------

__all__ += ["reduce", "mulhi", "bessel_i1e"]


def _monoids():
    """(the functions that name it, the engine reduction, the binary op, whether it takes bools) per monoid
    lax.reduce recognises; built on first use since lax.add, lax.max and lax.min live in tessera.lax."""
    import operator
    from . import lax
    return (
        ({lax.add, _C.add, _tnp.add, operator.add}, reduce_sum, _C.add, False),
        ({_C.multiply, _tnp.multiply, operator.mul}, reduce_prod, _C.multiply, False),
        ({lax.max, _C.maximum, _tnp.maximum}, reduce_max, _C.maximum, False),
        ({lax.min, _C.minimum, _tnp.minimum}, reduce_min, _C.minimum, False),
        # on bools only: on integers these are bitwise, which the fold below does
        ({_C.bitwise_and, _tnp.bitwise_and, _tnp.logical_and, operator.and_}, reduce_and, _C.bitwise_and, True),
        ({_C.bitwise_or, _tnp.bitwise_or, _tnp.logical_or, operator.or_}, reduce_or, _C.bitwise_or, True),
        ({_C.bitwise_xor, _tnp.bitwise_xor, _tnp.logical_xor, operator.xor}, reduce_xor, _C.bitwise_xor, None),
    )


def _monoid_reduction(computation, dtype):
    """(engine reduction, binary op) for computation on dtype, or None when the fold must do it."""
    for names, reduction, op, bools in _monoids():
        try:
            found = computation in names
        except TypeError:  # an unhashable callable
            return None
        if found and (bools is None or bools == (dtype == "bool")):
            return reduction, op
    return None


def reduce(operands, init_values, computation, dimensions):
    """jax.lax.reduce: operands (an array or a pytree of arrays of one shape) reduced over dimensions with
    computation(accumulated, element), which takes and returns pytrees of operands' structure, starting from
    init_values (scalars, a pytree of operands' structure). A single array with computation lax.add, lax.mul,
    lax.max, lax.min (or tnp.add, tnp.multiply, tnp.maximum, tnp.minimum, operator.add, operator.mul; on bools
    also the and/or/xor functions of lax, tnp and operator) is one engine reduction, then combined once with the
    init value (XLA's CPU result for an init value that is not the identity). Any other computation is a left
    fold, one scan over the reduced elements in row-major order: acc = computation(acc, x) from acc =
    init_values, on whole slices of the kept dims at a time (so computation must work elementwise, as JAX's
    scalar computations do); the order is XLA's on the CPU, whatever the order of dimensions. No dimensions:
    the operands as they are (JAX's). Both differentiate, batch and jit."""
    from .lax import scan
    from .tree_util import tree_flatten, tree_unflatten
    leaves, tree = tree_flatten(operands)
    init_leaves, init_tree = tree_flatten(init_values)
    if init_tree != tree:
        raise ValueError(f"reduce: operands {tree} must have the same tree structure as init_values {init_tree}")
    xs = [asarray(x) for x in leaves]
    if not xs:
        return operands
    shape = tuple(xs[0].shape)
    if any(tuple(x.shape) != shape for x in xs):
        raise ValueError(f"reduce: the operands must have one shape, got {[tuple(x.shape) for x in xs]}")
    inits = [_C.astype(asarray(v), x._dtype_name) for v, x in zip(init_leaves, xs)]
    if any(v.ndim for v in inits):
        raise ValueError(f"reduce: init_values must be scalars, got shapes {[tuple(v.shape) for v in inits]}")
    ndim = len(shape)
    dims = [int(d) for d in dimensions]
    if any(not -ndim <= d < ndim for d in dims):
        raise ValueError(f"reduce: dimensions {tuple(dims)} out of range for shape {shape}")
    dims = sorted(d % ndim for d in dims)
    if len(set(dims)) != len(dims):
        raise ValueError(f"reduce: repeated dimension in {tuple(dimensions)}")
    if not dims:  # JAX returns the operands as they are, the init values unused
        return tree_unflatten(tree, xs)
    monoid = _monoid_reduction(computation, xs[0]._dtype_name) if len(xs) == 1 else None
    if monoid is not None:
        reduction, op = monoid
        return tree_unflatten(tree, [op(inits[0], reduction(xs[0], dims))])
    # The fold: the reduced dims moved to the front and flattened, x: [n, *kept]; the carry: [*kept].
    kept = [s for d, s in enumerate(shape) if d not in dims]
    n = math.prod(shape[d] for d in dims)
    flat = [_C.reshape(_tnp.moveaxis(x, dims, list(range(len(dims)))), [n] + kept) for x in xs]
    dtypes = [x._dtype_name for x in xs]

    def step(acc, x):
        out_leaves, out_tree = tree_flatten(computation(tree_unflatten(tree, acc), tree_unflatten(tree, x)))
        if out_tree != tree:
            raise TypeError(f"reduce: computation returns {out_tree}, but the operands are {tree}")
        out = [_C.broadcast_to(asarray(v), kept) for v in out_leaves]
        return [v if v._dtype_name == dt else _C.astype(v, dt) for v, dt in zip(out, dtypes)], None

    acc, _ = scan(step, [_C.broadcast_to(v, kept) for v in inits], flat, length=n)
    return tree_unflatten(tree, acc)


def _u32_mulhi(a, b):
    """The high 32 bits of the 64-bit product of two uint32 arrays, from their 16-bit halves (every partial
    product and sum fits 32 bits)."""
    c = lambda v: _C.scalar(v, a)  # noqa: E731
    mask = c(0xFFFF)
    a_lo, a_hi = _C.bitwise_and(a, mask), shift_right_logical(a, c(16))
    b_lo, b_hi = _C.bitwise_and(b, mask), shift_right_logical(b, c(16))
    lo_lo, hi_lo, lo_hi = a_lo * b_lo, a_hi * b_lo, a_lo * b_hi
    cross = shift_right_logical(lo_lo, c(16)) + _C.bitwise_and(hi_lo, mask) + _C.bitwise_and(lo_hi, mask)
    return (a_hi * b_hi + shift_right_logical(hi_lo, c(16)) + shift_right_logical(lo_hi, c(16))
            + shift_right_logical(cross, c(16)))


def mulhi(x, y):
    """jax.lax.mulhi: the high half of the double-width product of two integers of one dtype (uint8, int32,
    uint32; a Python int takes the other operand's dtype): (x * y) >> bits, signed for int32. The signed
    high half is the unsigned one of the same bits less y where x < 0 and x where y < 0 (modulo 2^32)."""
    if isinstance(x, int) and not isinstance(y, int):  # Python ints are weakly typed; numpy's are not
        x = _C.scalar(x, asarray(y))
    if isinstance(y, int):
        y = _C.scalar(y, asarray(x))
    x, y = asarray(x), asarray(y)
    for i, v in enumerate((x, y)):
        if v._dtype_name not in ("u8", "i32", "u32"):
            raise TypeError(f"mulhi does not accept dtype {v.dtype} at position {i}; uint8, int32 and uint32 "
                            "are accepted")
    if x._dtype_name != y._dtype_name:
        raise TypeError(f"mulhi requires arguments to have the same dtypes, got {x.dtype}, {y.dtype}")
    dt = x._dtype_name
    if dt == "u8":
        wide = _C.astype(x, "u32") * _C.astype(y, "u32")
        return _C.astype(shift_right_logical(wide, _C.scalar(8, wide)), "u8")
    if dt == "u32":
        return _u32_mulhi(x, y)
    ux, uy = _C.bitcast(x, "u32"), _C.bitcast(y, "u32")
    zero = _C.scalar(0, ux)
    hi = _u32_mulhi(ux, uy) - _C.where(_C.less(x, _C.scalar(0, x)), uy, zero)
    hi = hi - _C.where(_C.less(y, _C.scalar(0, y)), ux, zero)
    return _C.bitcast(hi, "i32")


# I1's power series (x/2) sum_k (x^2/4)^k / (k! (k+1)!) below |x| = 15 (all terms positive, about x/2 + 10 of
# them matter), its asymptotic series e^x / sqrt(2 pi x) (1 - 3/(8x) - 15/(128x^2) - ...) above: the next term
# is 6e-8 of the sum at 15.
_I1_SERIES_TERMS = 40
_I1_SWITCH = 15.0
_I1_ASYMPTOTIC = (1.0, -3.0 / 8, -15.0 / 128, -315.0 / 3072, -14175.0 / 98304, -1091475.0 / 3932160)


def _i1_parts(x):
    """(x, |x|, I1 by its series at x clamped to [-15, 15], sign(x) e^-|x| I1 by the asymptotic series at
    max(|x|, 15)). Both parts stay finite on the other's side, so where() between them differentiates."""
    from ._np_grids import _series_and_tail

    x = _tnp.asarray(x)
    x = x if x._dtype_name in ("f32", "f64", "f16", "bf16") else _C.astype(x, "f32")
    ax = _C.abs(x)
    small = _C.clip(x, _C.scalar(-_I1_SWITCH, x), _C.scalar(_I1_SWITCH, x))
    big = _C.maximum(ax, _C.scalar(_I1_SWITCH, ax))
    total, scaled = _series_and_tail(small, big, _I1_SERIES_TERMS, lambda k: k * (k + 1), _I1_ASYMPTOTIC)
    return x, ax, big, small * 0.5 * total, _C.sign(x) * scaled


def _i1e(x):
    x, ax, _, series, scaled = _i1_parts(x)
    return _tnp.where(ax > _I1_SWITCH, scaled, series * _C.exp(-ax))


def bessel_i1e(x):
    """exp(-|x|) I1(x), the exponentially scaled modified Bessel function of order 1 (odd, finite for every
    x): I1's power series times exp(-|x|) below |x| = 15, the asymptotic series above."""
    from ._np_grids import _in_float32
    return _in_float32(_i1e, x)


# custom_root and custom_linear_solve: implicit differentiation (tessera/_lax_implicit.py).
from ._lax_implicit import custom_root, custom_linear_solve  # noqa: E402

__all__ += ["custom_root", "custom_linear_solve"]
