"""Pytrees, as in jax.tree_util: nested tuples, lists, dicts (keys sorted), OrderedDicts (keys in insertion
order), defaultdicts (keys sorted, the factory kept), namedtuples, None and registered types
(register_pytree_node, register_dataclass), with any other value as a leaf. None is an empty node, not a leaf,
as in JAX. Node types are matched exactly, as JAX's registry does: a subclass of dict, list or tuple that is not
registered (a namedtuple aside) is a leaf."""

import collections
import dataclasses
import functools
import operator

__all__ = ["PyTreeDef", "tree_flatten", "tree_unflatten", "tree_leaves", "tree_structure", "tree_map",
           "register_pytree_node", "register_dataclass", "register_pytree_node_class", "register_static",
           "tree_reduce", "tree_all", "tree_transpose", "all_leaves", "treedef_is_leaf", "Partial",
           "tree_flatten_with_path", "tree_leaves_with_path", "tree_map_with_path", "keystr", "SequenceKey",
           "DictKey", "GetAttrKey", "FlattenedIndexKey", "register_pytree_with_keys", "register_pytree_with_keys_class",
           "tree_broadcast", "flatten_one_level", "treedef_children", "treedef_tuple", "KeyEntry", "KeyPath"]

# type -> (flatten(x) -> (children, aux data), unflatten(aux data, children) -> x)
_registry = {}


def register_pytree_node(nodetype, flatten_func, unflatten_func):
    """jax.tree_util.register_pytree_node: flatten_func(x) -> (children, aux_data) with aux_data hashable;
    unflatten_func(aux_data, children) -> x."""
    _registry[nodetype] = (flatten_func, unflatten_func)


def register_dataclass(nodetype, data_fields=None, meta_fields=None):
    """jax.tree_util.register_dataclass: data_fields are children, meta_fields part of the structure (static).
    Without lists, every field is a child. Usable as a decorator."""
    if data_fields is None:
        data_fields = [f.name for f in dataclasses.fields(nodetype)]
        meta_fields = meta_fields or []
    data_fields, meta_fields = list(data_fields), list(meta_fields or [])

    def flatten(x):
        return [getattr(x, f) for f in data_fields], tuple(getattr(x, f) for f in meta_fields)

    def unflatten(meta, children):
        return nodetype(**dict(zip(data_fields, children)), **dict(zip(meta_fields, meta)))

    register_pytree_node(nodetype, flatten, unflatten)
    _attribute_keys[nodetype] = data_fields
    return nodetype


# A registered type whose children are its attributes (register_dataclass): their names, for key paths.
_attribute_keys = {}


def register_pytree_node_class(cls):
    """jax.tree_util.register_pytree_node_class: cls has tree_flatten(self) -> (children, aux) and a
    classmethod tree_unflatten(aux, children). Usable as a decorator."""
    register_pytree_node(cls, operator.methodcaller("tree_flatten"), cls.tree_unflatten)
    return cls


def register_static(cls):
    """jax.tree_util.register_static: instances are nodes with no children, their value part of the structure
    (they must be hashable), so jit treats them as static."""
    register_pytree_node(cls, lambda x: ((), x), lambda aux, _: aux)
    return cls


def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


class PyTreeDef:
    """The structure of a pytree without its leaves: hashable and comparable, so it can key a cache."""

    __slots__ = ("kind", "data", "_kids", "dict_type")

    def __init__(self, kind, data=None, children=(), dict_type=None):
        self.kind = kind  # "leaf", "none", "tuple", "list", "dict", "namedtuple", "custom"
        # dict: its keys in flatten order (sorted; an OrderedDict's own order); namedtuple: the type; custom: (the
        # type, its aux data)
        self.data = data
        self._kids = tuple(children)
        # A dict node's mapping when it is not a plain dict: OrderedDict, or (defaultdict, its default_factory).
        self.dict_type = dict_type

    @property
    def num_nodes(self):
        return 1 + sum(c.num_nodes for c in self._kids)

    def children(self):
        return list(self._kids)

    def unflatten(self, leaves):
        return tree_unflatten(self, leaves)

    def flatten_up_to(self, tree):
        """The subtrees of tree at this structure's leaves (this structure must be a prefix of tree's)."""
        out = []
        _flatten_up_to(self, tree, out, "flatten_up_to")
        return out

    @property
    def num_leaves(self):
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self._kids)

    def _key(self):
        return (self.kind, self.data, self._kids, self.dict_type)

    def __eq__(self, other):
        return isinstance(other, PyTreeDef) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"PyTreeDef({self._text()})"

    def _text(self):
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = [c._text() for c in self._kids]
        if self.kind == "tuple":
            return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"
        if self.kind == "list":
            return "[" + ", ".join(inner) + "]"
        if self.kind == "dict":
            text = "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(self.data, inner)) + "}"
            if self.dict_type is collections.OrderedDict:
                return f"OrderedDict({text})"
            if self.dict_type is not None:
                return f"defaultdict({self.dict_type[1]!r}, {text})"
            return text
        if self.kind == "custom":
            return f"{self.data[0].__name__}[{self.data[1]!r}](" + ", ".join(inner) + ")"
        return f"{self.data.__name__}(" + ", ".join(inner) + ")"


