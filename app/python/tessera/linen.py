"""Modules in the style of Flax linen: a Module is a dataclass whose __call__ creates its parameters and
submodules where they are used (@compact), or makes them in setup, and is run purely through init and apply:

    class MLP(nn.Module):
        hidden: int

        @nn.compact
        def __call__(self, x):
            return nn.Dense(1)(nn.relu(nn.Dense(self.hidden)(x)))

    variables = MLP(32).init(key, x)          # {"params": {"Dense_0": {"kernel", "bias"}, "Dense_1": ...}}
    y = MLP(32).apply(variables, x)

A submodule's name is the field that holds it (a list field's items: `layers_0`, `layers_1`), its `name=`, or
its class and a counter (`Dense_0`); parameter paths join the names with dots (`blocks_0.attn.kernel`).

Besides "params", a module may keep variables in other collections (self.variable): BatchNorm's running
statistics live in "batch_stats". init returns every collection; apply reads them, and with
mutable=["batch_stats"] returns (output, the updated collections), as Flax does.

Layers take Flax's dtype options: param_dtype, the dtype parameters are made in (float32), and dtype, the one
they compute in: the inputs and parameters are cast to it before the product (None: their promoted dtype, as
flax.linen.dtypes.promote_dtype). Norms compute their statistics in at least float32 and return dtype (None:
the promoted dtype of the input and their parameters). precision (and a Dense's dot_general) reach the product;
float32 products are float32 whatever precision asks (tessera.lax.Precision)."""

import dataclasses
import inspect
import math
import threading
import zlib
from typing import Any, Optional, Sequence

from . import _tessera as _C
from . import numpy as tnp
from . import random
from ._initializers import initializers
from ._lax_types import canonicalize_precision

__all__ = ["Module", "compact", "Dense", "Embed", "LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm", "Conv",
           "ConvTranspose", "Upsample", "Dropout", "Sequential", "Variable", "initializers",
           "MultiHeadDotProductAttention", "dot_product_attention", "make_causal_mask", "DenseGeneral", "Einsum",
           "InstanceNorm", "PReLU"]

_state = threading.local()


def _scope():
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else None


class _Scope:
    """One module's place in a run of init or apply: its path, its variables (per collection, a dict of this
    module's own variables and its children's dicts) and the naming of the children it calls. mutable: the
    collections this run may write (every one in init)."""

    def __init__(self, module, path, variables, mode, rngs, mutable, parent=None, name=None):
        self.module, self.path, self.variables, self.mode, self.rngs = module, path, variables, mode, rngs
        self.mutable = mutable
        self.parent, self.name = parent, name
        self.counters = {}
        self.rng_counts = {}
        self.set_up = False
        # id(child) -> (child, its name), so that a module called twice shares its parameters; holding the child
        # keeps its id from being reused by a later one.
        self.named = {}

    @property
    def params(self):
        return self.collection("params")

    def collection(self, col):
        """This module's dict in collection col, made (empty, under its parents' dicts) where it has none."""
        if col not in self.variables:
            self.variables[col] = {} if self.parent is None else self.parent.collection(col).setdefault(self.name, {})
        return self.variables[col]

    def may_write(self, col):
        return self.mode == "init" or self.mutable is True or col in self.mutable

    def child_name(self, child):
        if child.name is not None:
            return child.name
        if id(child) in self.named:
            return self.named[id(child)][1]
        name = None
        # A field or an attribute set in setup: its name (a list's items: name_0, name_1, ...).
        for attr, value in vars(self.module).items():
            if value is child:
                name = attr
            elif isinstance(value, (list, tuple)):
                name = next((f"{attr}_{i}" for i, v in enumerate(value) if v is child), None)
            if name:
                break
        if name is None:
            kind = type(child).__name__
            name = f"{kind}_{self.counters.get(kind, 0)}"
            self.counters[kind] = self.counters.get(kind, 0) + 1
        self.named[id(child)] = (child, name)
        return name

    def child(self, module, name):
        # In apply, a submodule without parameters (Dropout) has no entry (init prunes empty dicts); one that
        # reads a parameter it lacks fails there, naming the parameter.
        variables = {}
        for col, tree in self.variables.items():
            variables[col] = tree.setdefault(name, {}) if self.may_write(col) else tree.get(name, {})
        return _Scope(module, _join(self.path, name), variables, self.mode, self.rngs, self.mutable, self, name)

    def rng(self, stream, path):
        """A key for this stream, distinct per path and per call within the run."""
        if stream not in self.rngs:
            raise ValueError(f"{path}: needs an rng named '{stream}' (pass rngs={{'{stream}': key}})")
        n = self.rng_counts.get(stream, 0)
        self.rng_counts[stream] = n + 1
        return random.fold_in(random.fold_in(self.rngs[stream], zlib.crc32(path.encode())), n)


