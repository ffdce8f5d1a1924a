"""tessera.numpy's conversions (asarray, astype, from_dlpack) and the functions that make new arrays
(zeros, arange, eye, tri, ...)."""

import builtins as _builtins
import operator as _operator

import numpy as _np

from . import _tessera as _C
from ._np_base import (Array, bool_, float32, int32, _CANONICAL, _engine_dtype, _ENGINE_TO_PUBLIC, _NUMPY_TO_ENGINE,
                       _shape)


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
        if host.dtype.kind == "O" and isinstance(a, (int, list, tuple)):
            raise OverflowError(f"asarray: Python int too large to convert to int32 (in {a!r:.80})")
        raise TypeError(f"asarray: cannot make an array of {host.dtype} values")
    name = _NUMPY_TO_ENGINE.get(host.dtype.name) or host.dtype.name
    if target is None:
        target = _CANONICAL.get(name, name)
        if name == "i64" and target == "i32" and isinstance(a, (int, list, tuple)) and host.size \
                and (host.max() > 2**31 - 1 or host.min() < -2**31):
            # Python ints become int32 (64-bit mode off): one that does not fit is an error, as in JAX.
            bad = host.max() if host.max() > 2**31 - 1 else host.min()
            raise OverflowError(f"asarray: Python int {bad} too large to convert to int32")
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


def astype(a, dtype):
    return _C.astype(a, _engine_dtype(dtype))


# ---- creation ---------------------------------------------------------------------------------------------


def full(shape, fill_value, dtype=None):
    """An array fill_value may be traced (it is broadcast); a Python int wraps to an integer dtype as numpy's
    astype does (full((2,), 2**40, int32) is 0, as jax.numpy)."""
    if isinstance(fill_value, Array) or (isinstance(fill_value, _np.ndarray) and fill_value.ndim):
        fill = asarray(fill_value, dtype)
        return _C.broadcast_to(fill, _shape(shape))
    if dtype is None:
        dtype = _np.asarray(fill_value).dtype
        dtype = {"f": float32, "i": int32, "u": int32, "b": bool_}[dtype.kind]
    target = _engine_dtype(dtype)
    if isinstance(fill_value, (int, _np.integer)) and not isinstance(fill_value, (bool, _np.bool_)) \
            and target in ("i32", "u8", "u32"):
        wrapped = _np.array([int(fill_value) % 2**64], _np.uint64).astype(_np.int64)
        fill_value = int(wrapped.astype(_ENGINE_TO_PUBLIC[target])[0])
    return _C.full(_shape(shape), float(fill_value), target)


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
