"""tessera.export, as jax.export: a function's program for given argument shapes and dtypes, as text that stands
alone (Tessera's IR, its constants written in), which serialize() turns into bytes and deserialize() turns back
into a function that another process calls without the Python that defined it.

    exp = tessera.export.export(tessera.jit(f))(tessera.ShapeDtypeStruct((8, 784), "float32"), params)
    blob = exp.serialize()                  # bytes: a file, a database, another machine
    out = tessera.export.deserialize(blob).call(x, params)

The exported function is an ordinary one of the engine's ops: it runs eagerly, under jit, grad, vmap and the
rest (its derivative is the program's own, so there is no vjp_order to choose, unlike JAX). Static arguments of a
jitted function are fixed at export (their values are part of the program) and left out of call's arguments, as
in JAX. mlir_module() returns the program's text (`tessera ir` and `tessera compile` read it). A function that calls
back into Python (debug.print, pure_callback, io_callback, shard_map) cannot be exported. Pytrees of tuples, lists,
dicts and None travel; other node types do not.
"""

import json

from . import _tessera as _C
from .numpy import asarray
from .tree_util import tree_flatten, tree_unflatten

__all__ = ["Exported", "export", "deserialize"]

_FORMAT = "tessera.export"
_VERSION = 1


class _Aval:
    """An argument's or result's shape and dtype (JAX's ShapedArray, as exported functions report them)."""

    def __init__(self, shape, dtype_name):
        from ._np_base import dtype
        self.shape = tuple(int(d) for d in shape)
        self._dtype_name = dtype_name  # the engine's: "f32"
        self.dtype = dtype(dtype_name)  # numpy's (tessera.numpy.bfloat16 for bf16), as arrays give it
        self.ndim = len(self.shape)

    def __eq__(self, other):
        return isinstance(other, _Aval) and (self.shape, self._dtype_name) == (other.shape, other._dtype_name)

    def __hash__(self):
        return hash((self.shape, self._dtype_name))

    def __repr__(self):
        return f"{self._dtype_name}[{','.join(map(str, self.shape))}]"


def _tree_json(treedef):
    """treedef as JSON-able nested lists: ["*"] a leaf, ["none"], ["tuple", children], ["list", children],
    ["dict", keys, children]."""
    marks = tree_unflatten(treedef, [_Leaf()] * treedef.num_leaves)
    return _node_json(marks)


class _Leaf:
    pass


def _node_json(x):
    if isinstance(x, _Leaf):
        return ["*"]
    if x is None:
        return ["none"]
    if type(x) is tuple:
        return ["tuple", [_node_json(c) for c in x]]
    if type(x) is list:
        return ["list", [_node_json(c) for c in x]]
    if type(x) is dict:
        keys = sorted(x)
        if not all(isinstance(k, str) for k in keys):
            raise TypeError(f"export: dict keys {keys!r} cannot be serialized (only string keys)")
        return ["dict", keys, [_node_json(x[k]) for k in keys]]
    raise TypeError(f"export: a pytree node of type {type(x).__name__} cannot be serialized (tuples, lists, dicts "
                    "of string keys and None can)")


def _tree_from_json(node):
    """The treedef _tree_json wrote."""
    def build(n):
        kind = n[0]
        if kind == "*":
            return 0
        if kind == "none":
            return None
        if kind == "tuple":
            return tuple(build(c) for c in n[1])
        if kind == "list":
            return [build(c) for c in n[1]]
        if kind == "dict":
            return {k: build(c) for k, c in zip(n[1], n[2])}
        raise ValueError(f"export: unknown pytree node {kind!r} in a serialized program")
    return tree_flatten(build(node))[1]