def _pruned(params):
    """params without the empty dicts of modules that have no parameters (Dropout)."""
    out = {}
    for k, v in params.items():
        if isinstance(v, dict):
            v = _pruned(v)
            if not v:
                continue
        out[k] = v
    return out


def _join(prefix, name):
    return f"{prefix}.{name}" if prefix else name


class Variable:
    """A variable of a collection other than "params" (self.variable): read and written through .value, as
    Flax's. Writing needs the collection to be mutable in this run (always in init; in apply, named in
    mutable=...)."""

    def __init__(self, scope, col, name):
        self._scope, self.collection, self.name = scope, col, name

    @property
    def value(self):
        return self._scope.variables[self.collection][self.name]

    @value.setter
    def value(self, v):
        if not self._scope.may_write(self.collection):
            raise RuntimeError(f"{_join(self._scope.path, self.name)}: collection '{self.collection}' is not mutable "
                               f"in this apply (pass mutable=['{self.collection}'])")
        self._scope.collection(self.collection)[self.name] = tnp.asarray(v)


# Module's own machinery, which runs in whatever scope is current.
_UNBOUND = {"setup", "param", "variable", "make_rng", "is_initializing", "is_mutable_collection", "init",
            "init_with_output", "apply"}


def compact(fn):
    """Marks the method that creates parameters and submodules where they are used (every __call__ may)."""
    fn._tessera_compact = True
    return fn


def _bound(call):
    def wrapped(self, *args, **kwargs):
        parent = _scope()
        if parent is None:
            raise RuntimeError(f"{type(self).__name__} is called outside init/apply: use module.init(key, ...) "
                               "or module.apply(variables, ...)")
        if parent.module is self:
            return call(self, *args, **kwargs)
        scope = parent.child(self, parent.child_name(self))
        _state.stack.append(scope)
        try:
            self._setup_once(scope)
            return call(self, *args, **kwargs)
        finally:
            _state.stack.pop()

    wrapped.__wrapped__ = call
    wrapped.__doc__ = call.__doc__
    return wrapped


class Module:
    """The base of modules: subclasses become dataclasses (their fields are the hyperparameters) with a
    keyword-only `name`."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # Every public method (and __call__) runs in the module's own scope, so that Embed.attend, called from
        # a parent, reads the Embed's parameters.
        fields = cls.__dict__.get("__annotations__", {})  # a field's default may be a function (kernel_init)
        for name, fn in list(cls.__dict__.items()):
            if ((name == "__call__" or not name.startswith("_")) and name not in _UNBOUND and name not in fields
                    and inspect.isfunction(fn)):
                setattr(cls, name, _bound(fn))
        dataclasses.dataclass(cls, eq=False)

    def setup(self):
        """Override to make submodules (attributes: their names are the attribute names) and parameters once
        the module is bound, as Flax's setup; runs before each call of the module."""

    def _setup_once(self, scope):
        if not scope.set_up:
            scope.set_up = True
            self.setup()

    def param(self, name, init_fn, *init_args):
        """This module's parameter `name`: created by init_fn(key, *init_args) in init, read in apply."""
        scope = _scope()
        path = _join(scope.path, name)
        if name not in scope.params:
            if scope.mode != "init":
                raise KeyError(f"apply: no parameter {path} in the variables")
            scope.params[name] = tnp.asarray(init_fn(scope.rng("params", path), *init_args))
        return scope.params[name]

    def variable(self, col, name, init_fn, *init_args):
        """A Variable of collection col (not "params"): made by init_fn(*init_args) when the collection lacks it
        and may be written (init), read otherwise."""
        scope = _scope()
        if col == "params":
            raise ValueError(f"{_join(scope.path, name)}: parameters are made with self.param, not self.variable")
        tree = scope.variables.get(col, {})
        if name not in tree:
            if not scope.may_write(col):
                raise KeyError(f"apply: no variable {_join(scope.path, name)} in collection '{col}' of the variables")
            scope.collection(col)[name] = tnp.asarray(init_fn(*init_args))
        return Variable(scope, col, name)

    def is_initializing(self):
        return _scope().mode == "init"

    def is_mutable_collection(self, col):
        return _scope().may_write(col)

    def make_rng(self, stream="dropout"):
        scope = _scope()
        return scope.rng(stream, scope.path)

    def _run(self, variables, mode, rngs, args, kwargs, method, mutable=False):
        stack = getattr(_state, "stack", None)
        if stack is None:
            stack = _state.stack = []
        scope = _Scope(self, "", variables, mode, rngs, mutable)
        stack.append(scope)
        try:
            self._setup_once(scope)
            fn = self.__call__ if method is None else (getattr(self, method) if isinstance(method, str) else
                                                       lambda *a, **k: method(self, *a, **k))
            return fn(*args, **kwargs)
        finally:
            stack.pop()

    def init(self, rngs, *args, method=None, **kwargs):
        """{"params": the parameters __call__ creates on these inputs, and any other collection it makes
        ("batch_stats")}; rngs is a key or a dict of keys (the "params" key makes the parameters)."""
        return self.init_with_output(rngs, *args, method=method, **kwargs)[1]

    def init_with_output(self, rngs, *args, method=None, **kwargs):
        rngs = dict(rngs) if isinstance(rngs, dict) else {"params": rngs}
        _check_rngs(f"{type(self).__name__}.init", rngs)
        variables = {"params": {}}
        out = self._run(variables, "init", rngs, args, kwargs, method, mutable=True)
        made = {col: _pruned(tree) for col, tree in variables.items()}
        return out, {col: tree for col, tree in made.items() if tree or col == "params"}

    def apply(self, variables, *args, rngs=None, method=None, mutable=False, **kwargs):
        """__call__ (or method) with these variables; rngs names the keys of random streams ("dropout").
        mutable: the collections the call may update (a name, a list, or True for all but params); then it
        returns (output, {collection: its updated variables}). The variables given are never changed."""
        if "params" not in variables:  # a bare parameter tree
            variables = {"params": variables}
        if isinstance(mutable, str):
            mutable = [mutable]
        # Copies of the nested dicts, so that updates never reach the caller's variables.
        working = {col: _copied(tree) for col, tree in variables.items()}
        if mutable is True:
            mutable = [col for col in working if col != "params"]
        rngs = dict(rngs or {})
        _check_rngs(f"{type(self).__name__}.apply", rngs)
        out = self._run(working, "apply", rngs, args, kwargs, method, mutable=list(mutable or []))
        if not mutable:
            return out
        return out, {col: _pruned(working.get(col, {})) for col in mutable}


