"""tessera.numpy (import as tnp): numpy's names over the engine's Array API, as jax.numpy.

Arrays are immutable. They convert to numpy without a copy (np.asarray(x) is a read-only view of the array's
buffer; bf16, which numpy lacks, comes back as float32, a copy), and from numpy with one copy. As in JAX with
64-bit mode off, float64 and int64 inputs become float32 and int32 unless a dtype says otherwise."""

import builtins as _builtins
import operator as _operator
import os as _os
import sys as _sys
import types as _types

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


def isnan(x):
    """False everywhere for integers."""
    x = asarray(x)
    return _C.not_equal(x, x) if _is_floating(x) else _C.full(list(x.shape), 0.0, "bool")


def isinf(x):
    """False everywhere for integers."""
    x = asarray(x)
    return _C.equal(_C.abs(x), _np.inf) if _is_floating(x) else _C.full(list(x.shape), 0.0, "bool")


def isposinf(x):
    x = asarray(x)
    return _C.equal(x, _np.inf) if _is_floating(x) else _C.full(list(x.shape), 0.0, "bool")


def isneginf(x):
    x = asarray(x)
    return _C.equal(x, -_np.inf) if _is_floating(x) else _C.full(list(x.shape), 0.0, "bool")


def log2(x):
    """log(x) / log(2), as jax.numpy computes it."""
    return _C.divide(_C.log(_inexact(x)), _np.log(2.0))


def log10(x):
    return _C.divide(_C.log(_inexact(x)), _np.log(10.0))


def arctan(x):
    return _C.arctan2(_inexact(x), 1.0)


def arcsin(x):
    """2 atan2(x, 1 + sqrt(1 - x^2)), XLA's expansion: NaN outside [-1, 1], as numpy."""
    x = _inexact(x)
    return 2.0 * _C.arctan2(x, 1.0 + _C.sqrt(1.0 - x * x))


def arccos(x):
    """2 atan2(sqrt(1 - x^2), 1 + x), XLA's expansion; pi at x = -1, where it would be atan2(0, 0)."""
    x = _inexact(x)
    return _C.where(_C.not_equal(x, -1.0), 2.0 * _C.arctan2(_C.sqrt(1.0 - x * x), 1.0 + x), _np.pi)


def _floating_operand(v):
    return isinstance(v, float) or (not isinstance(v, int) and _is_floating(asarray(v)))


def _inexact_operands(a, b):
    """Two floating Arrays of one dtype, as jax.numpy's promote_args_inexact: integer arrays become float32, a
    Python scalar takes the other's dtype."""
    a = a if isinstance(a, (int, float)) else _inexact(a)
    b = b if isinstance(b, (int, float)) else _inexact(b)
    a, b = _operands(a, b)
    if not _is_floating(a) or not _is_floating(b):
        a, b = _inexact(a), _inexact(b)
    return a, b


