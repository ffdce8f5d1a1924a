"""tessera.numpy's elementwise functions: the engine's unary and binary ops under numpy's names, with
jax.numpy's promotions (integers to float32 where there is no integer form) and numpy's
semantics where the engine's differ (round, /, **, %, //)."""

import builtins as _builtins
import operator as _operator

import numpy as _np

from . import _tessera as _C
from ._np_base import Array, bool_, _CANONICAL, _engine_dtype, _ENGINE_TO_PUBLIC, _FLOATING, _no_out, _NUMPY_TO_ENGINE
from ._np_creation import asarray


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
    unsigned = base._dtype_name in ("u8", "u32")
    unit_base = _C.equal(base, 1) if unsigned else _C.equal(_C.abs(base), 1)
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
    if not isinstance(b, Array):
        if b < 0:
            raise ValueError("power: integers to negative integer powers are not allowed")
        return _C.integer_pow(_C.astype(a, "i32") if a._dtype_name == "bool" else a, int(b))
    # Both integer arrays: they meet in their promoted dtype (bool ** uint8 is uint8), bool ** bool in int32.
    a, b = _promoted(a, b)
    if a._dtype_name == "bool":
        a, b = _C.astype(a, "i32"), _C.astype(b, "i32")
    return _integer_power(a, b)


def _promoted(a, b):
    """Two Arrays in their promoted dtype."""
    t = _C.promote_types(a._dtype_name, b._dtype_name)
    return (a if a._dtype_name == t else _C.astype(a, t)), (b if b._dtype_name == t else _C.astype(b, t))


def _bools_as_int32(a, b):
    """Two bool operands as int32 (jax.numpy's remainder and floor_divide of bools give int32)."""
    if a._dtype_name == "bool" and b._dtype_name == "bool":
        return _C.astype(a, "i32"), _C.astype(b, "i32")
    return a, b


def remainder(a, b):
    """numpy's remainder: the sign of the divisor (the engine's rem, as C's fmod, has the dividend's). An
    integer remainder by zero is 0, as jax.numpy's (which divides by 1 there)."""
    a, b = _promoted(*_bools_as_int32(*_operands(a, b)))
    if not _is_floating(b):
        b = _C.where(_C.equal(b, 0), _C.scalar(1, b), b)
    r = _C.rem(a, b)
    wrong_sign = _C.bitwise_and(_C.not_equal(r, 0), _C.not_equal(_C.less(r, 0), _C.less(b, 0)))
    return _C.where(wrong_sign, r + b, r)


mod = remainder


def floor_divide(a, b):
    """numpy's floor_divide as jax.numpy computes it. Floats: (a - fmod(a, b)) / b, one less where fmod's sign
    is not b's, rounded (so inf // 1 is NaN and 1 // -inf is -1, as numpy). Integers by zero give XLA's
    quotient, -1 (the largest value for unsigned types), then one less where a is not 0: jax.numpy's results."""
    a, b = _promoted(*_bools_as_int32(*_operands(a, b)))
    if _is_floating(a):
        mod = _C.rem(a, b)
        div = _C.divide(_C.where(_C.equal(b, 0.0), a, _C.subtract(a, mod)), b)  # x / 0 keeps its inf
        step = _C.bitwise_and(_C.not_equal(mod, 0.0), _C.not_equal(_C.sign(b), _C.sign(mod)))
        return _C.round(_C.where(step, div - 1.0, div))
    zero = _C.equal(b, 0)
    safe_b = _C.where(zero, _C.scalar(1, b), b)
    quotient = _C.divide(_C.subtract(a, remainder(a, safe_b)), safe_b)
    if a._dtype_name in ("u8", "u32"):
        return _C.where(zero, _C.logical_not(_C.scalar(0, quotient)), quotient)  # ~0: the largest value
    return _C.where(zero, _C.where(_C.equal(a, 0), _C.scalar(-1, quotient), _C.scalar(-2, quotient)), quotient)


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


def clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None):
    """min= and max= are jax.numpy's newer names for a_min and a_max."""
    _no_out(out, "clip")
    # A Python scalar stays weak (clip(1, lo, hi) of uint8 bounds is uint8), unless no bound is an array.
    if not isinstance(a, (_builtins.bool, int, float)) or not any(isinstance(v, Array) for v in (a_min, a_max, min, max)):
        a = asarray(a)
    a_min = min if a_min is None else a_min
    a_max = max if a_max is None else a_max
    if a_min is not None:
        a = _C.maximum(a, a_min)
    if a_max is not None:
        a = _C.minimum(a, a_max)
    return a


def logical_not(x):
    """x == 0, as a bool array (the engine's not is bitwise on integers: that is ~x)."""
    return _C.logical_not(asarray(x, bool_))


def logical_xor(a, b):
    return _C.not_equal(asarray(a, bool_), asarray(b, bool_))


def square(x):
    """x * x; bools become int32 (jax.numpy's)."""
    x = asarray(x)
    return _C.square(_C.astype(x, "i32") if x._dtype_name == "bool" else x)


def logical_and(a, b):
    return _C.bitwise_and(asarray(a, bool_), asarray(b, bool_))


def logical_or(a, b):
    return _C.bitwise_or(asarray(a, bool_), asarray(b, bool_))


def promote_types(a, b):
    """jnp.promote_types over the engine's dtypes: jax.numpy's lattice with 64-bit mode off (uint32 with int32
    is int32, bfloat16 with float16 is float32); int64 and float64, which the engine has, sit above int32 and
    float32 as in JAX's 64-bit mode."""
    return _ENGINE_TO_PUBLIC[_C.promote_types(_engine_dtype(a), _engine_dtype(b))]


def _strong_dtype(x):
    """The engine dtype of an operand that has one of its own (an Array, a numpy array or scalar, a dtype)."""
    if isinstance(x, Array):
        return x._dtype_name
    if isinstance(x, (_np.ndarray, _np.generic, list, tuple)):
        return asarray(x)._dtype_name if isinstance(x, (list, tuple)) else _canonical_name(x.dtype)
    return _engine_dtype(x)


def _canonical_name(numpy_dtype):
    """The engine dtype asarray gives a numpy array of this dtype (float64 as float32, int8 as int32, ...)."""
    name = _NUMPY_TO_ENGINE.get(numpy_dtype.name) or numpy_dtype.name
    name = _CANONICAL.get(name, name)
    return name if name in _ENGINE_TO_PUBLIC else ("f32" if numpy_dtype.kind == "f" else "i32")


def result_type(*args):
    """jnp.result_type: the dtype binary ops give these operands. Python scalars are weak (they take the
    others' kind: 1.5 with an int32 array is float32, 1 with uint8 is uint8); numpy's float64 and int64 count
    as float32 and int32 (64-bit mode off)."""
    if not args:
        raise ValueError("result_type: at least one argument is required")
    strong = None
    weak = 0  # 1: a Python bool, 2: int, 3: float
    for x in args:
        if isinstance(x, (_builtins.bool, int, float)) and not isinstance(x, _np.generic):
            weak = _builtins.max(weak, 3 if isinstance(x, float) else 1 if isinstance(x, _builtins.bool) else 2)
            continue
        t = _strong_dtype(x)
        strong = t if strong is None else _C.promote_types(strong, t)
    if strong is None:
        strong = ("bool", "i32", "f32")[weak - 1]
    elif weak == 3 and strong not in _FLOATING:
        strong = "f32"
    elif weak == 2 and strong == "bool":
        strong = "i32"
    return _ENGINE_TO_PUBLIC[strong]