def _check_rngs(where, rngs):
    """Each rng a key: a u32[2] array (tessera.random.PRNGKey), as Flax refuses a seed where a key belongs."""
    for stream, key in rngs.items():
        if getattr(key, "shape", None) != (2,) or getattr(key, "dtype", None) != tnp.uint32:
            if hasattr(key, "shape"):
                got = f"an array of shape {tuple(key.shape)} and dtype {key.dtype}"
            else:
                got = f"{type(key).__name__} {key!r}"
            raise TypeError(f"{where}: the rng '{stream}' must be a key (a uint32 array of shape (2,)), got {got}; "
                            "make one with tessera.random.PRNGKey(seed)")


def _merge_param(module, name, field_value, call_value):
    """The value of a setting given to the module or to the call, as Flax's merge_param: it must be given
    exactly once; neither, or both (even if equal), is a ValueError."""
    if field_value is None and call_value is None:
        raise ValueError(f"{module}: say {name}, in the module or the call")
    if field_value is not None and call_value is not None:
        raise ValueError(f"{module}: {name.split(' ')[0]} was passed to the constructor ({field_value!r}) and at "
                         f"call time ({call_value!r}); pass it just once (Flax's merge_param)")
    return field_value if call_value is None else call_value


def _copied(tree):
    return {k: _copied(v) if isinstance(v, dict) else v for k, v in tree.items()}


# Module's own fields: name (keyword-only), given to every subclass by __init_subclass__.
Module.__annotations__ = {"name": Optional[str]}
Module.name = dataclasses.field(default=None, kw_only=True)
Module = dataclasses.dataclass(Module, eq=False)


def _cast(x, dtype):
    """x in dtype; x itself where it has it already (no cast in the program)."""
    return x if x._dtype_name == tnp._engine_dtype(dtype) else tnp.astype(x, dtype)


def _canonicalize_dtype(*args, dtype=None, inexact=True):
    """flax.linen.dtypes.canonicalize_dtype: dtype, or when None the result type of the args (None ignored),
    at least float32 when it must be inexact and they are integers."""
    if dtype is None:
        dtype = tnp.result_type(*[x for x in args if x is not None])
        if inexact and tnp._engine_dtype(dtype) not in tnp._FLOATING:
            dtype = tnp.promote_types(tnp.float32, dtype)
    dtype = tnp.dtype(dtype)
    if inexact and tnp._engine_dtype(dtype) not in tnp._FLOATING:
        raise ValueError(f"Dtype must be inexact: {dtype}")
    return dtype


def _promote_dtype(*args, dtype=None, inexact=True):
    """flax.linen.dtypes.promote_dtype: the args (None kept) cast to one dtype, dtype or their promoted one."""
    dtype = _canonicalize_dtype(*args, dtype=dtype, inexact=inexact)
    return [None if x is None else _cast(tnp.asarray(x), dtype) for x in args]