def logaddexp(a, b):
    """log(exp(a) + exp(b)) without overflow: max(a, b) + log1p(exp(-|a - b|)). Where a - b is NaN (a NaN, or
    two infinities of one sign) it is a + b: NaN, +inf or -inf, as numpy."""
    a, b = _inexact_operands(a, b)
    delta = a - b
    smooth = _C.maximum(a, b) + _C.log1p(_C.exp(-_C.abs(delta)))
    return _C.where(_C.not_equal(delta, delta), a + b, smooth)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol |b| (numpy's, not symmetric); infinities are close only to themselves; NaNs to
    NaNs with equal_nan. Integers compare exactly."""
    if not _floating_operand(a) and not _floating_operand(b):
        return _C.equal(*_operands(a, b))
    a, b = _inexact_operands(a, b)
    close = _C.less_equal(_C.abs(a - b), atol + rtol * _C.abs(b))
    a_inf, b_inf = isinf(a), isinf(b)
    close = _C.bitwise_and(close, _C.logical_not(_C.bitwise_or(a_inf, b_inf)))
    close = _C.bitwise_or(close, _C.bitwise_and(_C.bitwise_and(a_inf, b_inf), _C.equal(a, b)))
    if equal_nan:
        close = _C.bitwise_or(close, _C.bitwise_and(isnan(a), isnan(b)))
    return close


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return all(isclose(a, b, rtol, atol, equal_nan))


def _round_half_even(x):
    """x (floating) rounded to the nearest integer, halves to the even one (numpy's and IEEE's default; the
    engine's round takes halves away from zero)."""
    r = _C.round(x)
    odd_tie = _C.bitwise_and(_C.equal(_C.abs(r - x), 0.5), _C.not_equal(_C.rem(r, 2.0), 0.0))
    # An odd tie steps one towards zero; written as sign(x) * (|r| - 1) so that -0.5 gives -0, as numpy.
    return _C.where(odd_tie, _C.sign(x) * (_C.abs(r) - 1.0), r)


def round(a, decimals=0, out=None):
    """numpy's round (around): halves to even; with decimals, round(a * 10**decimals) / 10**decimals as
    jax.numpy computes it (float16 and bfloat16 in float32). Integers are returned as they are; for them a
    negative decimals raises NotImplementedError, as in JAX."""
    _no_out(out, "round")
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


def _no_out(out, name):
    """numpy's out= (numpy passes out=None to the methods it calls): arrays are immutable, so only None."""
    if out is not None:
        raise TypeError(f"{name}: out= is not supported (tessera arrays are immutable): use the returned array")


def clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None):
    """min= and max= are jax.numpy's newer names for a_min and a_max."""
    _no_out(out, "clip")
    a = asarray(a)
    a_min = min if a_min is None else a_min
    a_max = max if a_max is None else a_max
    if a_min is not None:
        a = _C.maximum(a, a_min)
    if a_max is not None:
        a = _C.minimum(a, a_max)
    return a


def where(condition, x=None, y=None, *, size=None, fill_value=None):
    """x where condition, else y. With condition alone: nonzero(condition) (size= for traced arrays)."""
    if x is None and y is None:
        return nonzero(condition, size=size, fill_value=fill_value)
    if x is None or y is None:
        raise ValueError("where: give both x and y, or only the condition (which is nonzero(condition))")
    return _C.where(condition, x, y)


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


# sum and prod accumulate small integers in the default integer of their kind, as jax.numpy's
# promote_integers=True (uint8 in uint32, so that summing [200, 200] gives 400; bool counts as int32).
_PROMOTED_INTEGERS = {"bool": "i32", "u8": "u32"}


def _accumulated(a, dtype, promote_integers):
    a = asarray(a)
    if dtype is not None:
        return astype(a, dtype)
    name = a._dtype_name
    if name == "bool" or (promote_integers and name in _PROMOTED_INTEGERS):
        return _C.astype(a, _PROMOTED_INTEGERS[name])
    return a


def _masked(a, where, fill):
    """a with fill where the mask `where` (broadcast to a's shape) is False."""
    return a if where is None else _C.where(_C.broadcast_to(asarray(where, bool_), list(a.shape)), a, fill)


def _reduced(op, a, axis, keepdims):
    return a if _no_axes(axis) else op(a, _axes(axis), keepdims)


def sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None, promote_integers=True):
    """numpy's sum; uint8 and bools accumulate in uint32 and int32 (jax.numpy's promote_integers). where= sums
    the elements where it is True; initial= is added to the result."""
    if out is None and dtype is None and where is None and initial is None and isinstance(a, Array) \
            and a._dtype_name not in _PROMOTED_INTEGERS:
        return _reduced(_C.sum, a, axis, keepdims)  # the common case, kept short
    _no_out(out, "sum")
    a = _masked(_accumulated(a, dtype, promote_integers), where, 0)
    r = _reduced(_C.sum, a, axis, keepdims)
    return r if initial is None else r + initial


def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None, promote_integers=True):
    _no_out(out, "prod")
    a = _masked(_accumulated(a, dtype, promote_integers), where, 1)
    r = _reduced(_C.prod, a, axis, keepdims)
    return r if initial is None else r * initial


