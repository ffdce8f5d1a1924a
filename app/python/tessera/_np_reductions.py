"""tessera.numpy's reductions (sum, mean, var, max, all, ...), cumulative sums and products, sorting and
the arg reductions."""

import builtins as _builtins

import numpy as _np

from . import _tessera as _C
from ._np_base import Array, bool_, _axes, _canonical_axis, _engine_dtype, _FLOATING, _no_axes, _no_out
from ._np_creation import asarray, astype
from ._np_elementwise import isclose, maximum, minimum, not_equal, sqrt, _inexact
from ._np_layout import reshape


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
    if initial is None and a.size == 0 and not _no_axes(axis):
        reduced = range(a.ndim) if axis is None else [_canonical_axis(i, a.ndim, name) for i in _axes(axis)]
        if _builtins.any(a.shape[i] == 0 for i in reduced):
            raise ValueError(f"{name}: zero-size array to reduction operation {name} which has no identity "
                             f"(shape {a.shape}); give initial=")
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
        normalizer = _count(a, axis, keepdims, where) - ddof
        r = sum(d * d, axis, keepdims=keepdims, where=where) / normalizer
        # No degrees of freedom left (ddof >= n): NaN, as jax.numpy (numpy gives inf or NaN with a warning).
        if isinstance(normalizer, Array):
            r = _C.where(_C.greater(normalizer, 0.0), r, _np.nan)
        elif normalizer <= 0:
            r = _C.where(_C.equal(r, r), _np.nan, r) if isinstance(r, Array) else _np.nan
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


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return all(isclose(a, b, rtol, atol, equal_nan))


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


def sort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False):
    """Stable, NaNs last (numpy's order); axis=None sorts the flattened array. descending=True reverses the
    ascending order (NaNs first), as jax.numpy."""
    a = asarray(a)
    if order is not None:
        raise TypeError("sort: order= is not supported (no structured arrays)")
    if axis is None:
        a, axis = reshape(a, (-1,)), 0
    r = _C.sort([a], axis, True, 1)[0]
    return _C.flip(r, [axis % r.ndim]) if descending else r


def argsort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False):
    """The indices that sort a, stably; descending=True keeps equal elements in their order, as jax.numpy's."""
    a = asarray(a)
    if order is not None:
        raise TypeError("argsort: order= is not supported (no structured arrays)")
    if axis is None:
        a, axis = reshape(a, (-1,)), 0
    if not descending:
        return _C.argsort(a, axis)
    axis %= a.ndim
    # The reversed array sorted ascending, read backwards, is a descending order whose ties keep their order.
    idx = _C.flip(_C.argsort(_C.flip(a, [axis]), axis), [axis])
    return (a.shape[axis] - 1) - idx


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


def _computed_in_float32(fn):
    """fn for float16 and bfloat16 inputs computed in float32 and cast back, as jax.numpy's reductions upcast
    them (_upcast_f16): sums of many 16-bit values keep float32's precision. dtype= still decides."""
    def reduction(a, *args, **kwargs):
        if isinstance(a, Array) and a._dtype_name in ("f16", "bf16") and kwargs.get("dtype") is None \
                and (len(args) < 2 or args[1] is None):
            return _C.astype(fn(_C.astype(a, "f32"), *args, **kwargs), a._dtype_name)
        return fn(a, *args, **kwargs)

    reduction.__name__ = reduction.__qualname__ = fn.__name__
    reduction.__doc__ = fn.__doc__
    return reduction


sum = _computed_in_float32(sum)
prod = _computed_in_float32(prod)
mean = _computed_in_float32(mean)
var = _computed_in_float32(var)
cumsum = _computed_in_float32(cumsum)
cumprod = _computed_in_float32(cumprod)