def _stats_dtype(x, dtype):
    """The dtype a norm's statistics are computed in (Flax's _compute_stats): dtype (x's when None) promoted
    to at least float32, so bfloat16 and float16 inputs are normalised in float32."""
    return tnp.promote_types(x.dtype if dtype is None else dtype, tnp.float32)


def _dot_general(module):
    """The dot_general a Dense-like module calls (its dot_general_cls made, or its dot_general), or None for
    the built-in product; precision is checked as lax checks it."""
    canonicalize_precision(module.precision)
    if module.dot_general_cls is not None:
        return module.dot_general_cls()
    return module.dot_general


def _bias_add(y, bias):
    # bf16 under autocast, as the product it joins (torch.autocast's linear)
    return y + _C.autocast_operand(bias)


class Dense(Module):
    """y = x @ kernel + bias; kernel: [in, features]. dtype, param_dtype, precision as flax.linen.Dense's; a
    dot_general (or a dot_general_cls, made per call) replaces the product: dot_general(x, kernel,
    (((x.ndim - 1,), (0,)), ((), ())), precision=precision)."""

    features: int
    use_bias: bool = True
    dtype: Optional[Any] = None
    param_dtype: Any = tnp.float32
    precision: Any = None
    kernel_init: Any = initializers.lecun_normal()
    bias_init: Any = initializers.zeros
    dot_general: Any = None
    dot_general_cls: Any = None

    @compact
    def __call__(self, x):
        x = tnp.asarray(x)
        kernel = self.param("kernel", self.kernel_init, (x.shape[-1], self.features), self.param_dtype)
        bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype) if self.use_bias else None
        x, kernel, bias = _promote_dtype(x, kernel, bias, dtype=self.dtype)
        dot = _dot_general(self)
        y = x @ kernel if dot is None else dot(x, kernel, (((x.ndim - 1,), (0,)), ((), ())), precision=self.precision)
        return y if bias is None else _bias_add(y, bias)


class Embed(Module):
    """Rows of embedding: [num_embeddings, features]; attend(q) = q @ embedding.T (tied output layers). As
    flax.linen.Embed: the table is made in param_dtype and read in dtype (None: its own); attend computes in
    dtype (None: the promoted dtype of the query and the table)."""

    num_embeddings: int
    features: int
    dtype: Optional[Any] = None
    param_dtype: Any = tnp.float32
    embedding_init: Any = initializers.normal(1.0)

    def _table(self):
        return self.param("embedding", self.embedding_init, (self.num_embeddings, self.features), self.param_dtype)

    @compact
    def __call__(self, ids):
        table, = _promote_dtype(self._table(), dtype=self.dtype, inexact=False)
        return tnp.take(table, ids, axis=0)  # negative ids count from the end, as jnp.take

    def attend(self, query):
        query, table = _promote_dtype(query, self._table(), dtype=self.dtype)
        return query @ table.T


def _scale_and_shift(module, x, y, shape, view=None):
    """y * scale + bias (parameters of this shape in param_dtype, reshaped to view to broadcast) in the module's
    dtype, None: the promoted dtype of x and the parameters (Flax's _normalize)."""
    args = [x]
    if module.use_scale:
        scale = module.param("scale", module.scale_init, shape, module.param_dtype)
        y = y * (scale if view is None else tnp.reshape(scale, view))
        args.append(scale)
    if getattr(module, "use_bias", False):
        bias = module.param("bias", module.bias_init, shape, module.param_dtype)
        y = y + (bias if view is None else tnp.reshape(bias, view))
        args.append(bias)
    return _cast(y, _canonicalize_dtype(*args, dtype=module.dtype))


def _widened(x, dtype):
    """x (f32 under autocast, as torch.autocast runs norms) and x in the dtype of its statistics."""
    x = _C.autocast_widen(tnp.asarray(x))
    return x, _cast(x, _stats_dtype(x, dtype))


