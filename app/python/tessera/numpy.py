"""tessera.numpy (import as tnp): numpy's names over the engine's Array API, as jax.numpy.

Arrays are immutable. They convert to numpy without a copy (np.asarray(x) is a read-only view of the array's
buffer; bf16, which numpy lacks, comes back as float32, a copy), and from numpy with one copy. As in JAX with
64-bit mode off, float64 and int64 inputs become float32 and int32 unless a dtype says otherwise."""

import builtins as _builtins
import operator as _operator
import os as _os

import numpy as _np

from . import _tessera as _C

Array = _C.Array
ndarray = Array


class _BFloat16:
    """The bfloat16 dtype (numpy has none): use it wherever a dtype is expected."""

    name = "bfloat16"
    itemsize = 2

    def __repr__(self):
        return "bfloat16"

    def __eq__(self, other):
        return other is self or other in ("bfloat16", "bf16")

    def __hash__(self):
        return hash("bfloat16")


bfloat16 = _BFloat16()
float32 = _np.dtype("float32")
# numpy's constants.
inf, nan, pi, e, newaxis = _np.inf, _np.nan, _np.pi, _np.e, None
float16 = _np.dtype("float16")
float64 = _np.dtype("float64")
int32 = _np.dtype("int32")
int64 = _np.dtype("int64")
uint8 = _np.dtype("uint8")
uint32 = _np.dtype("uint32")
bool_ = _np.dtype("bool")

_ENGINE_TO_PUBLIC = {"f32": float32, "f16": float16, "f64": float64, "bf16": bfloat16, "i32": int32, "i64": int64,
                     "u8": uint8, "u32": uint32, "bool": bool_}
_NUMPY_TO_ENGINE = {"float32": "f32", "float16": "f16", "float64": "f64", "int32": "i32", "int64": "i64",
                    "uint8": "u8", "uint32": "u32", "bool": "bool"}
# 64-bit mode off, as JAX's default: these become their 32-bit kinds when no dtype is asked for.
_CANONICAL = {"f64": "f32", "i64": "i32", "u8": "u8", "int8": "i32", "int16": "i32", "uint16": "u32", "uint64": "u32"}


def _engine_dtype(dtype):
    """The engine's name ('f32', 'bf16', ...) of any dtype spelling: numpy dtypes and types, tnp.bfloat16,
    'float32', 'f32', Python's float/int/bool."""
    if dtype is bfloat16 or (isinstance(dtype, str) and dtype in ("bfloat16", "bf16")):
        return "bf16"
    if isinstance(dtype, str) and dtype in _ENGINE_TO_PUBLIC:
        return dtype
    if dtype is float:
        return "f32"
    if dtype is int:
        return "i32"
    if dtype is _builtins.bool:
        return "bool"
    name = _np.dtype(dtype).name
    if name not in _NUMPY_TO_ENGINE:
        raise TypeError(f"tessera has no dtype {name}")
    return _NUMPY_TO_ENGINE[name]


def dtype(x):
    """The public dtype object of a spelling ('f32', np.float32, tnp.bfloat16, ...)."""
    return _ENGINE_TO_PUBLIC[_engine_dtype(x)]


# ---- conversion -------------------------------------------------------------------------------------------


def asarray(a, dtype=None):
    """An Array from an Array, a numpy array, a Python scalar or nested lists (one copy from host memory)."""
    target = None if dtype is None else _engine_dtype(dtype)
    if isinstance(a, Array):
        return a if target is None or a._dtype_name == target else _C.astype(a, target)
    if isinstance(a, (list, tuple)) and _holds_array(a):
        # Nested sequences with Arrays in them (which may be tracers): stacked, as jnp.asarray does.
        return _C.stack([asarray(x, dtype) for x in a], 0)
    host = _np.asarray(a)
    if host.dtype.kind not in "biuf":
        raise TypeError(f"asarray: cannot make an array of {host.dtype} values")
    name = _NUMPY_TO_ENGINE.get(host.dtype.name) or host.dtype.name
    if target is None:
        target = _CANONICAL.get(name, name)
        if target not in _ENGINE_TO_PUBLIC:
            target = "f32" if host.dtype.kind == "f" else "i32"
    if target == "bf16":
        return _C.astype(_C.from_buffer(_np.require(host, _np.float32, "C"), "f32"), "bf16")
    return _C.from_buffer(_np.require(host, _ENGINE_TO_PUBLIC[target], "C"), target)


array = asarray


