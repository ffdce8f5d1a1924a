"""The Array type's Python methods and operators: numpy's and jax.Array's, installed on the engine's
type when tessera.numpy is imported."""

import builtins as _builtins

import numpy as _np

from . import _tessera as _C
# Some of these are used only by name, through globals(), in the loop at the end.
from ._np_base import Array, _ENGINE_TO_PUBLIC, _FLOATING
from ._np_creation import astype, copy, _to_numpy
from ._np_elementwise import clip, floor_divide, power, remainder, round, true_divide
from ._np_layout import ravel, repeat, reshape, squeeze, swapaxes, transpose
from ._np_reductions import (all, any, argmax, argmin, argsort, cumprod, cumsum, max, mean, min, prod, ptp, sort, std,
                             sum, var)
from ._np_indexing import nonzero, take, _getitem, _IndexHelper
from ._np_linalg import dot


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
# The reflected bitwise operators (1 & x) and the shifts, which the engine's type does not define.
Array.__rand__ = lambda self, other: _C.bitwise_and(other, self)
Array.__ror__ = lambda self, other: _C.bitwise_or(other, self)
Array.__rxor__ = lambda self, other: _C.bitwise_xor(other, self)
Array.__lshift__ = lambda self, other: _C.left_shift(self, other)
Array.__rlshift__ = lambda self, other: _C.left_shift(other, self)
Array.__rshift__ = lambda self, other: _C.right_shift(self, other)
Array.__rrshift__ = lambda self, other: _C.right_shift(other, self)
Array.__divmod__ = lambda self, other: (floor_divide(self, other), remainder(self, other))
Array.__rdivmod__ = lambda self, other: (floor_divide(other, self), remainder(other, self))


def _block_until_ready(self):
    """Arrays are computed when their op returns: nothing to wait for (a donated array raises, as JAX's)."""
    if self.is_deleted():
        raise _C.DeletedArrayError("block_until_ready: the array was donated to a jitted function and deleted")
    return self


def _diagonal_method(self, offset=0, axis1=0, axis2=1):
    from ._np_composite import diagonal
    return diagonal(self, offset, axis1, axis2)


def _trace_method(self, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    from ._np_composite import trace
    return trace(self, offset, axis1, axis2, dtype)


def _searchsorted_method(self, v, side="left", sorter=None):
    from ._np_composite import searchsorted
    return searchsorted(self, v, side, sorter)


def _view_method(self, dtype=None, type=None):
    """The same bits as another dtype, as jax.Array.view: the last axis scales by the ratio of the widths."""
    if type is not None:
        raise NotImplementedError("view(type=...): Arrays have one type")
    if dtype is None:
        return self
    from ._lax_ops import _BIT_WIDTH, bitcast_convert_type
    from ._np_base import _engine_dtype
    src, dst = _BIT_WIDTH.get(self._dtype_name), _BIT_WIDTH.get(_engine_dtype(dtype))
    if src is not None and dst is not None and dst > src:  # to a wider type: the last axis groups into words
        n, ratio = (self.shape[-1] if self.ndim else 1), dst // src
        if n % ratio:
            raise ValueError(f"view: the last axis ({n}) must be a multiple of {ratio} to view {self.dtype} as "
                             f"{_np.dtype(dtype) if dtype != 'bfloat16' else dtype}")
        return bitcast_convert_type(reshape(self, tuple(self.shape[:-1]) + (n // ratio, ratio)), dtype)
    out = bitcast_convert_type(self, dtype)
    if out.ndim > self.ndim:  # to a narrower type: the new trailing axis joins the last one
        return reshape(out, tuple(self.shape[:-1]) + (-1,))
    return out


Array.block_until_ready = _block_until_ready
Array.is_ready = lambda self: True
Array.weak_type = False
Array.itemsize = property(lambda self: 2 if self._dtype_name == "bf16" else _ENGINE_TO_PUBLIC[self._dtype_name].itemsize)
Array.nbytes = property(lambda self: self.size * self.itemsize)
Array.mT = property(lambda self: swapaxes(self, -1, -2))
# Real dtypes only: the real part is the array, the imaginary part zeros, the conjugate the array.
Array.real = property(lambda self: self)
Array.imag = property(lambda self: _C.full(list(self.shape), 0.0, self._dtype_name))
Array.conj = Array.conjugate = lambda self: self
Array.diagonal = _diagonal_method
Array.trace = _trace_method
Array.searchsorted = _searchsorted_method
Array.view = _view_method
Array.tobytes = lambda self, order="C": _to_numpy(self).tobytes(order)
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