class LayerNorm(Module):
    """(x - mean) / sqrt(var + epsilon) * scale + bias over the last axis."""

    epsilon: float = 1e-6
    dtype: Optional[Any] = None
    param_dtype: Any = tnp.float32
    use_bias: bool = True
    use_scale: bool = True
    bias_init: Any = initializers.zeros
    scale_init: Any = initializers.ones

    @compact
    def __call__(self, x):
        x, xs = _widened(x, self.dtype)
        mean = tnp.mean(xs, axis=-1, keepdims=True)
        d = xs - mean
        y = d / tnp.sqrt(tnp.mean(d * d, axis=-1, keepdims=True) + self.epsilon)
        return _scale_and_shift(self, x, y, (x.shape[-1],))


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + epsilon) * scale over the last axis (flax.linen.RMSNorm)."""

    epsilon: float = 1e-6
    dtype: Optional[Any] = None
    param_dtype: Any = tnp.float32
    use_scale: bool = True
    scale_init: Any = initializers.ones

    @compact
    def __call__(self, x):
        x, xs = _widened(x, self.dtype)
        y = xs / tnp.sqrt(tnp.mean(xs * xs, axis=-1, keepdims=True) + self.epsilon)
        return _scale_and_shift(self, x, y, (x.shape[-1],))


class GroupNorm(Module):
    """Normalises each example over the features of each of num_groups groups and the spatial dims (channels
    last, as flax.linen.GroupNorm), then scale and bias per feature."""

    num_groups: int = 32
    epsilon: float = 1e-6
    dtype: Optional[Any] = None
    param_dtype: Any = tnp.float32
    use_bias: bool = True
    use_scale: bool = True
    bias_init: Any = initializers.zeros
    scale_init: Any = initializers.ones

    @compact
    def __call__(self, x):
        x, xs = _widened(x, self.dtype)
        features = x.shape[-1]
        if not isinstance(self.num_groups, int) or isinstance(self.num_groups, bool) or self.num_groups <= 0:
            raise ValueError(f"GroupNorm: num_groups must be a positive integer, got {self.num_groups!r}")
        if features % self.num_groups:
            raise ValueError(f"GroupNorm: {features} features do not split into {self.num_groups} groups")
        grouped = xs.reshape(x.shape[:-1] + (self.num_groups, features // self.num_groups))
        axes = tuple(range(1, grouped.ndim - 2)) + (grouped.ndim - 1,)  # spatial dims and the group's features
        mean = tnp.mean(grouped, axis=axes, keepdims=True)
        d = grouped - mean
        y = (d / tnp.sqrt(tnp.mean(d * d, axis=axes, keepdims=True) + self.epsilon)).reshape(x.shape)
        return _scale_and_shift(self, x, y, (features,))


class BatchNorm(Module):
    """flax.linen.BatchNorm: normalises over every axis but the feature axis with the batch's statistics in
    training (use_running_average=False), and keeps their running averages in the "batch_stats" collection
    (mean, var: ra = momentum * ra + (1 - momentum) * batch value), which inference (use_running_average=True)
    normalises with. Training updates need apply(..., mutable=["batch_stats"]); init makes the statistics
    (zeros and ones) without updating them. Under data parallelism the statistics are the global batch's: the
    mean over the batch axis is one reduction of the program, whatever the batch's sharding."""

    use_running_average: Optional[bool] = None
    axis: int = -1
    momentum: float = 0.99
    epsilon: float = 1e-5
    dtype: Optional[Any] = None
    param_dtype: Any = tnp.float32
    use_bias: bool = True
    use_scale: bool = True
    bias_init: Any = initializers.zeros
    scale_init: Any = initializers.ones

    @compact
    def __call__(self, x, use_running_average=None):
        x_in, x = _widened(x, self.dtype)  # the statistics' dtype: float32 for bf16 inputs
        running = _merge_param("BatchNorm", "use_running_average (False to train on batch statistics, True for "
                               "inference)", self.use_running_average, use_running_average)
        axis = self.axis % x.ndim
        features = (x.shape[axis],)
        reduce = tuple(a for a in range(x.ndim) if a != axis)
        shape = tuple(x.shape[a] if a == axis else 1 for a in range(x.ndim))
        ra_mean = self.variable("batch_stats", "mean", lambda: tnp.zeros(features, tnp.float32))
        ra_var = self.variable("batch_stats", "var", lambda: tnp.ones(features, tnp.float32))
        scale = self.param("scale", self.scale_init, features, self.param_dtype) if self.use_scale else None
        bias = self.param("bias", self.bias_init, features, self.param_dtype) if self.use_bias else None
        out_dtype = _canonicalize_dtype(x_in, scale, bias, dtype=self.dtype)
        fused = not running and _C.fused_batch_norm_default() and x.dtype in (tnp.float32, tnp.float64)
        if fused:
            # One batch_norm_training op (oneDNN's primitive on the CPU), with TESSERA_FUSED_BATCH_NORM=on.
            def like_x(v, fill):
                return tnp.full(features, fill, x.dtype) if v is None else tnp.astype(v, x.dtype)

            y, mean, var = _C.batch_norm_training(x, like_x(scale, 1.0), like_x(bias, 0.0), float(self.epsilon),
                                                  axis)
        elif running:
            mean, var = ra_mean.value, ra_var.value
        else:
            mean = tnp.mean(x, axis=reduce)
            centred = x - tnp.reshape(mean, shape)
            var = tnp.mean(centred * centred, axis=reduce)
        if not running and not self.is_initializing():
            ra_mean.value = self.momentum * ra_mean.value + (1.0 - self.momentum) * mean
            ra_var.value = self.momentum * ra_var.value + (1.0 - self.momentum) * var
        if fused:
            return _cast(y, out_dtype)
        y = (x - tnp.reshape(mean, shape)) / tnp.sqrt(tnp.reshape(var, shape) + self.epsilon)
        if scale is not None:
            y = y * tnp.reshape(scale, shape)
        if bias is not None:
            y = y + tnp.reshape(bias, shape)
        return _cast(y, out_dtype)


