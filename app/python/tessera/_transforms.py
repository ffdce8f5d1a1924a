"""jit, grad, value_and_grad, vjp, vmap, trace and custom_vjp: pytrees and static arguments are handled here; the engine sees flat
lists of Arrays (app/python/transforms.cpp)."""

import contextlib
import functools
import inspect
import threading
import weakref

import numpy as _np

from . import _tessera as _C
from .numpy import Array, asarray, zeros_like, _engine_dtype, _ENGINE_TO_PUBLIC, _FLOATING
from .tree_util import tree_flatten, tree_map, tree_unflatten, _prefix_per_leaf

__all__ = ["jit", "grad", "value_and_grad", "vjp", "vmap", "trace", "eval_shape", "custom_vjp", "checkpoint", "remat",
           "checkpoint_policies", "ShapeDtypeStruct"]


def _leaf_arrays(leaves):
    return [asarray(x) for x in leaves]


class _AuxLeaves:
    """has_aux outputs: array leaves leave the trace as outputs; other leaves (Python numbers, strings) are kept
    as they are and put back, as JAX returns them."""

    def __init__(self):
        self.tree, self.kept = None, []

    def arrays(self, aux):
        leaves, self.tree = tree_flatten(aux)
        self.kept = [None if isinstance(x, (Array, _np.ndarray, _np.generic)) else (x,) for x in leaves]
        return [asarray(x) for x, k in zip(leaves, self.kept) if k is None]

    def rebuild(self, arrays):
        it = iter(arrays)
        return tree_unflatten(self.tree, [next(it) if k is None else k[0] for k in self.kept])


def _avals(arrays):
    return tuple((a.shape, a._dtype_name) for a in arrays)


def _by_position_and_name(fun, nums, names):
    """(argnums, argnames) each completed from the other through fun's positional-or-keyword parameters."""
    try:
        params = [p.name for p in inspect.signature(fun).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):  # no signature to read (a builtin)
        return nums, names
    named = [params[n] for n in nums if 0 <= n < len(params)]
    positions = [params.index(k) for k in names if k in params]
    return (tuple(dict.fromkeys(nums + tuple(positions))),
            tuple(dict.fromkeys(names + tuple(k for k in named if k not in names))))


def _argnums(argnums, nargs, what):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    out = []
    for n in nums:
        if not -nargs <= n < nargs:
            raise ValueError(f"{what}: argnums {n} is out of range for {nargs} positional arguments")
        out.append(n % nargs)
    return tuple(out)


class _JitSwitch(threading.local):
    disabled = False


_jit_off = _JitSwitch()


@contextlib.contextmanager
def disable_jit(disable=True):
    """jax.disable_jit: inside the region (on this thread), jitted functions run their Python op by op, eagerly,
    so prints and breakpoints see values; grad, vmap and the others still work."""
    previous = _jit_off.disabled
    _jit_off.disabled = bool(disable)
    try:
        yield
    finally:
        _jit_off.disabled = previous


def block_until_ready(x):
    """Waits for every array in the pytree x and returns x (arrays are computed by the time a call returns; the
    GPU's are waited for)."""
    return tree_map(lambda a: a.block_until_ready() if isinstance(a, Array) else a, x)


def device_get(x):
    """The pytree x with its arrays as numpy arrays (copies)."""
    return tree_map(lambda a: _np.array(a) if isinstance(a, Array) else a, x)


