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
its class and a counter (`Dense_0`); parameter paths join the names with dots (`blocks_0.attn.kernel`)."""

import dataclasses
import inspect
import math
import threading
import zlib
from typing import Any, Optional

from . import _tessera as _C
from . import numpy as tnp
from . import random

__all__ = ["Module", "compact", "Dense", "Embed", "LayerNorm", "RMSNorm", "GroupNorm", "Conv", "Dropout", "Sequential",
           "initializers",
           "MultiHeadDotProductAttention", "dot_product_attention", "make_causal_mask"]

_state = threading.local()


def _scope():
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else None


class _Scope:
    """One module's place in a run of init or apply: its path, its parameters (a dict of this module's own
    parameters and its children's dicts) and the naming of the children it calls."""

    def __init__(self, module, path, params, mode, rngs, parent=None):
        self.module, self.path, self.params, self.mode, self.rngs = module, path, params, mode, rngs
        self.parent = parent
        self.counters = {}
        self.rng_counts = {}
        self.set_up = False
        # id(child) -> (child, its name), so that a module called twice shares its parameters; holding the child
        # keeps its id from being reused by a later one.
        self.named = {}

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
        params = self.params.setdefault(name, {}) if self.mode == "init" else self.params.get(name, {})
        return _Scope(module, _join(self.path, name), params, self.mode, self.rngs, self)

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


# Module's own machinery, which runs in whatever scope is current.
_UNBOUND = {"setup", "param", "make_rng", "init", "init_with_output", "apply"}


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

    def make_rng(self, stream="dropout"):
        scope = _scope()
        return scope.rng(stream, scope.path)

    def _run(self, params, mode, rngs, args, kwargs, method):
        stack = getattr(_state, "stack", None)
        if stack is None:
            stack = _state.stack = []
        scope = _Scope(self, "", params, mode, rngs)
        stack.append(scope)
        try:
            self._setup_once(scope)
            fn = self.__call__ if method is None else (getattr(self, method) if isinstance(method, str) else
                                                       lambda *a, **k: method(self, *a, **k))
            return fn(*args, **kwargs)
        finally:
            stack.pop()

    def init(self, rngs, *args, method=None, **kwargs):
        """{"params": the parameters __call__ creates on these inputs}; rngs is a key or a dict of keys (the
        "params" key makes the parameters)."""
        rngs = dict(rngs) if isinstance(rngs, dict) else {"params": rngs}
        params = {}
        self._run(params, "init", rngs, args, kwargs, method)
        return {"params": _pruned(params)}

    def init_with_output(self, rngs, *args, method=None, **kwargs):
        rngs = dict(rngs) if isinstance(rngs, dict) else {"params": rngs}
        params = {}
        out = self._run(params, "init", rngs, args, kwargs, method)
        return out, {"params": _pruned(params)}

    def apply(self, variables, *args, rngs=None, method=None, **kwargs):
        """__call__ (or method) with these parameters; rngs names the keys of random streams ("dropout")."""
        params = variables["params"] if "params" in variables else variables
        return self._run(params, "apply", dict(rngs or {}), args, kwargs, method)


# Module's own fields: name (keyword-only), given to every subclass by __init_subclass__.
Module.__annotations__ = {"name": Optional[str]}
Module.name = dataclasses.field(default=None, kw_only=True)
Module = dataclasses.dataclass(Module, eq=False)


class initializers:
    """Parameter initializers, as jax.nn.initializers: each makes an init_fn(key, shape, dtype)."""

    @staticmethod
    def zeros(key, shape, dtype=tnp.float32):
        return tnp.zeros(shape, dtype)

    @staticmethod
    def ones(key, shape, dtype=tnp.float32):
        return tnp.ones(shape, dtype)

    @staticmethod
    def normal(stddev=1e-2):
        return lambda key, shape, dtype=tnp.float32: random.normal(key, shape, dtype) * stddev

    @staticmethod
    def lecun_normal():
        """Normal with variance 1 / fan_in (fan_in: the product of all dims but the last); not truncated."""

        def init(key, shape, dtype=tnp.float32):
            fan_in = math.prod(shape[:-1]) or 1
            return random.normal(key, shape, dtype) * (1.0 / math.sqrt(fan_in))

        return init