def _conv_geometry(name, x, kernel_size):
    """The kernel's spatial size as a tuple and the layout letters of its spatial dims ("HW"), checking that x is
    [N, spatial..., C] for it. An int kernel_size k is the 1-d kernel (k,), as in Flax."""
    size = (kernel_size,) if isinstance(kernel_size, int) else tuple(kernel_size)
    n = len(size)
    if n > 3:
        raise ValueError(f"{name}: at most 3 spatial dims, got a {n}-d kernel")
    if x.ndim != n + 2:
        hint = (f" (kernel_size={kernel_size} is the 1-d kernel ({kernel_size},), as in Flax; give one size per "
                "spatial dim)" if isinstance(kernel_size, int) else "")
        raise ValueError(f"{name}: a {n}-d kernel needs [N, {n} spatial dims, C] inputs, got shape "
                         f"{tuple(x.shape)}{hint}")
    return size, "DHW"[3 - n:]


def _per_dim(name, what, value, n):
    """strides or kernel_dilation as n ints: None is 1 and one int is the same for every spatial dim (Flax's
    maybe_broadcast)."""
    if value is None:
        value = 1
    if isinstance(value, int):
        return (value,) * n
    value = tuple(value)
    if len(value) != n:
        raise ValueError(f"{name}: {what} {value} gives {len(value)} values for {n} spatial dims")
    return value


def _conv_padding(name, padding, n):
    """padding as lax takes it (Flax's canonicalize_padding): "SAME" or "VALID" as they are, an int p as (p, p)
    on every spatial dim, else one int or (low, high) pair per spatial dim."""
    if isinstance(padding, str):
        return padding
    if isinstance(padding, int):
        return [(padding, padding)] * n
    pads = list(padding)
    if len(pads) == n:
        out = [(p, p) if isinstance(p, int) else tuple(p) for p in pads]
        if all(len(p) == 2 for p in out):
            return out
    raise ValueError(f"{name}: padding {padding!r} is not 'SAME', 'VALID', an int or {n} ints or (low, high) pairs")


class Conv(Module):
    """A convolution over the dims between the batch and the features (flax.linen.Conv: inputs [N, spatial...,
    C], kernel [spatial..., C / feature_group_count, features]); padding "SAME", "VALID", an int (the same on
    every side) or one int or (low, high) pair per spatial dim; strides and kernel_dilation one int for every
    spatial dim or one per dim."""

    features: int
    kernel_size: Any
    strides: Any = None
    padding: Any = "SAME"
    kernel_dilation: Any = None
    feature_group_count: int = 1
    use_bias: bool = True
    dtype: Optional[Any] = None
    param_dtype: Any = tnp.float32
    precision: Any = None
    kernel_init: Any = initializers.lecun_normal()
    bias_init: Any = initializers.zeros
    conv_general_dilated: Any = None
    conv_general_dilated_cls: Any = None

    @compact
    def __call__(self, x):
        from . import lax
        x = tnp.asarray(x)
        size, spatial = _conv_geometry("Conv", x, self.kernel_size)
        n = len(size)
        channels = x.shape[-1]
        if channels % self.feature_group_count:
            raise ValueError(f"Conv: {channels} input features do not split into {self.feature_group_count} groups")
        kernel = self.param("kernel", self.kernel_init, size + (channels // self.feature_group_count, self.features),
                            self.param_dtype)
        bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype) if self.use_bias else None
        x, kernel, bias = _promote_dtype(x, kernel, bias, dtype=self.dtype)
        conv = (self.conv_general_dilated_cls() if self.conv_general_dilated_cls is not None else
                self.conv_general_dilated or lax.conv_general_dilated)
        y = conv(x, kernel, _per_dim("Conv", "strides", self.strides, n), _conv_padding("Conv", self.padding, n),
                 rhs_dilation=_per_dim("Conv", "kernel_dilation", self.kernel_dilation, n),
                 dimension_numbers=("N" + spatial + "C", spatial + "IO", "N" + spatial + "C"),
                 feature_group_count=self.feature_group_count, precision=self.precision)
        return y if bias is None else _bias_add(y, bias)


