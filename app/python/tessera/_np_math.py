"""tessera.numpy's number-theoretic and floating-point decomposition functions written with the others: gcd, lcm,
divmod, frexp, ldexp, modf, nextafter, spacing, bitwise_count, fabs, unwrap, and real, imag, conj, angle, isreal, iscomplex for real arrays (there
are no complex dtypes), as jax.numpy's.
Where numpy and JAX differ on special values, numpy's answer is the one given (frexp of a subnormal, modf of an
infinity)."""

import numpy as _np

from . import _tessera as _C
from ._np_creation import asarray, zeros_like
from ._np_elementwise import (abs, equal, exp2, floor, floor_divide, greater_equal, isinf, isnan, less, log2,
                              logical_or, remainder, _inexact, _is_floating, _operands, _promoted)
from ._np_composite import copysign, trunc
from ._np_indexing import where


def _integer_operands(name, x1, x2):
    a, b = _promoted(*_operands(x1, x2))
    if _is_floating(a) or a._dtype_name == "bool":
        raise TypeError(f"{name}: arguments must be integers; got {a.dtype}")
    return a, b


def gcd(x1, x2):
    """The greatest common divisor of |x1| and |x2|, elementwise (0 where both are 0): Euclid's algorithm as
    one while loop over the whole array, which ends when every remainder is 0."""
    from . import lax as _lax
    a, b = _integer_operands("gcd", x1, x2)
    a, b = abs(a), abs(b)
    shape = _np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
    a, b = _C.broadcast_to(a, list(shape)), _C.broadcast_to(b, list(shape))

    def step(carry):
        a, b = carry
        done = equal(b, 0)
        safe = where(done, 1, b)
        return where(done, a, b), where(done, 0, remainder(a, safe))

    def more(carry):
        return _C.any(_C.not_equal(carry[1], 0), [], False) if carry[1].ndim else _C.not_equal(carry[1], 0)

    return _lax.while_loop(more, step, (a, b))[0]


def lcm(x1, x2):
    """The least common multiple of |x1| and |x2|, elementwise (0 where either is 0)."""
    a, b = _integer_operands("lcm", x1, x2)
    g = gcd(a, b)
    zero = equal(g, 0)
    return where(zero, 0, floor_divide(abs(a), where(zero, 1, g)) * abs(b))  # numpy's order (and overflow)


def divmod(x1, x2, /):  # noqa: A001 (numpy's name)
    """(floor_divide(x1, x2), remainder(x1, x2))."""
    return floor_divide(x1, x2), remainder(x1, x2)


def _pow2(e, dtype):
    """2**e for the int32 array e, exact where 2**e is a normal number of dtype (exp2 of an integer)."""
    return exp2(_C.astype(e, dtype))


def frexp(x, /):
    """(mantissa, exponent) with x = mantissa * 2**exponent, |mantissa| in [0.5, 1) and exponent int32; (x, 0)
    where x is 0, infinite or NaN. Subnormal x get their true exponent (numpy's answer)."""
    x = _inexact(x)
    dt = x._dtype_name
    ax = abs(x)
    special = logical_or(logical_or(equal(x, 0), isinf(x)), isnan(x))
    safe = where(special, 1.0, ax)
    e = _C.astype(floor(log2(safe)), "i32") + 1
    # m = x / 2**e in two steps, so that 2**-e stays finite for the subnormals (e down to -148).
    half = floor_divide(e, 2)
    m = safe * _pow2(-half, dt) * _pow2(half - e, dt)
    # log2 rounds near powers of two: one correction either way puts |m| in [0.5, 1).
    high = greater_equal(m, 1.0)
    m, e = where(high, m * 0.5, m), where(high, e + 1, e)
    low = less(m, 0.5)
    m, e = where(low, m * 2.0, m), where(low, e - 1, e)
    return where(special, x, copysign(m, x)), where(special, 0, e)


def ldexp(x1, x2, /):
    """x1 * 2**x2 for integer x2, in x1's floating dtype (int x1 become float32); exact while the result is a
    normal number (2**x2 is applied in two halves, so that neither overflows on its own)."""
    x = _inexact(x1)
    e = asarray(x2)
    if _is_floating(e):
        raise TypeError(f"ldexp: the exponent must be an integer array; got {e.dtype}")
    e = _C.astype(e, "i32")
    half = floor_divide(e, 2)
    return x * _pow2(half, x._dtype_name) * _pow2(e - half, x._dtype_name)


def modf(x, /):
    """(fractional part, integral part), each with x's sign; an infinity gives (+-0, x) and NaN (NaN, NaN)."""
    x = _inexact(x)
    whole = trunc(x)
    return where(isinf(x), copysign(0.0, x), copysign(x - whole, x)), whole  # -0.0 for -7.0 and -0.0, as numpy