class Dense(Module):
    """y = x @ kernel + bias; kernel: [in, features]."""

    features: int
    use_bias: bool = True
    kernel_init: Any = initializers.lecun_normal()
    bias_init: Any = initializers.zeros

    @compact
    def __call__(self, x):
        x = tnp.asarray(x)
        kernel = self.param("kernel", self.kernel_init, (x.shape[-1], self.features))
        y = x @ kernel
        if self.use_bias:
            y = y + self.param("bias", self.bias_init, (self.features,))
        return y


class Embed(Module):
    """Rows of embedding: [num_embeddings, features]; attend(q) = q @ embedding.T (tied output layers)."""

    num_embeddings: int
    features: int
    embedding_init: Any = initializers.normal(1.0)

    @compact
    def __call__(self, ids):
        table = self.param("embedding", self.embedding_init, (self.num_embeddings, self.features))
        return _C.take(table, tnp.asarray(ids), 0)

    def attend(self, query):
        return tnp.asarray(query) @ self.param("embedding", self.embedding_init,
                                               (self.num_embeddings, self.features)).T


class LayerNorm(Module):
    """(x - mean) / sqrt(var + epsilon) * scale + bias over the last axis."""

    epsilon: float = 1e-6
    use_bias: bool = True
    use_scale: bool = True

    @compact
    def __call__(self, x):
        x = tnp.asarray(x)
        mean = tnp.mean(x, axis=-1, keepdims=True)
        d = x - mean
        y = d / tnp.sqrt(tnp.mean(d * d, axis=-1, keepdims=True) + self.epsilon)
        features = (x.shape[-1],)
        if self.use_scale:
            y = y * self.param("scale", initializers.ones, features)
        if self.use_bias:
            y = y + self.param("bias", initializers.zeros, features)
        return y


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + epsilon) * scale over the last axis (flax.linen.RMSNorm)."""

    epsilon: float = 1e-6
    use_scale: bool = True

    @compact
    def __call__(self, x):
        x = tnp.asarray(x)
        y = x / tnp.sqrt(tnp.mean(x * x, axis=-1, keepdims=True) + self.epsilon)
        if self.use_scale:
            y = y * self.param("scale", initializers.ones, (x.shape[-1],))
        return y


class GroupNorm(Module):
    """Normalises each example over the features of each of num_groups groups and the spatial dims (channels
    last, as flax.linen.GroupNorm), then scale and bias per feature."""

    num_groups: int = 32
    epsilon: float = 1e-6
    use_bias: bool = True
    use_scale: bool = True

    @compact
    def __call__(self, x):
        x = tnp.asarray(x)
        features = x.shape[-1]
        if features % self.num_groups:
            raise ValueError(f"GroupNorm: {features} features do not split into {self.num_groups} groups")
        grouped = x.reshape(x.shape[:-1] + (self.num_groups, features // self.num_groups))
        axes = tuple(range(1, grouped.ndim - 2)) + (grouped.ndim - 1,)  # spatial dims and the group's features
        mean = tnp.mean(grouped, axis=axes, keepdims=True)
        d = grouped - mean
        y = (d / tnp.sqrt(tnp.mean(d * d, axis=axes, keepdims=True) + self.epsilon)).reshape(x.shape)
        if self.use_scale:
            y = y * self.param("scale", initializers.ones, (features,))
        if self.use_bias:
            y = y + self.param("bias", initializers.zeros, (features,))
        return y


class Conv(Module):
    """A convolution over the dims between the batch and the features (flax.linen.Conv: inputs [N, spatial...,
    C], kernel [spatial..., C / feature_group_count, features]); padding "SAME", "VALID" or (low, high) pairs."""

    features: int
    kernel_size: Any
    strides: Any = None
    padding: Any = "SAME"
    kernel_dilation: Any = None
    feature_group_count: int = 1
    use_bias: bool = True
    kernel_init: Any = initializers.lecun_normal()
    bias_init: Any = initializers.zeros

    @compact
    def __call__(self, x):
        from . import lax
        x = tnp.asarray(x)
        size = tuple(self.kernel_size)
        n = len(size)
        if x.ndim != n + 2:
            raise ValueError(f"Conv: a {n}-d kernel needs [N, {n} spatial dims, C] inputs, got shape {tuple(x.shape)}")
        channels = x.shape[-1]
        if channels % self.feature_group_count:
            raise ValueError(f"Conv: {channels} input features do not split into {self.feature_group_count} groups")
        kernel = self.param("kernel", self.kernel_init, size + (channels // self.feature_group_count, self.features))
        spatial = "DHW"[3 - n:] if n <= 3 else None
        if spatial is None:
            raise ValueError("Conv: at most 3 spatial dims")
        y = lax.conv_general_dilated(x, kernel, self.strides or (1,) * n, self.padding,
                                     rhs_dilation=self.kernel_dilation,
                                     dimension_numbers=("N" + spatial + "C", spatial + "IO", "N" + spatial + "C"),
                                     feature_group_count=self.feature_group_count)
        if self.use_bias:
            y = y + self.param("bias", self.bias_init, (self.features,))
        return y


class Dropout(Module):
    """Zeroes each value with probability rate and scales the others by 1 / (1 - rate), unless deterministic;
    the mask comes from the "dropout" rng stream."""

    rate: float
    deterministic: Optional[bool] = None

    @compact
    def __call__(self, x, deterministic=None):
        x = tnp.asarray(x)
        deterministic = self.deterministic if deterministic is None else deterministic
        if deterministic or self.rate == 0.0:
            return x
        keep = random.bernoulli(self.make_rng("dropout"), 1.0 - self.rate, x.shape)
        return tnp.where(keep, x / (1.0 - self.rate), 0.0)


class Sequential(Module):
    """Each layer on the output of the one before (layers_0, layers_1, ... in the parameters)."""

    layers: Any

    @compact
    def __call__(self, x, *args, **kwargs):
        for i, layer in enumerate(self.layers):
            x = layer(x, *args, **kwargs) if i == 0 else layer(x)
        return x


def make_causal_mask(x):
    """[B, 1, L, L] booleans, true where key position <= query position, for x: [B, L]."""
    length = x.shape[1]
    rows = _C.iota([length, length], 0, "i32")
    cols = _C.iota([length, length], 1, "i32")
    return tnp.broadcast_to(cols <= rows, (x.shape[0], 1, length, length))


def dot_product_attention(query, key, value, mask=None):
    """softmax(q k^T / sqrt(d)) v per head; query: [B, Q, H, D], key and value: [B, K, H, D], mask broadcasting
    to [B, H, Q, K] (false: not attended). Returns [B, Q, H, D]."""
    depth = query.shape[-1]
    logits = tnp.einsum("bqhd,bkhd->bhqk", query, key) / math.sqrt(depth)
    if mask is not None:
        logits = tnp.where(mask, logits, -1e30)
    weights = _C.softmax(logits, -1)
    return tnp.einsum("bhqk,bkhd->bqhd", weights, value)


class MultiHeadDotProductAttention(Module):
    """Multi-head attention over [B, L, F] inputs: query, key and value projections (Dense to qkv_features,
    split into num_heads), dot_product_attention, and the out projection. Unlike Flax's DenseGeneral kernels
    ([F, H, D]), the projections' kernels are [F, H * D]."""

    num_heads: int
    qkv_features: Optional[int] = None
    out_features: Optional[int] = None
    use_bias: bool = True

    @compact
    def __call__(self, inputs_q, inputs_kv=None, mask=None):
        inputs_q = tnp.asarray(inputs_q)
        inputs_kv = inputs_q if inputs_kv is None else tnp.asarray(inputs_kv)
        features = self.qkv_features or inputs_q.shape[-1]
        if features % self.num_heads:
            raise ValueError(f"MultiHeadDotProductAttention: {features} features do not split into "
                             f"{self.num_heads} heads")
        head_dim = features // self.num_heads

        def heads(x, name):
            y = Dense(features, use_bias=self.use_bias, name=name)(x)  # [B, L, H * D]
            return tnp.reshape(y, (y.shape[0], y.shape[1], self.num_heads, head_dim))

        q, k, v = heads(inputs_q, "query"), heads(inputs_kv, "key"), heads(inputs_kv, "value")
        out = dot_product_attention(q, k, v, mask)  # [B, Q, H, D]
        out = tnp.reshape(out, (out.shape[0], out.shape[1], features))
        return Dense(self.out_features or inputs_q.shape[-1], use_bias=self.use_bias, name="out")(out)