def _extreme(op, combine, name, a, axis, out, keepdims, initial, where):
    """max and min: they have no identity, so where= needs initial= (the value masked elements take), as in
    jax.numpy."""
    _no_out(out, name)
    a = asarray(a)
    if where is not None:
        if initial is None:
            raise ValueError(f"{name}: where= needs initial= ({name} has no identity for the masked elements)")
        a = _masked(a, where, initial)
    r = _reduced(op, a, axis, keepdims)
    return r if initial is None else combine(r, initial)


def max(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    return _extreme(_C.max, maximum, "max", a, axis, out, keepdims, initial, where)


def min(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    return _extreme(_C.min, minimum, "min", a, axis, out, keepdims, initial, where)


amax, amin = max, min


def _count(a, axis, keepdims, where):
    """How many elements each result of a reduction over axis takes: a Python int, or (with a mask) a float32
    array."""
    if where is not None:
        mask = _C.astype(_C.broadcast_to(asarray(where, bool_), list(a.shape)), "f32")
        return _reduced(_C.sum, mask, axis, keepdims)
    axes = range(a.ndim) if axis is None else [i % a.ndim for i in _axes(axis)]
    return int(_np.prod([a.shape[i] for i in axes]))


def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """Integers and bools give float32; dtype= is the dtype it computes in and returns."""
    _no_out(out, "mean")
    a = asarray(a)
    if dtype is not None and _engine_dtype(dtype) in _FLOATING:
        a = astype(a, dtype)
    if where is None:
        r = _inexact(a) if _no_axes(axis) else _C.mean(a, _axes(axis), keepdims)
    else:
        a = _inexact(a)
        r = _reduced(_C.sum, _masked(a, where, 0), axis, keepdims) / _count(a, axis, keepdims, where)
    return r if dtype is None else astype(r, dtype)


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, correction=None):
    """The mean squared deviation, divided by n - ddof instead of n when ddof (or jax.numpy's correction=) is
    given. Integers and bools give float32."""
    _no_out(out, "var")
    if correction is not None:
        if ddof != 0:
            raise ValueError("var: give ddof= or correction=, not both")
        ddof = correction
    a = _inexact(a if dtype is None or _engine_dtype(dtype) not in _FLOATING else astype(a, dtype))
    d = a - mean(a, axis, keepdims=True, where=where)
    if ddof == 0 and where is None:
        r = mean(d * d, axis, keepdims=keepdims)
    else:
        r = sum(d * d, axis, keepdims=keepdims, where=where) / (_count(a, axis, keepdims, where) - ddof)
    return r if dtype is None else astype(r, dtype)


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, correction=None):
    _no_out(out, "std")
    return sqrt(var(a, axis, dtype, None, ddof, keepdims, where=where, correction=correction))


def _as_bool(a):
    a = asarray(a)
    return a if a.dtype == bool_ else not_equal(a, 0)


def all(a, axis=None, out=None, keepdims=False, *, where=None):
    _no_out(out, "all")
    return _reduced(_C.all, _masked(_as_bool(a), where, True), axis, keepdims)


def any(a, axis=None, out=None, keepdims=False, *, where=None):
    _no_out(out, "any")
    return _reduced(_C.any, _masked(_as_bool(a), where, False), axis, keepdims)


def _cumulative(op, name):
    def cumulative(a, axis=None, dtype=None, out=None):
        _no_out(out, name)
        a = _counted(a if dtype is None else astype(a, dtype))
        if axis is None:  # numpy: over the flattened array
            return op(reshape(a, (-1,)), 0, False)
        return op(a, axis, False)

    cumulative.__name__ = cumulative.__qualname__ = name
    return cumulative


cumsum = _cumulative(_C.cumsum, "cumsum")
cumprod = _cumulative(_C.cumprod, "cumprod")


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


def _arg_extreme(op, name, a, axis, out, keepdims):
    _no_out(out, name)
    a = asarray(a)
    if axis is None:
        r = op(reshape(a, (-1,)), 0)
        return _C.reshape(r, [1] * a.ndim) if keepdims else r
    axis = _canonical_axis(axis, a.ndim, name)
    r = op(a, axis)
    return _C.expand_dims(r, axis) if keepdims else r