def from_dlpack(x):
    """An Array copied from any object with __dlpack__ (numpy, PyTorch, CuPy host arrays) or a DLPack capsule:
    host memory, any strides. The other way, Array.__dlpack__ shares the buffer without a copy
    (numpy.from_dlpack(x), torch.from_dlpack(x))."""
    return _C.from_dlpack(x)


def _holds_array(seq):
    return _builtins.any(isinstance(x, Array) or isinstance(x, (list, tuple)) and _holds_array(x) for x in seq)


def _to_numpy(self, dtype=None, copy=None):
    """numpy's __array__: a read-only view of the buffer, or a writable copy when one is asked for."""
    view = self._host_view()
    if dtype is not None:
        return view.astype(dtype)
    return view.copy() if copy else view


# ---- creation ---------------------------------------------------------------------------------------------


def _shape(shape):
    if isinstance(shape, int):
        return [shape]
    return [_operator.index(d) for d in shape]


def full(shape, fill_value, dtype=None):
    if dtype is None:
        dtype = _np.asarray(fill_value).dtype
        dtype = {"f": float32, "i": int32, "u": int32, "b": bool_}[dtype.kind]
    return _C.full(_shape(shape), float(fill_value), _engine_dtype(dtype))


def zeros(shape, dtype=float32):
    return _C.full(_shape(shape), 0.0, _engine_dtype(dtype))


def ones(shape, dtype=float32):
    return _C.full(_shape(shape), 1.0, _engine_dtype(dtype))


def zeros_like(a, dtype=None):
    a = asarray(a)
    return zeros(a.shape, a._dtype_name if dtype is None else dtype)


def ones_like(a, dtype=None):
    a = asarray(a)
    return ones(a.shape, a._dtype_name if dtype is None else dtype)


def full_like(a, fill_value, dtype=None):
    a = asarray(a)
    return full(a.shape, fill_value, a._dtype_name if dtype is None else dtype)