class _Jitted:
    """A function compiled once per signature: the pytree structure of its dynamic arguments, their shapes and
    dtypes, and the values of its static arguments (which must be hashable)."""

    def __init__(self, fun, static_argnums, static_argnames, donate_argnums=(), donate_argnames=()):
        self._fun = fun
        self._static_argnums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        self._static_argnames = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
        self._donate_argnums = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)
        self._donate_argnames = (donate_argnames,) if isinstance(donate_argnames, str) else tuple(donate_argnames)
        # As jax.jit: an argument named static (or donated) by position is so when passed by keyword too, and
        # one named by keyword when passed by position (through fun's signature, where it has one).
        self._static_argnums, self._static_argnames = _by_position_and_name(fun, self._static_argnums,
                                                                            self._static_argnames)
        self._donate_argnums, self._donate_argnames = _by_position_and_name(fun, self._donate_argnums,
                                                                            self._donate_argnames)
        both = set(self._donate_argnums) & set(self._static_argnums)
        both |= set(self._donate_argnames) & set(self._static_argnames)
        if both:
            raise ValueError(f"jit: argument {sorted(both, key=str)[0]!r} is both static and donated")
        # The engine's Jit calls back through a weak reference: a bound method would make a cycle through the
        # C++ object, which Python's collector cannot see, and keep every jitted function (and its compiled
        # programs) alive forever.
        this = weakref.ref(self)
        self._jit = _C.Jit(lambda leaves, signature: this()._call_flat(leaves, signature),
                           getattr(fun, "__name__", "jit"))
        self._signatures = {}  # ((treedef, statics), autocast) -> the signature text the engine's cache keys on
        self._calls = {}       # signature text -> (treedef, statics), for the callback that traces
        self._out_trees = {}   # signature text -> the output's treedef, recorded when traced
        # An output whose structure depends on the arguments' shapes or dtypes (a dict for matrices, a tuple for
        # vectors): each trace's treedef by (signature, avals), read for the signatures in _varying.
        self._out_by_avals = {}
        self._varying = set()
        self._donated = {}     # signature text -> indices (as text) of the leaves that may be donated
        # Calls with arrays alone as positional arguments (the common case) skip the pytree work: their signature
        # depends on nothing but how many there are. (Number of arrays, autocast) -> signature text, once seen.
        self._flat = {} if not self._static_argnums and not self._static_argnames else None
        functools.update_wrapper(self, fun)

    def _split(self, args, kwargs):
        nargs = len(args)
        static_nums = {n % nargs for n in self._static_argnums if -nargs <= n < nargs}
        statics = tuple((i, args[i]) for i in sorted(static_nums))
        statics += tuple(sorted((k, v) for k, v in kwargs.items() if k in self._static_argnames))
        dynamic = (tuple(a for i, a in enumerate(args) if i not in static_nums),
                   {k: v for k, v in kwargs.items() if k not in self._static_argnames})
        try:
            hash(statics)
        except TypeError as e:
            raise TypeError(f"jit: static arguments must be hashable: {e}") from None
        return dynamic, statics

    def _rebuild(self, leaves, treedef, statics):
        args, kwargs = tree_unflatten(treedef, leaves)
        args = list(args)
        for where, value in statics:
            if isinstance(where, int):
                args.insert(where, value)
            else:
                kwargs[where] = value
        return args, kwargs

    def _call_flat(self, leaves, signature):
        treedef, statics = self._calls[signature]
        args, kwargs = self._rebuild(leaves, treedef, statics)
        out_leaves, out_tree = tree_flatten(self._fun(*args, **kwargs))
        if self._out_trees.setdefault(signature, out_tree) != out_tree:
            self._varying.add(signature)
        self._out_by_avals[(signature, _avals(leaves))] = out_tree
        return _leaf_arrays(out_leaves)

    def _outputs(self, signature, leaves, outs):
        """The call's outputs in the tree its trace gave (read after the call, which may have traced)."""
        if signature in self._varying:
            return tree_unflatten(self._out_by_avals[(signature, _avals(leaves))], outs)
        return tree_unflatten(self._out_trees[signature], outs)

    def _donated_leaves(self, args, kwargs):
        """The flat indices of the leaves of the donated arguments, as the engine names leaves of a list."""
        if not self._donate_argnums and not self._donate_argnames:
            return []
        nargs = len(args)
        donate = {n % nargs for n in self._donate_argnums if -nargs <= n < nargs}
        marked = (tuple(tree_map(lambda _: i in donate, a) for i, a in enumerate(args)),
                  {k: tree_map(lambda _: k in self._donate_argnames, v) for k, v in kwargs.items()})
        dynamic, _ = self._split(*marked)
        flags, _ = tree_flatten(dynamic)
        return [str(i) for i, flag in enumerate(flags) if flag is True]

    def __call__(self, *args, **kwargs):
        if _jit_off.disabled:  # inside disable_jit(): the Python function itself, op by op
            return self._fun(*args, **kwargs)
        # A call inside a tessera.autocast region is traced, compiled and cached apart from one outside it.
        region = _C.autocast_dtype()
        if self._flat is not None and not kwargs:
            signature = self._flat.get((len(args), region))
            if signature is not None and all(type(a) is Array for a in args):
                return self._outputs(signature, args, self._jit.call(list(args), signature, self._donated[signature]))
        dynamic, statics = self._split(args, kwargs)
        leaves, treedef = tree_flatten(dynamic)
        key = (treedef, statics)
        signature = self._signatures.get((key, region))
        if signature is None:
            signature = f"#{len(self._signatures)} {treedef} static={statics!r}"
            if region is not None:
                signature += f" autocast={region}"
            self._signatures[(key, region)] = signature
            self._calls[signature] = key
            self._donated[signature] = self._donated_leaves(args, kwargs)
        arrays = _leaf_arrays(leaves)
        outs = self._jit.call(arrays, signature, self._donated[signature])
        if self._flat is not None and not kwargs and all(type(a) is Array for a in args):
            self._flat[(len(args), region)] = signature
        return self._outputs(signature, arrays, outs)

    def cache_info(self):
        """hits, misses, cache size and the reason of the last miss (as TESSERA_LOG_COMPILES logs it)."""
        j = self._jit
        return {"hits": j.hits, "misses": j.misses, "size": j.cache_size, "last_miss_reason": j.last_miss_reason,
                "compile_seconds": j.compile_seconds}