def argmax(a, axis=None, out=None, keepdims=None):
    return _arg_extreme(_C.argmax, "argmax", a, axis, out, keepdims)


def argmin(a, axis=None, out=None, keepdims=None):
    return _arg_extreme(_C.argmin, "argmin", a, axis, out, keepdims)


def ptp(a, axis=None, out=None, keepdims=False):
    """max - min."""
    _no_out(out, "ptp")
    return max(a, axis, keepdims=keepdims) - min(a, axis, keepdims=keepdims)


# ---- contractions -----------------------------------------------------------------------------------------


def dot(a, b, out=None):
    _no_out(out, "dot")
    a, b = asarray(a), asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return matmul(a, b)


def einsum(subscripts, a, b):
    """Two operands over single-letter subscripts ('bhtd,bhsd->bhts')."""
    return _C.einsum(subscripts, a, b)


def outer(a, b, out=None):
    """a (flattened) as a column times b (flattened) as a row: [a.size, b.size]."""
    _no_out(out, "outer")
    a, b = asarray(a), asarray(b)
    return _C.reshape(a, [-1, 1]) * _C.reshape(b, [1, -1])


def tensordot(a, b, axes=2):
    """The sum over a's axes[0] and b's axes[1] (an int n: a's last n and b's first n) of their products: one
    matmul of a as [free, contracted] and b as [contracted, free]. Result: a's free dims, then b's."""
    a, b = asarray(a), asarray(b)
    if isinstance(axes, (int, _np.integer)):
        n = _operator.index(axes)
        if not 0 <= n <= _builtins.min(a.ndim, b.ndim):
            raise ValueError(f"tensordot: axes={n} does not fit operands of ranks {a.ndim} and {b.ndim}")
        axes_a, axes_b = list(range(a.ndim - n, a.ndim)), list(range(n))
    else:
        try:
            axes_a, axes_b = axes
        except (TypeError, ValueError):
            raise TypeError(f"tensordot: axes must be an int or a pair of axis sequences, not {axes!r}") from None
        axes_a = [_canonical_axis(i, a.ndim, "tensordot") for i in _axis_list(axes_a)]
        axes_b = [_canonical_axis(i, b.ndim, "tensordot") for i in _axis_list(axes_b)]
    if len(axes_a) != len(axes_b):
        raise ValueError(f"tensordot: {len(axes_a)} axes of a but {len(axes_b)} of b")
    for i, j in zip(axes_a, axes_b):
        if a.shape[i] != b.shape[j]:
            raise ValueError(f"tensordot: axis {i} of a (shape {a.shape}) has size {a.shape[i]} but axis {j} of b "
                             f"(shape {b.shape}) has {b.shape[j]}")
    free_a = [i for i in range(a.ndim) if i not in axes_a]
    free_b = [i for i in range(b.ndim) if i not in axes_b]
    contracted = int(_np.prod([a.shape[i] for i in axes_a]))
    lhs = _C.reshape(_C.transpose(a, free_a + axes_a), [-1, contracted]) if free_a or axes_a else _C.reshape(a, [1, 1])
    rhs = _C.reshape(_C.transpose(b, axes_b + free_b), [contracted, -1]) if free_b or axes_b else _C.reshape(b, [1, 1])
    return _C.reshape(matmul(lhs, rhs), [a.shape[i] for i in free_a] + [b.shape[i] for i in free_b])


# ---- layout -----------------------------------------------------------------------------------------------

_AxisError = getattr(_np, "exceptions", _np).AxisError  # a ValueError and an IndexError, as numpy raises


def _canonical_axis(axis, ndim, name):
    """axis in [0, ndim), counted from the end when negative; AxisError (a ValueError) naming the op otherwise."""
    axis = _operator.index(axis)
    if not -ndim <= axis < ndim:
        raise _AxisError(f"{name}: axis {axis} is out of bounds for an array of rank {ndim}")
    return axis % ndim


def _axis_list(axis):
    return [axis] if isinstance(axis, (int, _np.integer)) else list(axis)


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