def arange(start, stop=None, step=1, dtype=None):
    """numpy's arange: iota, scaled and shifted (the values are known, so the length is too)."""
    if stop is None:
        start, stop = 0, start
    n = _builtins.max(0, -(-(stop - start) // step)) if _builtins.all(isinstance(v, int) for v in (start, stop, step)) \
        else len(_np.arange(start, stop, step))
    if dtype is None:
        dtype = int32 if _builtins.all(isinstance(v, int) for v in (start, stop, step)) else float32
    target = _engine_dtype(dtype)
    x = _C.iota([int(n)], 0, target)
    if step != 1:
        x = x * step
    if start != 0:
        x = x + start
    return x


def eye(N, M=None, k=0, dtype=float32):
    """Ones where column - row == k."""
    M = N if M is None else M
    rows = _C.iota([N, M], 0, "i32")
    cols = _C.iota([N, M], 1, "i32")
    return _C.astype(_C.equal(cols - rows, k), _engine_dtype(dtype))


def linspace(start, stop, num=50, endpoint=True, dtype=float32):
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0
    return _C.astype(_C.iota([num], 0, "f32") * step + start, _engine_dtype(dtype))


# ---- elementwise ------------------------------------------------------------------------------------------

_FLOATING = ("f32", "f64", "f16", "bf16")


def _is_floating(a):
    return a._dtype_name in _FLOATING


def _inexact(x):
    """x as a floating Array: integers and bools become float32, as jax.numpy's promote_args_inexact does for
    sqrt, exp, true division and the others that have no integer form."""
    x = asarray(x)
    return x if _is_floating(x) else _C.astype(x, "f32")


def _floating_unary(op):
    def unary(x):
        return op(_inexact(x))

    unary.__name__ = unary.__qualname__ = op.__name__
    unary.__doc__ = f"jax.numpy's {op.__name__}: integer and bool inputs become float32."
    return unary


negative = _C.neg
abs = absolute = _C.abs
sign = _C.sign
exp = _floating_unary(_C.exp)
exp2 = _floating_unary(_C.exp2)
log = _floating_unary(_C.log)
log1p = _floating_unary(_C.log1p)
expm1 = _floating_unary(_C.expm1)
sqrt = _floating_unary(_C.sqrt)
tanh = _floating_unary(_C.tanh)
sin = _floating_unary(_C.sin)
cos = _floating_unary(_C.cos)
tan = _floating_unary(_C.tan)
logical_not = _C.logical_not
square = _C.square
add = _C.add
subtract = _C.subtract
multiply = _C.multiply
maximum = _C.maximum
minimum = _C.minimum
equal = _C.equal
not_equal = _C.not_equal
less = _C.less
less_equal = _C.less_equal
greater = _C.greater
greater_equal = _C.greater_equal
bitwise_and = _C.bitwise_and
bitwise_or = _C.bitwise_or
bitwise_xor = _C.bitwise_xor
left_shift = _C.left_shift
right_shift = _C.right_shift
where = _C.where
matmul = _C.matmul


def floor(x):
    """Integers are returned as they are (jax.numpy's floor)."""
    x = asarray(x)
    return _C.floor(x) if _is_floating(x) else x


def ceil(x):
    x = asarray(x)
    return _C.ceil(x) if _is_floating(x) else x


def isfinite(x):
    """True everywhere for integers."""
    x = asarray(x)
    return _C.isfinite(x) if _is_floating(x) else _C.full(list(x.shape), 1.0, "bool")


def _round_half_even(x):
    """x (floating) rounded to the nearest integer, halves to the even one (numpy's and IEEE's default; the
    engine's round takes halves away from zero)."""
    r = _C.round(x)
    odd_tie = _C.bitwise_and(_C.equal(_C.abs(r - x), 0.5), _C.not_equal(_C.rem(r, 2.0), 0.0))
    # An odd tie steps one towards zero; written as sign(x) * (|r| - 1) so that -0.5 gives -0, as numpy.
    return _C.where(odd_tie, _C.sign(x) * (_C.abs(r) - 1.0), r)


def round(a, decimals=0):
    """numpy's round (around): halves to even; with decimals, round(a * 10**decimals) / 10**decimals as
    jax.numpy computes it (float16 and bfloat16 in float32). Integers are returned as they are; for them a
    negative decimals raises NotImplementedError, as in JAX."""
    a = asarray(a)
    decimals = _operator.index(decimals)
    if not _is_floating(a):
        if decimals < 0:
            raise NotImplementedError("round: integers with decimals < 0 are not implemented (as in jax.numpy)")
        return a
    if decimals == 0:
        return _round_half_even(a)
    x = a if a._dtype_name in ("f32", "f64") else _C.astype(a, "f32")
    factor = 10.0 ** decimals
    return _C.astype(_round_half_even(x * factor) / factor, a._dtype_name)


around = round


def _scalar_or_array(a):
    return a if isinstance(a, (Array, _builtins.bool, int, float)) else asarray(a)


def true_divide(a, b):
    """Division that gives floats: integer and bool operands become float32 (numpy's and jax.numpy's /).
    The engine's divide, which truncates integers, is floor_divide's and lax.div's."""
    if isinstance(a, Array) and _is_floating(a):
        return _C.divide(a, b)  # the common case, kept short: the engine promotes b
    a, b = _scalar_or_array(a), _scalar_or_array(b)
    if not isinstance(a, Array) and not isinstance(b, Array):
        a = asarray(a)
    a_floating = isinstance(a, Array) and _is_floating(a)
    b_floating = isinstance(b, Array) and _is_floating(b)
    if not a_floating and not b_floating:
        # Neither is a floating array (a Python float still counts as weak): divide in float32.
        a = _C.astype(a, "f32") if isinstance(a, Array) else a
        b = _C.astype(b, "f32") if isinstance(b, Array) else b
    return _C.divide(a, b)


divide = true_divide


def arctan2(a, b):
    a, b = _operands(a, b)
    if not _is_floating(a) and not _is_floating(b):
        a, b = _C.astype(a, "f32"), _C.astype(b, "f32")
    return _C.arctan2(a, b)


# Integer exponents: 6 bits, as jax.numpy's binary exponentiation (a base of magnitude 2 or more overflows
# int32 at exponent 31 and int64 at 63; bases 0, 1 and -1 are exact for every exponent).
_POWER_BITS = 6


def _integer_power(base, exponent):
    """base ** exponent for integer arrays (the engine's pow takes floats only): repeated squaring over the
    exponent's low bits. Exact while the result fits its dtype. A negative exponent gives 1 // base**|e|
    (0, or +-1 for a base of +-1), as XLA's integer pow; numpy raises for it."""
    negative_exp = _C.less(exponent, 0)
    unit_base = _C.equal(_C.abs(base), 1)
    e = _C.where(negative_exp, _C.neg(exponent), exponent)
    # acc starts at 0 for 0 ** e with e != 0, which the low bits alone would miss for e = 64, 128, ...
    acc = _C.where(_C.bitwise_and(_C.equal(base, 0), _C.not_equal(e, 0)), _C.scalar(0, base), _C.scalar(1, base))
    for _ in range(_POWER_BITS):
        acc = _C.where(_C.not_equal(_C.bitwise_and(e, 1), 0), acc * base, acc)
        base = base * base
        e = _C.right_shift(e, 1)
    return _C.where(_C.bitwise_and(negative_exp, _C.logical_not(unit_base)), _C.scalar(0, acc), acc)


def power(a, b):
    """numpy's power; an integer raised to an integer stays an integer (jax.numpy's): a Python int exponent
    goes through lax.integer_pow (negative: ValueError, as numpy), an integer array exponent through repeated
    squaring (_integer_power)."""
    if isinstance(a, Array) and _is_floating(a):
        return _C.power(a, b)
    a, b = _scalar_or_array(a), _scalar_or_array(b)
    if not isinstance(a, Array) and not isinstance(b, Array):
        a = asarray(a)
    integral = lambda v: not _is_floating(v) if isinstance(v, Array) else isinstance(v, int)
    if not (integral(a) and integral(b)):
        return _C.power(a, b)
    if not isinstance(a, Array):
        a = _C.scalar(a, b)
    if a._dtype_name == "bool":
        a = _C.astype(a, "i32")
    if not isinstance(b, Array):
        if b < 0:
            raise ValueError("power: integers to negative integer powers are not allowed")
        return _C.integer_pow(a, int(b))
    if b._dtype_name == "bool":
        b = _C.astype(b, "i32")
    return _integer_power(a, b)


def remainder(a, b):
    """numpy's remainder: the sign of the divisor (the engine's rem, as C's fmod, has the dividend's)."""
    a, b = _operands(a, b)
    r = _C.rem(a, b)
    wrong_sign = _C.bitwise_and(_C.not_equal(r, 0), _C.not_equal(_C.less(r, 0), _C.less(b, 0)))
    return _C.where(wrong_sign, r + b, r)


mod = remainder


def floor_divide(a, b):
    a, b = _operands(a, b)
    if a._dtype_name in ("f32", "f64", "f16", "bf16") or b._dtype_name in ("f32", "f64", "f16", "bf16"):
        return _C.floor(_C.divide(a, b))
    return _C.divide(_C.subtract(a, remainder(a, b)), b)


def _operands(a, b):
    """Two Arrays, a Python scalar taking the other's dtype (as the engine's binary ops do)."""
    if isinstance(a, Array):
        return a, _C.scalar(b, a) if isinstance(b, (bool, int, float)) else asarray(b)
    b = asarray(b)
    return (_C.scalar(a, b) if isinstance(a, (bool, int, float)) else asarray(a)), b


def positive(x):
    return asarray(x)


def reciprocal(x):
    return 1.0 / asarray(x)


def clip(a, a_min=None, a_max=None):
    a = asarray(a)
    if a_min is not None:
        a = _C.maximum(a, a_min)
    if a_max is not None:
        a = _C.minimum(a, a_max)
    return a


def logical_and(a, b):
    return _C.bitwise_and(asarray(a, bool_), asarray(b, bool_))


def logical_or(a, b):
    return _C.bitwise_or(asarray(a, bool_), asarray(b, bool_))


# ---- reductions -------------------------------------------------------------------------------------------


def _axes(axis):
    """The engine's axes: [] for None (every axis). An empty tuple, which reduces over no axis, is for the
    caller to catch with _no_axes first."""
    if axis is None:
        return []
    if isinstance(axis, (int, _np.integer)):
        return [_operator.index(axis)]
    return [_operator.index(a) for a in axis]


def _no_axes(axis):
    """axis=() (or []): numpy reduces over no axis and returns its input, where the engine's [] means all."""
    return axis is not None and not isinstance(axis, (int, _np.integer)) and len(tuple(axis)) == 0


def _counted(a):
    """Bools as int32 for sum, prod and the cumulative ones, which count them (jax.numpy's promotion)."""
    a = asarray(a)
    return _C.astype(a, "i32") if a._dtype_name == "bool" else a


def sum(a, axis=None, keepdims=False):
    a = _counted(a)
    return a if _no_axes(axis) else _C.sum(a, _axes(axis), keepdims)


def prod(a, axis=None, keepdims=False):
    a = _counted(a)
    return a if _no_axes(axis) else _C.prod(a, _axes(axis), keepdims)


def mean(a, axis=None, keepdims=False):
    """Integers and bools give float32."""
    a = asarray(a)
    return _inexact(a) if _no_axes(axis) else _C.mean(a, _axes(axis), keepdims)


def max(a, axis=None, keepdims=False):
    a = asarray(a)
    return a if _no_axes(axis) else _C.max(a, _axes(axis), keepdims)


def min(a, axis=None, keepdims=False):
    a = asarray(a)
    return a if _no_axes(axis) else _C.min(a, _axes(axis), keepdims)


amax, amin = max, min


def _as_bool(a):
    a = asarray(a)
    return a if a.dtype == bool_ else not_equal(a, 0)


def all(a, axis=None, keepdims=False):
    a = _as_bool(a)
    return a if _no_axes(axis) else _C.all(a, _axes(axis), keepdims)


def any(a, axis=None, keepdims=False):
    a = _as_bool(a)
    return a if _no_axes(axis) else _C.any(a, _axes(axis), keepdims)


def _cumulative(op):
    def cumulative(a, axis=None):
        a = _counted(a)
        if axis is None:  # numpy: over the flattened array
            return op(reshape(a, (-1,)), 0, False)
        return op(a, axis, False)

    return cumulative


cumsum = _cumulative(_C.cumsum)
cumprod = _cumulative(_C.cumprod)


def sort(a, axis=-1):
    """Stable, NaNs last (numpy's order); axis=None sorts the flattened array."""
    a = asarray(a)
    if axis is None:
        a, axis = reshape(a, (-1,)), 0
    return _C.sort([a], axis, True, 1)[0]


def argsort(a, axis=-1):
    a = asarray(a)
    if axis is None:
        a, axis = reshape(a, (-1,)), 0
    return _C.argsort(a, axis)


def var(a, axis=None, keepdims=False):
    a = asarray(a)
    d = a - mean(a, axis, keepdims=True)
    return mean(d * d, axis, keepdims)


def std(a, axis=None, keepdims=False):
    return sqrt(var(a, axis, keepdims))


def argmax(a, axis=None):
    a = asarray(a)
    return _C.argmax(reshape(a, (-1,)), 0) if axis is None else _C.argmax(a, axis)


def argmin(a, axis=None):
    a = asarray(a)
    return _C.argmin(reshape(a, (-1,)), 0) if axis is None else _C.argmin(a, axis)


# ---- contractions -----------------------------------------------------------------------------------------


def dot(a, b):
    a, b = asarray(a), asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return matmul(a, b)


def einsum(subscripts, a, b):
    """Two operands over single-letter subscripts ('bhtd,bhsd->bhts')."""
    return _C.einsum(subscripts, a, b)


# ---- layout -----------------------------------------------------------------------------------------------


def reshape(a, newshape):
    return _C.reshape(a, _shape(newshape))


def ravel(a):
    return _C.reshape(a, [-1])


def transpose(a, axes=None):
    return _C.transpose(a, [] if axes is None else list(axes))


def swapaxes(a, axis1, axis2):
    a = asarray(a)
    perm = list(range(a.ndim))
    perm[axis1], perm[axis2] = perm[axis2], perm[axis1]
    return _C.transpose(a, perm)


def broadcast_to(a, shape):
    return _C.broadcast_to(a, _shape(shape))


def expand_dims(a, axis):
    return _C.expand_dims(a, axis)


def squeeze(a, axis=None):
    return asarray(a) if _no_axes(axis) else _C.squeeze(a, _axes(axis))


def concatenate(arrays, axis=0):
    return _C.concatenate(list(arrays), axis)


def stack(arrays, axis=0):
    return _C.stack(list(arrays), axis)


def split(a, indices_or_sections, axis=0):
    """numpy's split: into equal sections, or at the given indices, along axis."""
    a = asarray(a)
    n = a.shape[axis]
    if isinstance(indices_or_sections, int):
        if n % indices_or_sections:
            raise ValueError(f"split: an axis of size {n} does not divide into {indices_or_sections} equal sections")
        step = n // indices_or_sections
        bounds = list(range(0, n + 1, step))
    else:
        bounds = [0] + [_builtins.min(_builtins.max(i % n if i < 0 else i, 0), n) for i in indices_or_sections] + [n]
    axis %= a.ndim
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        starts = [0] * a.ndim
        limits = list(a.shape)
        starts[axis], limits[axis] = lo, _builtins.max(lo, hi)
        out.append(_C.slice(a, starts, limits, [1] * a.ndim))
    return out


def flip(a, axis=None):
    a = asarray(a)
    return _C.flip(a, list(range(a.ndim)) if axis is None else _axes(axis))


def _wrapped(indices, n):
    """Integer indices with the negative ones counted from the end of an axis of size n, as jax.numpy does
    before a gather (where(i < 0, i + n, i)); the engine's take clamps them to 0."""
    if isinstance(indices, Array):
        if indices._dtype_name in ("u8", "u32", "bool"):
            return indices
        return _C.where(_C.less(indices, 0), indices + n, indices)
    host = _np.asarray(indices)
    if host.dtype.kind == "i":
        host = _np.where(host < 0, host + n, host)
    return asarray(host)


def take(a, indices, axis=None):
    """Negative indices count from the end; others out of range are clamped."""
    a = asarray(a)
    if axis is None:
        return _C.take(ravel(a), _wrapped(indices, a.size), 0)
    return _C.take(a, _wrapped(indices, a.shape[axis]), axis)


def take_along_axis(arr, indices, axis):
    arr = asarray(arr)
    return _C.take_along_axis(arr, _wrapped(indices, arr.shape[axis]), axis)


def astype(a, dtype):
    return _C.astype(a, _engine_dtype(dtype))


# ---- indexing ---------------------------------------------------------------------------------------------


def _getitem(x, key):
    """Basic indexing (ints, slices, None, ...) with one slice op and one reshape; one integer array (Array,
    numpy array or list) on one axis gathers with take."""
    if not isinstance(key, tuple):
        key = (key,)
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
        if len(advanced) > 1 or _builtins.any(not (isinstance(k, slice) and k == slice(None))
                                             for k in key if not isinstance(k, (Array, _np.ndarray, list))):
            raise NotImplementedError("indexing: one integer array with full slices elsewhere is supported")
        if _builtins.any(k is None for k in key):
            raise NotImplementedError("indexing: None beside an integer array is not supported")
        return _C.take(x, _wrapped(key[advanced[0]], x.shape[advanced[0]]), advanced[0])
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

    def get(self):
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
        axis = arrays[0]
        idx = asarray(key[axis])
        idx = _C.where(idx < 0, idx + self._x.shape[axis], idx)
        v = _C.broadcast_to(_C.astype(asarray(values), self._x._dtype_name), list(taken.shape))
        return getattr(_C, op)(self._x, idx, v, axis)

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


class _IndexHelper:
    def __init__(self, x):
        self._x = x

    def __getitem__(self, key):
        return _IndexUpdate(self._x, key)


# ---- the Array type's Python methods ----------------------------------------------------------------------


def _dtype_property(self):
    return _ENGINE_TO_PUBLIC[self._dtype_name]


def _bool(self):
    if self.size != 1:
        raise ValueError(f"the truth value of an array with {self.size} elements is ambiguous")
    return _builtins.bool(self.item())


Array.__module__ = "tessera.numpy"
Array.dtype = property(_dtype_property)
Array.T = property(lambda self: _C.transpose(self, []))
Array.__array__ = _to_numpy
Array.__array_priority__ = 100
Array.__getitem__ = _getitem
Array.__mod__ = remainder
Array.__rmod__ = lambda self, other: remainder(other, self)
Array.__floordiv__ = floor_divide
Array.__rfloordiv__ = lambda self, other: floor_divide(other, self)
# / and ** are numpy's: integers divide to float32, integer powers stay integers (the engine's ops do neither).
Array.__truediv__ = true_divide
Array.__rtruediv__ = lambda self, other: true_divide(other, self)
Array.__pow__ = power
Array.__rpow__ = lambda self, other: power(other, self)
Array.__round__ = lambda self, ndigits=None: round(self, 0 if ndigits is None else ndigits)
Array.at = property(_IndexHelper)
Array.__bool__ = _bool
Array.__float__ = lambda self: float(self.item())
Array.__int__ = lambda self: int(self.item())
Array.__iter__ = lambda self: (self[i] for i in range(len(self)))
Array.tolist = lambda self: _to_numpy(self).tolist()
Array.reshape = lambda self, *shape: reshape(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)
Array.astype = astype
Array.transpose = lambda self, *axes: transpose(self, (axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes) or None)
Array.ravel = Array.flatten = ravel
Array.sum = sum
Array.mean = mean
Array.max = max
Array.min = min
Array.prod = prod
Array.argmax = argmax
Array.argmin = argmin
Array.squeeze = squeeze


# Frames in this folder are skipped when ops record the user's file:line (the same spelling of the path
# as the code objects carry).
_C._set_package(_os.path.dirname(__file__), asarray)