def _flatten(tree, leaves, is_leaf):
    if is_leaf is not None and is_leaf(tree):
        leaves.append(tree)
        return PyTreeDef("leaf")
    if tree is None:
        return PyTreeDef("none")
    registered = _registry.get(type(tree))
    if registered is not None:
        children, aux = registered[0](tree)
        return PyTreeDef("custom", (type(tree), aux), [_flatten(c, leaves, is_leaf) for c in children])
    if _is_namedtuple(tree):
        return PyTreeDef("namedtuple", type(tree), [_flatten(c, leaves, is_leaf) for c in tree])
    # Exact types, as JAX's registry: a subclass of tuple (other than a namedtuple), list or dict is a leaf
    # unless it is registered itself.
    node_type = type(tree)
    if node_type is tuple or node_type is list:
        kind = "tuple" if node_type is tuple else "list"
        return PyTreeDef(kind, None, [_flatten(c, leaves, is_leaf) for c in tree])
    if node_type in (dict, collections.OrderedDict, collections.defaultdict):
        dict_type = None
        if node_type is collections.OrderedDict:
            dict_type = collections.OrderedDict
        elif node_type is collections.defaultdict:
            dict_type = (collections.defaultdict, tree.default_factory)
        keys = tuple(tree) if dict_type is collections.OrderedDict else tuple(sorted(tree))
        return PyTreeDef("dict", keys, [_flatten(tree[k], leaves, is_leaf) for k in keys], dict_type)
    leaves.append(tree)
    return PyTreeDef("leaf")


def tree_flatten(tree, is_leaf=None):
    """Returns (leaves, treedef): the leaves in order (dicts by sorted key, OrderedDicts in their own order) and
    the structure."""
    leaves = []
    treedef = _flatten(tree, leaves, is_leaf)
    return leaves, treedef


def _build(treedef, it):
    kind = treedef.kind
    if kind == "leaf":
        return next(it)
    if kind == "none":
        return None
    children = [_build(c, it) for c in treedef._kids]
    if kind == "tuple":
        return tuple(children)
    if kind == "list":
        return children
    if kind == "dict":
        items = zip(treedef.data, children)
        if treedef.dict_type is None:
            return dict(items)
        if treedef.dict_type is collections.OrderedDict:
            return collections.OrderedDict(items)
        return collections.defaultdict(treedef.dict_type[1], items)
    if kind == "custom":
        nodetype, aux = treedef.data
        return _registry[nodetype][1](aux, children)
    return treedef.data(*children)


def tree_unflatten(treedef, leaves):
    """Rebuilds a pytree of treedef's structure from leaves in flatten order."""
    leaves = list(leaves)
    if len(leaves) != treedef.num_leaves:
        raise ValueError(f"tree_unflatten: {treedef} has {treedef.num_leaves} leaves, {len(leaves)} were given")
    return _build(treedef, iter(leaves))