def tri(N, M=None, k=0, dtype=float32):
    """Ones at and below the k-th diagonal: [N, M]."""
    M = N if M is None else M
    return _C.astype(_tri_mask(N, M, k, lower=True), _engine_dtype(dtype))


def _tri_mask(n, m, k, lower):
    # [n, m]: column - row <= k (lower) or >= k (upper).
    offset = _C.iota([n, m], 1, "i32") - _C.iota([n, m], 0, "i32")
    return _C.less_equal(offset, k) if lower else _C.greater_equal(offset, k)


def _triangle(m, k, lower, name):
    m = asarray(m)
    if m.ndim < 2:
        raise ValueError(f"{name}: the array must have at least 2 dimensions, not shape {m.shape}")
    mask = _C.broadcast_to(_tri_mask(m.shape[-2], m.shape[-1], _operator.index(k), lower), list(m.shape))
    return _C.where(mask, m, 0)


def tril(m, k=0):
    """Zeros above the k-th diagonal of the last two axes."""
    return _triangle(m, k, True, "tril")


def triu(m, k=0):
    """Zeros below the k-th diagonal of the last two axes."""
    return _triangle(m, k, False, "triu")


def copy(a):
    """A new array with its own buffer (so donating one leaves the other); traced arrays as they are."""
    a = asarray(a)
    if a.is_tracer:
        return a
    host = _np.array(a._host_view())
    return asarray(host, a._dtype_name) if a._dtype_name != "bf16" else _C.astype(asarray(host), "bf16")


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


def take(a, indices, axis=None, out=None, mode=None):
    """Negative indices count from the end; others out of range are clamped (mode="wrap": all taken modulo
    the axis' size)."""
    _no_out(out, "take")
    a = asarray(a)
    if mode == "wrap":
        indices = remainder(asarray(indices), a.size if axis is None else a.shape[axis])
    if axis is None:
        return _C.take(ravel(a), _wrapped(indices, a.size), 0)
    return _C.take(a, _wrapped(indices, a.shape[axis]), axis)


def take_along_axis(arr, indices, axis):
    arr = asarray(arr)
    return _C.take_along_axis(arr, _wrapped(indices, arr.shape[axis]), axis)


def astype(a, dtype):
    return _C.astype(a, _engine_dtype(dtype))


# ---- indexing ---------------------------------------------------------------------------------------------


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


class _MaskUpdate:
    """x.at[mask]: the update of x with the mask's dims flattened, at the mask's True elements, reshaped back."""

    def __init__(self, x, key):
        self._shape = list(x.shape)
        self._inner = _IndexUpdate(*_mask_to_indices(x, key))

    def get(self):
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


# ---- linalg -----------------------------------------------------------------------------------------------


def _norm(x, ord=None, axis=None, keepdims=False):
    """numpy.linalg.norm without the SVD ones: vector norms (ord None or 2, 1, inf, -inf, 0, any p) over one
    axis, matrix norms (None or 'fro', 1, -1, inf, -inf) over two. axis=None with ord=None is the 2-norm of
    the flattened array."""
    x = _inexact(x)
    if axis is None:
        if ord is None:
            return sqrt(sum(x * x, keepdims=keepdims))
        if x.ndim not in (1, 2):
            raise ValueError(f"norm: ord={ord!r} needs axis= for an array of rank {x.ndim} (or rank 1 or 2)")
        axis = tuple(range(x.ndim))
    axes = tuple(_canonical_axis(i, x.ndim, "norm") for i in _axis_list(axis))
    if len(axes) == 1:
        return _vector_norm(x, ord, axes[0], keepdims)
    if len(axes) != 2 or axes[0] == axes[1]:
        raise ValueError(f"norm: axis {axis} must name one axis (a vector norm) or two (a matrix norm)")
    return _matrix_norm(x, ord, axes, keepdims)