class ConvTranspose(Module):
    """flax.linen.ConvTranspose (lax.conv_transpose): the input dilated by the strides, then a stride-1
    convolution with the kernel [spatial..., in_features, features] as it is (transpose_kernel=True flips its
    spatial dims and swaps in and out, making it the gradient of Conv); "SAME" padding gives inputs * strides
    positions."""

    features: int
    kernel_size: Any
    strides: Any = None
    padding: Any = "SAME"
    kernel_dilation: Any = None
    use_bias: bool = True
    dtype: Optional[Any] = None
    param_dtype: Any = tnp.float32
    precision: Any = None
    kernel_init: Any = initializers.lecun_normal()
    bias_init: Any = initializers.zeros
    transpose_kernel: bool = False

    @compact
    def __call__(self, x):
        from . import lax
        x = tnp.asarray(x)
        size, spatial = _conv_geometry("ConvTranspose", x, self.kernel_size)
        n = len(size)
        in_features = x.shape[-1]
        kernel_shape = size + ((self.features, in_features) if self.transpose_kernel else (in_features, self.features))
        kernel = self.param("kernel", self.kernel_init, kernel_shape, self.param_dtype)
        bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype) if self.use_bias else None
        x, kernel, bias = _promote_dtype(x, kernel, bias, dtype=self.dtype)
        y = lax.conv_transpose(x, kernel, _per_dim("ConvTranspose", "strides", self.strides, n),
                               _conv_padding("ConvTranspose", self.padding, n),
                               rhs_dilation=_per_dim("ConvTranspose", "kernel_dilation", self.kernel_dilation, n),
                               dimension_numbers=("N" + spatial + "C", spatial + "IO", "N" + spatial + "C"),
                               transpose_kernel=self.transpose_kernel, precision=self.precision)
        return y if bias is None else _bias_add(y, bias)


class Upsample(Module):
    """Channels-last inputs [N, spatial..., C] resized by scale_factor (one number, or one per spatial dim) with
    tessera.image.resize: "nearest" or "linear" (bilinear for images). No parameters."""

    scale_factor: Any = 2
    method: str = "nearest"

    @compact
    def __call__(self, x):
        from . import image
        x = tnp.asarray(x)
        n = x.ndim - 2
        factors = tuple(self.scale_factor) if isinstance(self.scale_factor, (tuple, list)) else (self.scale_factor,) * n
        if len(factors) != n:
            raise ValueError(f"Upsample: {len(factors)} scale factors for {n} spatial dims")
        shape = (x.shape[0],) + tuple(int(round(d * f)) for d, f in zip(x.shape[1:-1], factors)) + (x.shape[-1],)
        return image.resize(x, shape, self.method)


class Dropout(Module):
    """flax.linen.Dropout: zeroes each value with probability rate and scales the others by 1 / (1 - rate),
    unless deterministic (given to the module or the call, exactly once, as Flax's merge_param). The mask comes
    from the rng argument or the rng_collection stream ("dropout"); broadcast_dims share one mask value along
    those dims (the same dropped features at every position)."""

    rate: float
    broadcast_dims: Sequence[int] = ()
    deterministic: Optional[bool] = None
    rng_collection: str = "dropout"

    @compact
    def __call__(self, x, deterministic=None, rng=None):
        x = tnp.asarray(x)
        deterministic = _merge_param("Dropout", "deterministic (True: no dropout)", self.deterministic,
                                     deterministic)
        if deterministic or self.rate == 0.0:
            return x
        if self.rate == 1.0:
            return tnp.zeros_like(x)  # as Flax: x / 0 in the unselected branch would give NaN gradients
        if rng is None:
            rng = self.make_rng(self.rng_collection)
        shape = list(x.shape)
        for dim in self.broadcast_dims:
            shape[dim] = 1
        keep = tnp.broadcast_to(random.bernoulli(rng, 1.0 - self.rate, tuple(shape)), x.shape)
        return tnp.where(keep, x / (1.0 - self.rate), 0.0)


class Sequential(Module):
    """Each layer on the output of the one before (layers_0, layers_1, ... in the parameters)."""

    layers: Any

    @compact
    def __call__(self, x, *args, **kwargs):
        for i, layer in enumerate(self.layers):
            x = layer(x, *args, **kwargs) if i == 0 else layer(x)
        return x