def jit(fun=None, *, static_argnums=(), static_argnames=(), donate_argnums=(), donate_argnames=()):
    """jax.jit: traces fun once per signature, compiles it with the engine's compile sequence and caches it.

    donate_argnums/donate_argnames: the call may write its outputs into these arguments' buffers (an optimizer
    step updating the parameters in place); a donated array is deleted by the call (is_deleted() is True, and
    reading it raises), as in JAX. A buffer another array still shares is not taken."""
    if fun is None:
        return functools.partial(jit, static_argnums=static_argnums, static_argnames=static_argnames,
                                 donate_argnums=donate_argnums, donate_argnames=donate_argnames)
    if getattr(fun, "_tessera_compiled", False):  # jit(shard_map(f)): compiled already, run as it is
        donates = isinstance(donate_argnums, int) or bool(donate_argnums) or bool(donate_argnames)
        return fun._jitted(donate_argnums, donate_argnames) if donates else fun
    return _Jitted(fun, static_argnums, static_argnames, donate_argnums, donate_argnames)


def value_and_grad(fun, argnums=0, has_aux=False):
    """jax.value_and_grad: fun's value and its gradient with respect to the arguments argnums (pytrees)."""

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        nums = _argnums(argnums, len(args), "value_and_grad")
        leaves, treedef = tree_flatten(tuple(args[n] for n in nums))
        aux_out = _AuxLeaves()

        def flat(xs):
            diff = tree_unflatten(treedef, xs)
            full = list(args)
            for n, value in zip(nums, diff):
                full[n] = value
            out = fun(*full, **kwargs)
            if has_aux:
                if not (isinstance(out, (tuple, list)) and len(out) == 2):
                    raise TypeError("value_and_grad(has_aux=True): the function must return a pair (value, aux)")
                out, aux = out
            else:
                aux = None
            return [asarray(out)] + aux_out.arrays(aux)

        arrays = _leaf_arrays(leaves)
        for a in arrays:
            if a._dtype_name not in _FLOATING:
                raise _C.DTypeError(f"grad requires floating point inputs, but argnums {argnums} has a "
                                f"{a._dtype_name}{list(a.shape)} leaf (JAX's rule; differentiate with respect to a "
                                "float array, or close over the integer one)")
        value, grads, aux_leaves = _C.value_and_grad(flat, arrays)
        g = tree_unflatten(treedef, grads)
        g = g[0] if isinstance(argnums, int) else g
        if has_aux:
            return (value, aux_out.rebuild(aux_leaves)), g
        return value, g

    return wrapped