class Exported:
    """A function exported for its arguments' shapes and dtypes (jax.export.Exported): fun_name, in_tree and
    in_avals (the dynamic arguments, as ((args...), {kwargs})), out_tree and out_avals; call(*args, **kwargs),
    serialize(), mlir_module() (the program's IR text)."""

    nr_devices = 1
    platforms = ("cpu",)

    def __init__(self, fun_name, in_tree, out_tree, text):
        self.fun_name = fun_name
        self.in_tree = in_tree
        self.out_tree = out_tree
        self._text = text
        self._program = _C.LoadedProgram(text)
        self.in_avals = tuple(_Aval(s, d) for s, d in self._program.in_avals)
        self.out_avals = tuple(_Aval(s, d) for s, d in self._program.out_avals)
        if len(self.in_avals) != in_tree.num_leaves or len(self.out_avals) != out_tree.num_leaves:
            raise ValueError(f"export({fun_name}): the program's {len(self.in_avals)} inputs and "
                             f"{len(self.out_avals)} outputs do not match its trees {in_tree} and {out_tree}")
        self._jitted = None

    def __repr__(self):
        return f"Exported({self.fun_name}: {list(self.in_avals)} -> {list(self.out_avals)})"

    def mlir_module(self):
        """The program as text: Tessera's IR (JAX's method name; it is not MLIR)."""
        return self._text

    def call(self, *args, **kwargs):
        """The program on these arguments, which must have the exported tree, shapes and dtypes."""
        leaves, tree = tree_flatten((args, kwargs))
        if tree != self.in_tree:
            raise ValueError(f"export({self.fun_name}): called with arguments of structure {tree}, but it was "
                             f"exported for {self.in_tree}")
        arrays = [asarray(x) for x in leaves]
        for i, (a, want) in enumerate(zip(arrays, self.in_avals)):
            if tuple(a.shape) != want.shape or a._dtype_name != want._dtype_name:
                raise ValueError(f"export({self.fun_name}): argument leaf {i} is {_Aval(a.shape, a._dtype_name)}, "
                                 f"but it was exported for {want}")
        if self._jitted is None:
            from ._transforms import jit
            program = self._program

            def run(*xs):
                return program.apply(list(xs))

            run.__name__ = self.fun_name
            self._jitted = jit(run)
        return tree_unflatten(self.out_tree, list(self._jitted(*arrays)))

    def serialize(self, vjp_order=0):
        """The exported function as bytes that deserialize() reads back (vjp_order is accepted for JAX's
        signature: the program's derivative comes with it at every order)."""
        doc = {"format": _FORMAT, "version": _VERSION, "fun_name": self.fun_name,
               "in_tree": _tree_json(self.in_tree), "out_tree": _tree_json(self.out_tree), "program": self._text}
        return bytearray(json.dumps(doc).encode("utf-8"))


def export(fun_jit, *, platforms=None, disabled_checks=()):
    """jax.export.export: fun_jit (a tessera.jit function, or a plain one) exported for the arguments of the
    returned function's call: arrays or ShapeDtypeStructs (their shapes and dtypes are what matters), and the
    values of fun_jit's static arguments, which are fixed in the program."""
    if platforms is not None and any(p not in ("cpu",) for p in platforms):
        raise ValueError(f"export: platforms {tuple(platforms)}: Tessera exports for 'cpu' (the program itself "
                         "is the same on every backend)")
    from ._transforms import _Jitted

    jitted = fun_jit if isinstance(fun_jit, _Jitted) else None
    fun = jitted._fun if jitted is not None else fun_jit
    name = getattr(fun, "__name__", "fun")

    def do_export(*args, **kwargs):
        if jitted is not None:
            dynamic, statics = jitted._split(args, kwargs)
        else:
            dynamic, statics = (tuple(args), dict(kwargs)), ()
        leaves, in_tree = tree_flatten(dynamic)
        avals = []
        for x in leaves:
            if not (hasattr(x, "shape") and hasattr(x, "dtype")):
                x = asarray(x)  # a Python number
            avals.append(([int(d) for d in x.shape], _dtype_of(x)))
        state = {}

        def flat(xs):
            if jitted is not None:
                a, kw = jitted._rebuild(list(xs), in_tree, statics)
            else:
                a, kw = tree_unflatten(in_tree, list(xs))
            out_leaves, state["out_tree"] = tree_flatten(fun(*a, **kw))
            return [asarray(o) for o in out_leaves]

        text = _C.export_text(flat, avals, name)
        return Exported(name, in_tree, state["out_tree"], text)

    return do_export


def _dtype_of(x):
    """The engine's name for x's dtype (an array's, a numpy dtype's, a ShapeDtypeStruct's)."""
    from .numpy import _engine_dtype
    name = getattr(x, "_dtype_name", None)
    return name if name is not None else _engine_dtype(x.dtype)


def deserialize(blob):
    """jax.export.deserialize: the Exported that serialize() wrote."""
    try:
        doc = json.loads(bytes(blob).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"export.deserialize: not a serialized Tessera program ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
        raise ValueError("export.deserialize: not a serialized Tessera program")
    if doc.get("version") != _VERSION:
        raise ValueError(f"export.deserialize: format version {doc.get('version')}, this Tessera reads {_VERSION}")
    return Exported(doc["fun_name"], _tree_from_json(doc["in_tree"]), _tree_from_json(doc["out_tree"]),
                    doc["program"])