def _vector_norm(x, ord, axis, keepdims):
    if ord is None or ord == 2:
        return sqrt(sum(x * x, axis, keepdims=keepdims))
    if isinstance(ord, str):
        raise ValueError(f"norm: ord={ord!r} is for matrices, not vectors")
    if ord == _np.inf:
        return max(abs(x), axis, keepdims=keepdims)
    if ord == -_np.inf:
        return min(abs(x), axis, keepdims=keepdims)
    if ord == 0:
        return sum(_C.astype(_C.not_equal(x, 0.0), x._dtype_name), axis, keepdims=keepdims)
    if ord == 1:
        return sum(abs(x), axis, keepdims=keepdims)
    return power(sum(power(abs(x), float(ord)), axis, keepdims=keepdims), 1.0 / ord)


def _matrix_norm(x, ord, axes, keepdims):
    row, col = axes
    if ord is None or ord == "fro":
        return sqrt(sum(x * x, axes, keepdims=keepdims))
    if ord in (1, -1, _np.inf, -_np.inf):
        # 1: the largest column sum of |x| (summed over rows); inf: the largest row sum.
        summed, over = (row, col) if ord in (1, -1) else (col, row)
        sums = sum(abs(x), summed, keepdims=True)
        r = (max if ord > 0 else min)(sums, over, keepdims=True)
        return r if keepdims else _C.squeeze(r, [row, col])
    if ord in (2, -2, "nuc"):
        raise NotImplementedError(f"norm: ord={ord!r} of a matrix needs its singular values (no SVD in tessera)")
    raise ValueError(f"norm: invalid ord {ord!r} for a matrix")


linalg = _types.ModuleType("tessera.numpy.linalg", "jax.numpy.linalg's norm.")
linalg.norm = _norm
_norm.__module__ = linalg.__name__
_norm.__name__ = _norm.__qualname__ = "norm"
_sys.modules[linalg.__name__] = linalg  # import tessera.numpy.linalg works too


# ---- the Array type's Python methods ----------------------------------------------------------------------


def _dtype_property(self):
    return _ENGINE_TO_PUBLIC[self._dtype_name]


def _bool(self):
    if self.size != 1:
        raise ValueError(f"the truth value of an array with {self.size} elements is ambiguous")
    return _builtins.bool(self.item())


def _index(self):
    """operator.index(x), range(x), seq[x]: integer 0-d arrays only (TypeError otherwise, as jax.Array)."""
    if self.ndim != 0 or self._dtype_name in _FLOATING or self._dtype_name == "bool":
        raise TypeError(f"only integer scalar arrays can be converted to an index, not an array of "
                        f"{self._dtype_name}{list(self.shape)}")
    return int(self.item())


def _format(self, spec):
    """f"{x:.2f}" formats a 0-d array's value; other arrays take only an empty spec (as numpy's)."""
    if self.ndim == 0 and not self.is_tracer:
        return format(self.item(), spec)
    if spec:
        raise TypeError(f"unsupported format string {spec!r} for an array of shape {self.shape} (only 0-d "
                        "arrays take one)")
    return str(self)


def _method(fn, *fixed):
    """A function of numpy.py as an Array method (its name and docstring kept)."""
    def method(self, *args, **kwargs):
        return fn(self, *fixed, *args, **kwargs)

    method.__name__ = method.__qualname__ = fn.__name__
    method.__doc__ = fn.__doc__
    return method


def _reshape_method(self, *shape, order="C"):
    return reshape(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape, order)


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
Array.__index__ = _index
Array.__format__ = _format
Array.reshape = _reshape_method
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
# The rest of jax.Array's methods; each takes numpy's keywords, so numpy's functions (np.mean(x), np.std(x),
# np.clip(x, 0, 1), ...), which call them with out=None, work on Arrays.
for _name in ("all", "any", "clip", "copy", "cumsum", "cumprod", "dot", "nonzero", "ptp", "repeat", "round", "sort",
              "argsort", "std", "swapaxes", "take", "var"):
    setattr(Array, _name, _method(globals()[_name]))
del _name


# Frames in this folder are skipped when ops record the user's file:line (the same spelling of the path
# as the code objects carry).
_C._set_package(_os.path.dirname(__file__), asarray)