def grad(fun, argnums=0, has_aux=False):
    """jax.grad: the gradient of a scalar function with respect to the arguments argnums."""
    vg = value_and_grad(fun, argnums, has_aux)

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        (value_aux, g) = vg(*args, **kwargs)
        return (g, value_aux[1]) if has_aux else g

    return wrapped


def vjp(fun, *primals, has_aux=False):
    """jax.vjp: (fun(*primals), vjp_fn), where vjp_fn(cotangent) gives one cotangent per primal."""
    leaves, treedef = tree_flatten(primals)
    state = {}
    aux_out = _AuxLeaves()

    def flat(xs):
        out = fun(*tree_unflatten(treedef, xs))
        aux_leaves = []
        if has_aux:
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise TypeError("vjp(has_aux=True): the function must return a pair (output, aux)")
            out, aux = out
            aux_leaves = aux_out.arrays(aux)
        out_leaves, state["out_tree"] = tree_flatten(out)
        state["num_out"] = len(out_leaves)
        # aux leaves leave the trace as outputs (values, not tracers), with no cotangent
        return _leaf_arrays(out_leaves) + aux_leaves

    outs, pullback = _C.vjp(flat, _leaf_arrays(leaves))
    out_tree, num_out = state["out_tree"], state["num_out"]
    num_aux = len(outs) - num_out

    def vjp_fn(cotangent):
        ct_leaves, ct_tree = tree_flatten(cotangent)
        if ct_tree != out_tree:
            raise ValueError(f"vjp: the cotangent's structure {ct_tree} differs from the output's {out_tree}")
        return tuple(tree_unflatten(treedef, pullback(_leaf_arrays(ct_leaves) + [None] * num_aux)))

    result = (tree_unflatten(out_tree, outs[:num_out]), vjp_fn)
    return result + (aux_out.rebuild(outs[num_out:]),) if has_aux else result


def _axes_per_leaf(spec, tree, what):
    """The axis of each leaf of tree (in flatten order): spec is an int or None for all of them, or a pytree
    prefix of tree whose leaves (ints, None) apply to the subtrees under them, as JAX's in_axes/out_axes."""
    if spec is None or isinstance(spec, int):
        return [spec] * len(tree_flatten(tree)[0])
    axes = _prefix_per_leaf(spec, tree, lambda a: a is None, f"vmap: {what}")
    for a in axes:
        if a is not None and not isinstance(a, int):
            raise ValueError(f"vmap: {what} entries must be ints or None, got {a!r}")
    return axes


def vmap(fun, in_axes=0, out_axes=0):
    """jax.vmap: fun mapped over an axis of its arguments. in_axes: an int or None for every argument, or a
    tuple with one entry per positional argument, each an int, None (shared by every example) or a pytree
    prefix of the argument (a dict of axes for a dict argument); keyword arguments are mapped over axis 0.
    out_axes: an int, None or a pytree prefix of the output; None returns an output as it is in the first
    example (JAX requires it not to depend on the mapped arguments)."""

    @functools.wraps(fun)
    def batched(*args, **kwargs):
        axes = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
        if len(axes) != len(args):
            raise ValueError(f"vmap: in_axes has {len(axes)} entries for {len(args)} arguments")
        leaves, leaf_axes = [], []
        per_arg = []
        for arg, axis in zip(args + (kwargs,), axes + (0,)):
            arg_leaves, arg_tree = tree_flatten(arg)
            per_arg.append(arg_tree)
            leaves += arg_leaves
            leaf_axes += _axes_per_leaf(axis, arg, "in_axes")
        arrays = _leaf_arrays(leaves)
        # The engine's -1 means shared; a negative axis counts from the end.
        for a, x in zip(leaf_axes, arrays):
            if a is not None and not -x.ndim <= a < x.ndim:
                raise ValueError(f"vmap: in_axes {a} is out of range for an argument of shape {tuple(x.shape)} "
                                 f"(rank {x.ndim}: a mapped argument needs rank above the axis)")
        leaf_axes = [-1 if a is None else a % x.ndim for a, x in zip(leaf_axes, arrays)]
        out_tree = []

        def flat(xs):
            it, rebuilt = iter(xs), []
            for tree in per_arg:
                rebuilt.append(tree_unflatten(tree, [next(it) for _ in range(tree.num_leaves)]))
            out_leaves, tree = tree_flatten(fun(*rebuilt[:-1], **rebuilt[-1]))
            out_tree[:] = [tree]
            return _leaf_arrays(out_leaves)

        outs = _C.vmap(flat, arrays, leaf_axes)
        if out_axes != 0:
            placeholder = tree_unflatten(out_tree[0], list(range(len(outs))))
            out_leaf_axes = _axes_per_leaf(out_axes, placeholder, "out_axes")
            outs = [o if a == 0 else o[0] if a is None else _C.transpose(o, _move_first(o.ndim, a))
                    for o, a in zip(outs, out_leaf_axes)]
        return tree_unflatten(out_tree[0], outs)

    return batched