def tree_leaves(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[1]


def _node_children(treedef, tree):
    """tree's children if tree is a node of treedef's kind and keys, else None."""
    kind = treedef.kind
    if kind == "none":
        return () if tree is None else None
    if kind in ("tuple", "list"):
        ok = type(tree) is (tuple if kind == "tuple" else list) and len(tree) == len(treedef._kids)
        return list(tree) if ok else None
    if kind == "namedtuple":
        return list(tree) if type(tree) is treedef.data else None
    if kind == "dict":
        dict_type = treedef.dict_type[0] if isinstance(treedef.dict_type, tuple) else treedef.dict_type
        if type(tree) is not (dict_type or dict) or set(tree) != set(treedef.data):
            return None
        return [tree[k] for k in treedef.data]
    if kind == "custom":
        nodetype, aux = treedef.data
        if type(tree) is not nodetype:
            return None
        children, tree_aux = _registry[nodetype][0](tree)
        return list(children) if tree_aux == aux and len(children) == len(treedef._kids) else None
    return None


def _flatten_up_to(treedef, tree, out, name):
    """Appends to out the subtrees of tree at treedef's leaves (treedef must be a prefix of tree's structure)."""
    if treedef.kind == "leaf":
        out.append(tree)
        return
    children = _node_children(treedef, tree)
    if children is None:
        raise ValueError(f"{name}: structures differ: {treedef} is not a prefix of the structure of {tree!r}")
    for c, sub in zip(children, treedef._kids):
        _flatten_up_to(sub, c, out, name)


def _prefix_per_leaf(prefix, tree, is_leaf, name):
    """The leaf of prefix (a tree prefix of tree whose leaves is_leaf picks: in_axes' ints, shard_map's specs)
    above each leaf of tree, in flatten order."""
    prefix_leaves, prefix_def = tree_flatten(prefix, is_leaf=is_leaf)
    subtrees = []
    _flatten_up_to(prefix_def, tree, subtrees, name)
    out = []
    for p, sub in zip(prefix_leaves, subtrees):
        out += [p] * len(tree_flatten(sub)[0])
    return out


def tree_map(f, tree, *rest, is_leaf=None):
    """f applied to the leaves of tree and the matching subtrees of each tree in rest, whose structures must
    have tree's as a prefix (jax.tree_util.tree_map: tree_map(f, [1, 2], [(3, 4), 5]) calls f(1, (3, 4)))."""
    leaves, treedef = tree_flatten(tree, is_leaf)
    others = []
    for r in rest:
        r_leaves = []
        _flatten_up_to(treedef, r, r_leaves, "tree_map")
        others.append(r_leaves)
    return tree_unflatten(treedef, [f(*xs) for xs in zip(leaves, *others)])


_MISSING = object()


def tree_reduce(function, tree, initializer=_MISSING, is_leaf=None):
    leaves = tree_leaves(tree, is_leaf)
    if initializer is _MISSING:
        return functools.reduce(function, leaves)
    return functools.reduce(function, leaves, initializer)


def tree_all(tree, *, is_leaf=None):
    return all(tree_leaves(tree, is_leaf))


def treedef_is_leaf(treedef):
    return treedef.kind == "leaf"


def all_leaves(iterable, is_leaf=None):
    """Whether each element is a leaf by itself."""
    return all(tree_structure(x, is_leaf).kind == "leaf" for x in iterable)


def tree_transpose(outer_treedef, inner_treedef, pytree_to_transpose):
    """An outer structure of inner structures turned into an inner structure of outer structures."""
    outers = outer_treedef.flatten_up_to(pytree_to_transpose)
    inners = [inner_treedef.flatten_up_to(x) for x in outers]
    columns = [list(col) for col in zip(*inners)] if inners else [[] for _ in range(inner_treedef.num_leaves)]
    return tree_unflatten(inner_treedef, [tree_unflatten(outer_treedef, col) for col in columns])


class Partial(functools.partial):
    """jax.tree_util.Partial: a functools.partial that is a pytree (its arguments are the children, the
    function the structure), so it can be passed through jit and other transformations."""

    def __new__(cls, func, *args, **kwargs):
        if isinstance(func, functools.partial):  # flattened, as functools.partial does for its own kind
            args = func.args + args
            kwargs = {**func.keywords, **kwargs}
            func = func.func
        return super().__new__(cls, func, *args, **kwargs)


register_pytree_node(Partial, lambda p: ((p.args, p.keywords), p.func),
                     lambda func, children: Partial(func, *children[0], **children[1]))


# ---- key paths ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SequenceKey:
    idx: int

    def __str__(self):
        return f"[{self.idx!r}]"


@dataclasses.dataclass(frozen=True)
class DictKey:
    key: object

    def __str__(self):
        return f"[{self.key!r}]"


@dataclasses.dataclass(frozen=True)
class GetAttrKey:
    name: str

    def __str__(self):
        return f".{self.name}"


@dataclasses.dataclass(frozen=True)
class FlattenedIndexKey:
    key: int

    def __str__(self):
        return f"[<flat index {self.key}>]"


def keystr(keys):
    """A key path as text: "['a'][0].b"."""
    return "".join(str(k) for k in keys)


# A registered type whose flatten gives (key, child) pairs (register_pytree_with_keys): the function, for key paths.
_key_flatteners = {}


def register_pytree_with_keys(nodetype, flatten_with_keys, unflatten_func, flatten_func=None):
    """jax.tree_util.register_pytree_with_keys: flatten_with_keys(x) -> ([(key, child), ...], aux_data); the keys
    are what key paths (tree_flatten_with_path) show for the children. flatten_func, if given, flattens without
    keys (faster); else the keys are dropped."""
    if flatten_func is None:
        def flatten_func(x):
            pairs, aux = flatten_with_keys(x)
            return [child for _, child in pairs], aux
    register_pytree_node(nodetype, flatten_func, unflatten_func)
    _key_flatteners[nodetype] = flatten_with_keys
    return nodetype


def register_pytree_with_keys_class(cls):
    """As register_pytree_with_keys, from cls's tree_flatten_with_keys(self) method and tree_unflatten
    classmethod (tree_flatten too, if it has one). Usable as a decorator."""
    flatten = operator.methodcaller("tree_flatten") if hasattr(cls, "tree_flatten") else None
    return register_pytree_with_keys(cls, operator.methodcaller("tree_flatten_with_keys"), cls.tree_unflatten, flatten)


KeyEntry = object  # any of the key classes below (or a registered type's own keys)
KeyPath = tuple    # a tuple of KeyEntry


def treedef_children(treedef):
    """The structures of a node's children."""
    return treedef.children()


def treedef_tuple(treedefs):
    """The structure of a tuple whose children have the given structures."""
    return PyTreeDef("tuple", None, tuple(treedefs))


def flatten_one_level(tree):
    """(children, node data): the immediate children of tree's root node and what identifies the node (its
    type and the keys or aux data that are not children). A leaf raises ValueError, as in JAX."""
    treedef = tree_structure(tree, is_leaf=lambda x: x is not tree)
    if treedef.kind == "leaf":
        raise ValueError(f"flatten_one_level: {type(tree).__name__} is a leaf, not a pytree node")
    return _node_children(treedef, tree), (treedef.kind, treedef.data)


def tree_broadcast(prefix_tree, full_tree, is_leaf=None):
    """full_tree's structure with each subtree under a leaf of prefix_tree replaced by copies of that leaf
    (prefix_tree must be a prefix of full_tree's structure)."""
    prefix_def = tree_structure(prefix_tree, is_leaf)
    subtrees = prefix_def.flatten_up_to(full_tree)
    leaves = tree_leaves(prefix_tree, is_leaf)
    return tree_unflatten(prefix_def, [tree_map(lambda _, x=x: x, sub, is_leaf=is_leaf)
                                       for x, sub in zip(leaves, subtrees)])


def _child_keys(tree, treedef):
    """The key of each child of the node tree (of structure treedef)."""
    kind = treedef.kind
    if kind in ("tuple", "list"):
        return [SequenceKey(i) for i in range(len(treedef._kids))]
    if kind == "dict":
        return [DictKey(k) for k in treedef.data]
    if kind == "namedtuple":
        return [GetAttrKey(f) for f in type(tree)._fields]
    if kind == "custom":
        names = _attribute_keys.get(treedef.data[0])
        if names is not None:
            return [GetAttrKey(n) for n in names]
        with_keys = _key_flatteners.get(treedef.data[0])
        if with_keys is not None:
            return [key for key, _ in with_keys(tree)[0]]
    return [FlattenedIndexKey(i) for i in range(len(treedef._kids))]


def _with_paths(tree, treedef, path, out):
    if treedef.kind == "leaf":
        out.append((path, tree))
        return
    children = _node_children(treedef, tree)
    for key, child, sub in zip(_child_keys(tree, treedef), children, treedef._kids):
        _with_paths(child, sub, path + (key,), out)


def tree_flatten_with_path(tree, is_leaf=None):
    """([(key path, leaf), ...], treedef): each leaf with the keys that lead to it (SequenceKey, DictKey,
    GetAttrKey for namedtuple fields and dataclass attributes, FlattenedIndexKey for other registered types)."""
    treedef = tree_structure(tree, is_leaf)
    out = []
    _with_paths(tree, treedef, (), out)
    return out, treedef


def tree_leaves_with_path(tree, is_leaf=None):
    return tree_flatten_with_path(tree, is_leaf)[0]


def tree_map_with_path(f, tree, *rest, is_leaf=None):
    """f(key path, leaf, *matching subtrees of rest) on each leaf of tree."""
    pairs, treedef = tree_flatten_with_path(tree, is_leaf)
    others = [treedef.flatten_up_to(r) for r in rest]
    return tree_unflatten(treedef, [f(p, x, *xs) for (p, x), *xs in zip(pairs, *others)])