class DenseGeneral(Module):
    """A linear map over several input axes to a features shape (flax.linen.DenseGeneral): kernel
    [*x.shape[axis], *features], y = tensordot(x, kernel) + bias [*features]."""

    features: Any
    axis: Any = -1
    use_bias: bool = True
    dtype: Optional[Any] = None
    param_dtype: Any = tnp.float32
    kernel_init: Any = initializers.lecun_normal()
    bias_init: Any = initializers.zeros
    precision: Any = None
    dot_general: Any = None
    dot_general_cls: Any = None

    @compact
    def __call__(self, x):
        x = tnp.asarray(x)
        features = (self.features,) if isinstance(self.features, int) else tuple(self.features)
        axes = (self.axis,) if isinstance(self.axis, int) else tuple(self.axis)
        axes = tuple(a % x.ndim for a in axes)
        in_shape = tuple(x.shape[a] for a in axes)
        fan_in = math.prod(in_shape)
        # the kernel is made as a [fan_in, prod(features)] matrix (lecun_normal's fan), then shaped
        kernel = self.param("kernel", lambda key, shape, dtype: tnp.reshape(
            self.kernel_init(key, (fan_in, math.prod(features)), dtype), shape), in_shape + features,
            self.param_dtype)
        bias = self.param("bias", self.bias_init, features, self.param_dtype) if self.use_bias else None
        x, kernel, bias = _promote_dtype(x, kernel, bias, dtype=self.dtype)
        dot = _dot_general(self)
        contract = (axes, tuple(range(len(axes))))
        y = (tnp.tensordot(x, kernel, axes=(list(axes), list(range(len(axes))))) if dot is None else
             dot(x, kernel, (contract, ((), ())), precision=self.precision))
        return y if bias is None else _bias_add(y, bias)


class Einsum(Module):
    """einsum(einsum_str, x, kernel) with a kernel of shape (flax.linen.Einsum); the bias, if any, has the
    kernel's dims that the output keeps."""

    shape: Any
    einsum_str: str
    use_bias: bool = True
    dtype: Optional[Any] = None
    param_dtype: Any = tnp.float32
    precision: Any = None
    kernel_init: Any = initializers.lecun_normal()
    bias_init: Any = initializers.zeros

    @compact
    def __call__(self, x):
        spec = self.einsum_str.replace(" ", "")
        ins, out = spec.split("->")
        lhs, rhs = ins.split(",")
        if len(rhs) != len(self.shape):
            raise ValueError(f"Einsum: the kernel's subscripts {rhs!r} do not fit its shape {tuple(self.shape)}")
        kernel = self.param("kernel", self.kernel_init, tuple(self.shape), self.param_dtype)
        kept = [(c, d) for c, d in zip(rhs, self.shape) if c in out]
        bias = (self.param("bias", self.bias_init, tuple(d for _, d in kept), self.param_dtype) if self.use_bias
                else None)
        x, kernel, bias = _promote_dtype(x, kernel, bias, dtype=self.dtype)
        y = tnp.einsum(spec, x, kernel, precision=self.precision)
        if bias is not None:
            # the bias broadcast along the output's other dims
            y = y + tnp.reshape(bias, tuple(dict(kept).get(c, 1) for c in out))
        return y


class InstanceNorm(Module):
    """Each example's features normalized over its other (spatial) axes: every axis but the batch axis (0) and
    feature_axes, then scale and bias per feature (flax.linen.InstanceNorm)."""

    epsilon: float = 1e-6
    dtype: Optional[Any] = None
    param_dtype: Any = tnp.float32
    use_bias: bool = True
    use_scale: bool = True
    bias_init: Any = initializers.zeros
    scale_init: Any = initializers.ones
    feature_axes: Any = -1

    @compact
    def __call__(self, x):
        x, xs = _widened(x, self.dtype)
        feats = (self.feature_axes,) if isinstance(self.feature_axes, int) else tuple(self.feature_axes)
        feats = tuple(a % x.ndim for a in feats)
        reduce = tuple(a for a in range(1, x.ndim) if a not in feats)
        mean = tnp.mean(xs, axis=reduce, keepdims=True)
        d = xs - mean
        y = d / tnp.sqrt(tnp.mean(d * d, axis=reduce, keepdims=True) + self.epsilon)
        shape = tuple(x.shape[a] for a in feats)
        view = tuple(x.shape[a] if a in feats else 1 for a in range(x.ndim))
        return _scale_and_shift(self, x, y, shape, view)


class PReLU(Module):
    """x where x >= 0, else negative_slope * x, the slope a learned scalar in param_dtype, applied in x's dtype
    (flax.linen.PReLU)."""

    param_dtype: Any = tnp.float32
    negative_slope_init: float = 0.01

    @compact
    def __call__(self, x):
        x = tnp.asarray(x)
        slope = self.param("negative_slope",
                           lambda key, shape, dtype: tnp.full(shape, self.negative_slope_init, dtype), (),
                           self.param_dtype)
        return tnp.where(x >= 0, x, _cast(slope, x.dtype) * x)


# Attention (tessera/_linen_attention.py), which builds on the modules above.
from ._linen_attention import make_causal_mask, dot_product_attention, MultiHeadDotProductAttention  # noqa: E402