def _move_first(ndim, to):
    """The permutation that moves axis 0 to position `to`."""
    to %= ndim
    rest = list(range(1, ndim))
    return rest[:to] + [0] + rest[to:]


class ShapeDtypeStruct:
    """An abstract argument for trace: a shape and a dtype, no values."""

    def __init__(self, shape, dtype):
        self.shape = tuple(shape)
        self.dtype = dtype

    def __repr__(self):
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype})"


class IrText(str):
    """The IR of a traced function, as `tessera ir` prints it; shown as text at the prompt."""

    def __repr__(self):
        return str(self)


def _aval(x):
    if isinstance(x, ShapeDtypeStruct):
        return (list(x.shape), _engine_dtype(x.dtype))
    a = asarray(x)
    return (list(a.shape), a._dtype_name)


def trace(fun, static_argnums=()):
    """tessera.trace(f)(*args): the IR of f on args' shapes and dtypes (jax.make_jaxpr's habit). Arguments may be
    arrays or ShapeDtypeStructs; static_argnums are passed to f as they are."""
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    def traced(*args):
        statics = {i: a for i, a in enumerate(args) if i in static}
        leaves, treedef = tree_flatten(tuple(a for i, a in enumerate(args) if i not in static))

        def flat(xs):
            dyn = iter(tree_unflatten(treedef, xs))
            full = [statics[i] if i in statics else next(dyn) for i in range(len(args))]
            return _leaf_arrays(tree_flatten(fun(*full))[0])

        return IrText(_C.trace(flat, [_aval(x) for x in leaves], getattr(fun, "__name__", "main")))

    return traced


def eval_shape(fun, *args, **kwargs):
    """jax.eval_shape: the shapes and dtypes of fun(*args, **kwargs) as a pytree of ShapeDtypeStructs, traced on
    the arguments' shapes and dtypes (arrays or ShapeDtypeStructs); nothing is computed or allocated."""
    leaves, treedef = tree_flatten((args, kwargs))
    out_tree = []

    def flat(xs):
        a, k = tree_unflatten(treedef, xs)
        out_leaves, tree = tree_flatten(fun(*a, **k))
        out_tree[:] = [tree]
        return _leaf_arrays(out_leaves)

    outs = _C.eval_shape(flat, [_aval(x) for x in leaves])
    return tree_unflatten(out_tree[0], [ShapeDtypeStruct(shape, _ENGINE_TO_PUBLIC[dtype]) for shape, dtype in outs])


