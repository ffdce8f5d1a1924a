"""tessera.numpy's foundation, imported by every other part of it: the Array type, the dtypes and
their engine names, and the helpers that read numpy's axis, shape and out= arguments."""

import builtins as _builtins
import operator as _operator

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


_FLOATING = ("f32", "f64", "f16", "bf16")


# ---- arguments --------------------------------------------------------------------------------------------


def _shape(shape):
    if isinstance(shape, int):
        return [shape]
    return [_operator.index(d) for d in shape]


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


_AxisError = getattr(_np, "exceptions", _np).AxisError  # a ValueError and an IndexError, as numpy raises


def _canonical_axis(axis, ndim, name):
    """axis in [0, ndim), counted from the end when negative; AxisError (a ValueError) naming the op otherwise."""
    axis = _operator.index(axis)
    if not -ndim <= axis < ndim:
        raise _AxisError(f"{name}: axis {axis} is out of bounds for an array of rank {ndim}")
    return axis % ndim


def _axis_list(axis):
    return [axis] if isinstance(axis, (int, _np.integer)) else list(axis)


def _no_out(out, name):
    """numpy's out= (numpy passes out=None to the methods it calls): arrays are immutable, so only None."""
    if out is not None:
        raise TypeError(f"{name}: out= is not supported (tessera arrays are immutable): use the returned array")
