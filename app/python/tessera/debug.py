"""Host callbacks, as jax's: `tessera.debug.print` and `tessera.debug.callback` (jax.debug's), `pure_callback`
(tessera.pure_callback) and `io_callback` (jax.experimental's, tessera.io_callback), and jax.debug's
`visualize_array_sharding`.

Each is one `host_callback` op in the traced program: the function runs on the host when the program runs (once
per call of a jitted function, once per iteration of a loop body), with numpy copies of the values (bfloat16 as
float32). `print` and `callback` and `io_callback` are effects: kept when nothing uses them, never merged, and run
in program order. `pure_callback` is a pure function: the compiler may drop it when its results are unused, or
merge two equal calls. None has a derivative (reverse mode raises; give the function a custom_vjp). Under vmap,
`print`/`callback`/`io_callback` run once per example; `pure_callback` as its `vmap_method` says."""

import sys as _sys

from . import _tessera as _C
from .numpy import asarray as _asarray, _engine_dtype
from .sharding import visualize_array_sharding
from .tree_util import tree_flatten as _flatten, tree_unflatten as _unflatten

__all__ = ["print", "callback", "pure_callback", "io_callback", "visualize_array_sharding"]


# Why host callbacks cannot be traced now, or None: project_trace sets it while it traces a project's model.py,
# whose functions the engine runs without Python (the IR text it reads back cannot hold a Python function).
_refusal = None


def _refuse_host_calls(what):
    if _refusal is not None:
        raise RuntimeError(f"{what}: {_refusal}")


def _name_of(fn):
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _call(kind, fn, result_shape_dtypes, args, kwargs, effectful, vmap_method):
    """The host_callback op over the leaves of (args, kwargs); fn gets them back as trees of numpy arrays."""
    _refuse_host_calls(kind)
    leaves, in_tree = _flatten((args, kwargs))
    operands = [_asarray(x) for x in leaves]
    specs, out_tree = _flatten(result_shape_dtypes)
    results = []
    for s in specs:
        if not hasattr(s, "shape") or not hasattr(s, "dtype"):
            raise TypeError(f"{kind}: result_shape_dtypes must hold objects with .shape and .dtype "
                            f"(ShapeDtypeStruct, arrays); got {type(s).__name__}")
        results.append((tuple(int(d) for d in s.shape), _engine_dtype(s.dtype)))
    name = f"{kind}({_name_of(fn)})"

    def host(values):
        a, kw = _unflatten(in_tree, values)
        out = fn(*a, **kw)
        flat, tree = _flatten(out)
        if tree != out_tree:
            raise TypeError(f"{name} returned a tree of structure {tree}, but {out_tree} was declared")
        return flat

    return _unflatten(out_tree, _C.host_callback(host, operands, results, effectful, vmap_method, name))


def pure_callback(callback, result_shape_dtypes, *args, sharding=None, vmap_method=None, **kwargs):
    """callback(*args, **kwargs) on the host, as a pure function of its arguments: it returns arrays of the
    shapes result_shape_dtypes declares (a tree of ShapeDtypeStruct; results are converted to their dtypes, a
    wrong shape is an error). vmap_method: 'sequential' (one call per example), 'expand_dims' (one call, the
    unbatched arguments with a leading 1), 'broadcast_all' (one call, every argument batched); None refuses
    vmap, as JAX does."""
    del sharding  # the callback sees whole arrays
    return _call("pure_callback", callback, result_shape_dtypes, args, kwargs, False, vmap_method or "none")


def io_callback(callback, result_shape_dtypes, *args, sharding=None, ordered=False, **kwargs):
    """callback(*args, **kwargs) on the host, as an effect (jax.experimental.io_callback): run when the program
    runs, in program order with the other effects (`ordered` is always so), once per example under vmap."""
    del sharding, ordered
    return _call("io_callback", callback, result_shape_dtypes, args, kwargs, True, "sequential")


def callback(callback, *args, ordered=False, partitioned=False, **kwargs):
    """callback(*args, **kwargs) on the host for its effect; returns None (jax.debug.callback)."""
    del ordered, partitioned

    def call(*a, **kw):
        callback(*a, **kw)
        return ()

    _call("debug_callback", call, (), args, kwargs, True, "sequential")


def print(fmt, *args, ordered=False, **kwargs):  # noqa: A001 (jax.debug's name)
    """Prints fmt.format(*args, **kwargs) with the arguments' values when the program runs (jax.debug.print):
    inside jit, once per call; inside a loop body, once per iteration; under vmap, once per example."""
    del ordered
    if not isinstance(fmt, str):
        raise TypeError(f"debug.print: the format must be a str; got {type(fmt).__name__}")

    def show(*a, **kw):
        # One write with its newline: the devices of a shard_map body print from their own threads, and print()'s
        # separate write of the newline would let their lines interleave.
        _sys.stdout.write(fmt.format(*a, **kw) + "\n")
        _sys.stdout.flush()
        return ()

    _call("debug_print", show, (), args, kwargs, True, "sequential")