class custom_vjp:
    """jax.custom_vjp: a function whose gradient is given by defvjp(fwd, bwd) instead of differentiated.
    fwd(*args) -> (output, residuals); bwd(*nondiff_args, residuals, output_cotangent) -> a tuple with one
    cotangent per differentiated argument (a pytree of its structure, or None for zeros). Calling the function
    runs it; grad and vjp use fwd and bwd; vmap batches all three; arguments at nondiff_argnums are passed to
    every function as they are and get no cotangent."""

    def __init__(self, fun, nondiff_argnums=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd = self.bwd = None
        # fwd commonly calls the function itself for its output (as in JAX's examples). All three functions are
        # traced when the function is called, so such a call, made while fwd or bwd is traced, runs it plainly.
        self._in_rule = 0

    def defvjp(self, fwd, bwd):
        self.fwd, self.bwd = fwd, bwd
        return self

    def __call__(self, *args):
        name = getattr(self.fun, "__name__", "function")
        if self._in_rule:
            return self.fun(*args)
        if self.fwd is None:
            raise TypeError(f"custom_vjp: {name} has no fwd and bwd; call {name}.defvjp(fwd, bwd) first")
        nondiff_at = _argnums(self.nondiff_argnums, len(args), "custom_vjp") if self.nondiff_argnums else ()
        nondiff = [args[i] for i in nondiff_at]
        diff_at = [i for i in range(len(args)) if i not in nondiff_at]
        diff_args = tuple(args[i] for i in diff_at)
        leaves, in_tree = tree_flatten(diff_args)
        arrays = _leaf_arrays(leaves)
        state = {}

        def call_args(xs):
            full = list(args)
            for i, a in zip(diff_at, tree_unflatten(in_tree, xs)):
                full[i] = a
            return full

        def flat_f(xs):
            out_leaves, state["out"] = tree_flatten(self.fun(*call_args(xs)))
            return _leaf_arrays(out_leaves)

        def in_rule(fn, *fn_args):
            self._in_rule += 1
            try:
                return fn(*fn_args)
            finally:
                self._in_rule -= 1

        def flat_fwd(xs):
            result = in_rule(self.fwd, *call_args(xs))
            if not isinstance(result, tuple) or len(result) != 2:
                raise TypeError(f"custom_vjp: fwd of {name} must return a pair (output, residuals)")
            out_leaves, out_tree = tree_flatten(result[0])
            if out_tree != state["out"]:
                raise TypeError(f"custom_vjp: fwd of {name} returns an output of structure {out_tree} but {name} "
                                f"returns {state['out']}")
            res_leaves, state["res"] = tree_flatten(result[1])
            state["n_res"] = len(res_leaves)
            return _leaf_arrays(out_leaves) + _leaf_arrays(res_leaves)

        def flat_bwd(xs):
            n, n_res = len(arrays), state["n_res"]
            res = tree_unflatten(state["res"], xs[n:n + n_res])
            ct = tree_unflatten(state["out"], xs[n + n_res:])
            cts = in_rule(self.bwd, *nondiff, res, ct)
            if not isinstance(cts, tuple) or len(cts) != len(diff_args):
                raise TypeError(f"custom_vjp: bwd of {name} must return a tuple with one cotangent per "
                                f"differentiated argument ({len(diff_args)}), got {type(cts).__name__}"
                                + (f" of {len(cts)}" if isinstance(cts, tuple) else ""))
            out = []
            for k, (arg, g) in enumerate(zip(diff_args, cts)):
                arg_leaves, arg_tree = tree_flatten(arg)
                if g is None:
                    out += [zeros_like(x) for x in _leaf_arrays(arg_leaves)]
                    continue
                g_leaves, g_tree = tree_flatten(g)
                if g_tree != arg_tree:
                    raise TypeError(f"custom_vjp: bwd of {name} returns a cotangent of structure {g_tree} for "
                                    f"argument {diff_at[k]}, which is {arg_tree}")
                out += _leaf_arrays(g_leaves)
            return out

        outs = _C.custom_vjp_call(flat_f, flat_fwd, flat_bwd, arrays, len(arrays))
        return tree_unflatten(state["out"], outs)


class custom_jvp:
    """jax.custom_jvp: a function whose derivative is given by a JVP rule instead of differentiated.
    defjvp(jvp): jvp(*nondiff_args, primals, tangents) -> (output, output_tangent), linear in tangents;
    defjvps(*fns): one function per differentiated argument, fn(tangent, output, *primals), their results summed.
    Calling the function runs it. Reverse mode (grad, vjp) transposes the rule: the cotangent is the pullback of
    tangents -> the rule's output tangent (linear, so its vjp at zero tangents is its transpose), as JAX
    transposes a linearized custom_jvp; forward mode (jvp, jacfwd), the transpose of that, gives the rule back."""

    def __init__(self, fun, nondiff_argnums=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp = None
        # A rule commonly calls the function itself for its output (as in JAX's examples): such a call, made
        # while the rule is traced, runs it plainly.
        self._in_rule = 0

    def defjvp(self, jvp):
        self.jvp = jvp
        return jvp

    def defjvps(self, *tangent_fns):
        def jvp(*args):
            *nondiff, primals, tangents = args
            out = self.fun(*self._full(nondiff, primals))
            total = None
            for fn, t in zip(tangent_fns, tangents):
                if fn is None:
                    continue
                part = fn(t, out, *primals)
                total = part if total is None else tree_map(lambda a, b: a + b, total, part)
            return out, total if total is not None else tree_map(zeros_like, out)

        self.jvp = jvp
        return self

    def _full(self, nondiff, primals):
        """The arguments in call order from the nondiff ones and the differentiated ones."""
        n = len(nondiff) + len(primals)
        nondiff_at = _argnums(self.nondiff_argnums, n, "custom_jvp") if self.nondiff_argnums else ()
        it_nd, it_p = iter(nondiff), iter(primals)
        return [next(it_nd) if i in nondiff_at else next(it_p) for i in range(n)]

    def __call__(self, *args):
        name = getattr(self.fun, "__name__", "function")
        if self._in_rule:
            return self.fun(*args)
        if self.jvp is None:
            raise TypeError(f"custom_jvp: {name} has no JVP rule; call {name}.defjvp(jvp) first")
        rule = self.jvp
        nondiff_at = _argnums(self.nondiff_argnums, len(args), "custom_jvp") if self.nondiff_argnums else ()

        def primal(*call_args):
            return self.fun(*call_args)

        wrapped = custom_vjp(primal, nondiff_argnums=nondiff_at)

        def fwd(*call_args):
            diff = tuple(a for i, a in enumerate(call_args) if i not in nondiff_at)
            return self.fun(*call_args), diff

        def bwd(*rest):
            *nondiff, primals, g = rest

            def tangent_out(*tangents):
                self._in_rule += 1
                try:
                    return rule(*nondiff, tuple(primals), tuple(tangents))[1]
                finally:
                    self._in_rule -= 1

            _, pullback = vjp(tangent_out, *[tree_map(zeros_like, p) for p in primals])
            return tuple(pullback(g))

        wrapped.defvjp(fwd, bwd)
        return wrapped(*args)


class checkpoint_policies:
    """What checkpoint keeps from the forward pass instead of recomputing (jax.checkpoint_policies)."""
    nothing_saveable = "nothing_saveable"  # recompute everything inside (the default)
    dots_saveable = "dots_saveable"  # keep matmul results, recompute the rest (norms, activations, softmax)
    everything_saveable = "everything_saveable"  # keep everything: the same as no checkpoint


def checkpoint(fun=None, *, policy=None, prevent_cse=True):
    """jax.checkpoint (also tessera.remat): fun with its intermediates recomputed in the backward pass instead of
    kept alive from the forward pass, trading compute for memory. Calling it runs fun; grad recomputes fun from
    its arguments behind an optimization barrier (so the compiler neither merges the recomputation with the
    forward pass nor runs it early). policy: a checkpoint_policies name (None: nothing_saveable). Values fun
    closes over are read as they are; pass the activations as arguments. Usable as a decorator, with or without
    arguments."""
    if fun is None:
        return lambda f: checkpoint(f, policy=policy, prevent_cse=prevent_cse)
    name = policy if policy is not None else checkpoint_policies.nothing_saveable
    name = getattr(name, "__name__", name)
    if not isinstance(name, str):
        raise TypeError(f"checkpoint: policy must be a checkpoint_policies name, got {policy!r}")

    @functools.wraps(fun)
    def wrapped(*args):
        leaves, in_tree = tree_flatten(args)
        arrays = _leaf_arrays(leaves)
        state = {}

        def flat(xs):
            out_leaves, state["out"] = tree_flatten(fun(*tree_unflatten(in_tree, xs)))
            return _leaf_arrays(out_leaves)

        outs = _C.remat_call(flat, arrays, name)
        return tree_unflatten(state["out"], outs)

    return wrapped


remat = checkpoint