# Floats' bits as integers: an integer type of their width, the step of one unit in the last place there, and
# the sign bit. bf16 is f32's upper half, so it steps in f32's bits by 2**16 and stays exact; f16 has its own
# exponent range and no integer type of its width here.
_BITS = {"f32": ("f32", "i32", 1, -2**31), "bf16": ("f32", "i32", 1 << 16, -2**31),
         "f64": ("f64", "i64", 1, -2**63)}


def _float_bits(name, x):
    if x._dtype_name not in _BITS:
        raise TypeError(f"{name}: float32, bfloat16 or float64 operands expected; got {x.dtype}")
    wide, itype, step, sign = _BITS[x._dtype_name]
    w = _C.astype(x, wide) if x._dtype_name != wide else x
    return _C.bitcast(w, itype), wide, step, sign


def nextafter(x1, x2, /):
    """The next representable number after x1 towards x2, elementwise, as numpy's: x2 where they are equal, NaN
    where either is, the smallest subnormal with x2's sign after a zero. Stepping the bits as an integer by one
    moves the magnitude up by one unit in the last place whatever the sign."""
    from ._np_elementwise import _inexact_operands
    a, b = _inexact_operands(x1, x2)
    bits, wide, step, sign = _float_bits("nextafter", a)
    c = lambda v: _C.scalar(v, bits)  # noqa: E731
    away = equal(less(a, b), less(zeros_like(a), a))  # moving away from zero: up for a > 0, down for a < 0
    stepped = where(away, bits + c(step), bits - c(step))
    b_bits = _float_bits("nextafter", b)[0]
    tiny = where(less(b_bits, 0), c(sign + step), c(step))
    out = _C.bitcast(where(equal(a, 0), tiny, stepped), wide)
    out = out if out._dtype_name == a._dtype_name else _C.astype(out, a._dtype_name)
    out = where(equal(a, b), b, out)
    return where(logical_or(isnan(a), isnan(b)), a + b, out)


def spacing(x, /):
    """The distance from x to the next representable number away from zero, signed as x (-0.0 included), as
    jax.numpy's and numpy's: NaN for infinities and NaN, infinity at the largest finite number."""
    from ._np_composite import signbit
    x = _inexact(x)
    up = nextafter(x, where(signbit(x), -_np.inf, _np.inf)) - x
    return where(logical_or(isinf(x), isnan(x)), _np.nan, up)


def bitwise_count(x, /):
    """The number of 1 bits in |x|, elementwise, as uint8, as jax.numpy's and numpy's (|-2**31| wraps to
    itself, one bit)."""
    from .lax import population_count
    x = asarray(x)
    if _is_floating(x) or x._dtype_name == "bool":
        raise TypeError(f"bitwise_count: an integer operand expected; got {x.dtype}")
    return _C.astype(population_count(abs(x) if x._dtype_name == "i32" else x), "u8")


def real(val):
    """val itself: arrays are real."""
    return asarray(val)


def imag(val):
    """Zeros of val's shape and dtype: arrays are real."""
    return zeros_like(asarray(val))


def conj(x):
    """x itself: arrays are real."""
    return asarray(x)


conjugate = conj


def fabs(x, /):
    """|x| as a float (integers become float32)."""
    return abs(_inexact(x))


def angle(z, deg=False):
    """The argument of z: 0 for non-negative real values, pi for negative ones (and -0.0), in degrees with
    deg=True."""
    from ._np_elementwise import arctan2
    z = _inexact(z)
    a = arctan2(zeros_like(z), z)
    return a * (180.0 / _np.pi) if deg else a


def isreal(x):
    """True everywhere: arrays are real."""
    x = asarray(x)
    return _C.full(list(x.shape), True, "bool")


def iscomplex(x):
    """False everywhere: arrays are real."""
    x = asarray(x)
    return _C.full(list(x.shape), False, "bool")


def isrealobj(x):
    return not iscomplexobj(x)


def iscomplexobj(x):
    """Whether x has a complex dtype: tessera arrays never do; other objects as numpy answers."""
    return False if hasattr(x, "_dtype_name") else bool(_np.iscomplexobj(x))


def unwrap(p, discont=None, axis=-1, period=2 * _np.pi):
    """numpy's unwrap: jumps between neighbours along axis larger than max(discont, period/2) are removed by
    adding multiples of period."""
    from ._np_layout import concatenate, moveaxis
    from ._np_reductions import cumsum
    p = _inexact(p)
    if p.ndim == 0:
        raise ValueError("unwrap: p must have at least one dimension")
    p = moveaxis(p, axis, -1)
    if p.shape[-1] < 2:
        return moveaxis(p, -1, axis)
    half = period / 2
    discont = half if discont is None else max(float(discont), half)
    dd = p[..., 1:] - p[..., :-1]
    ddmod = remainder(dd + half, period) - half
    ddmod = where(_C.bitwise_and(equal(ddmod, -half), _C.greater(dd, _C.scalar(0.0, dd))), half, ddmod)
    correct = where(less(abs(dd), discont), 0.0, ddmod - dd)
    out = concatenate([p[..., :1], p[..., 1:] + cumsum(correct, axis=-1)], -1)
    return moveaxis(out, -1, axis)
