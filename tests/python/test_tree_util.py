"""Pytrees: flatten/unflatten round trips, dict key order, None, namedtuples, tree_map."""
import collections

import pytest

from tessera import tree_util

Point = collections.namedtuple("Point", "x y")


def test_round_trip_and_leaf_order():
    tree = {"b": [1, (2, None)], "a": Point(3, {"z": 4, "y": 5})}
    leaves, treedef = tree_util.tree_flatten(tree)
    assert leaves == [3, 5, 4, 1, 2]  # dict keys sorted, None is no leaf
    assert tree_util.tree_unflatten(treedef, leaves) == tree
    assert treedef.num_leaves == 5
    assert tree_util.tree_structure(tree) == treedef
    assert hash(tree_util.tree_structure(tree)) == hash(treedef)
    assert tree_util.tree_structure([1, 2]) != tree_util.tree_structure((1, 2))


def test_tree_map():
    a = {"w": [1, 2], "b": 3}
    assert tree_util.tree_map(lambda x: x * 10, a) == {"w": [10, 20], "b": 30}
    assert tree_util.tree_map(lambda x, y: x + y, a, a) == {"w": [2, 4], "b": 6}
    with pytest.raises(ValueError):
        tree_util.tree_map(lambda x, y: x, a, [1, 2, 3])
    assert tree_util.tree_leaves([[1, [2]], 3], is_leaf=lambda x: x == [2]) == [1, [2], 3]


def test_unflatten_checks_the_leaf_count():
    _, treedef = tree_util.tree_flatten((1, 2))
    with pytest.raises(ValueError, match="2 leaves"):
        tree_util.tree_unflatten(treedef, [1])


def test_registered_types():
    import dataclasses

    import numpy as np

    import tessera
    import tessera.numpy as tnp

    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b

    tree_util.register_pytree_node(Pair, lambda p: ((p.a, p.b), "tag"), lambda aux, c: Pair(*c))
    leaves, treedef = tree_util.tree_flatten([Pair(1, {"x": 2}), 3])
    assert leaves == [1, 2, 3]
    rebuilt = tree_util.tree_unflatten(treedef, [10, 20, 30])
    assert isinstance(rebuilt[0], Pair) and rebuilt[0].a == 10 and rebuilt[0].b == {"x": 20}

    @tree_util.register_dataclass
    @dataclasses.dataclass
    class Params:
        w: object
        b: object

    @dataclasses.dataclass
    class Layer:
        kernel: object
        act: str

    tree_util.register_dataclass(Layer, data_fields=["kernel"], meta_fields=["act"])
    p = Params(tnp.ones((2,)), tnp.zeros((2,)))
    g = tessera.grad(lambda p: tnp.sum(p.w * 3 + p.b))(p)
    assert isinstance(g, Params)
    np.testing.assert_allclose(np.asarray(g.w), [3, 3])
    out = tessera.jit(lambda layer: layer.kernel * 2 if layer.act == "double" else layer.kernel)(
        Layer(tnp.ones((2,)), "double"))
    np.testing.assert_allclose(np.asarray(out), [2, 2])
    assert tree_util.tree_structure(Layer(1, "a")) != tree_util.tree_structure(Layer(1, "b"))


# ---- the rest of jax.tree_util's API (hand-written expectations) -----------------------------------------


def test_reduce_all_transpose_and_treedef_methods():
    assert tree_util.tree_reduce(lambda a, b: a + b, [1, (2, 3), {"x": 4}]) == 10
    assert tree_util.tree_reduce(lambda a, b: a * b, [2, 3], 10) == 60
    assert tree_util.tree_all([True, (1, 1)]) and not tree_util.tree_all([True, (1, 0)])
    outer, inner = tree_util.tree_structure([0, 0]), tree_util.tree_structure((0, 0, 0))
    assert tree_util.tree_transpose(outer, inner, [(1, 2, 3), (4, 5, 6)]) == ([1, 4], [2, 5], [3, 6])
    treedef = tree_util.tree_structure({"b": 1, "a": (2, 3)})
    assert treedef.unflatten([7, 8, 9]) == {"a": (7, 8), "b": 9}
    assert tree_util.tree_structure([0, 0]).flatten_up_to([(1, 2), {"a": 3}]) == [(1, 2), {"a": 3}]
    assert tree_util.tree_structure([None, (1, None), {"a": None, "b": 2}]).num_nodes == 8
    assert [c.num_leaves for c in tree_util.tree_structure([0, (0, 0)]).children()] == [1, 2]
    assert tree_util.all_leaves([1, 2.0, "x"]) and not tree_util.all_leaves([1, (2,)])
    assert tree_util.treedef_is_leaf(tree_util.tree_structure(3))


def test_register_pytree_node_class_and_register_static():
    @tree_util.register_pytree_node_class
    class Box:
        def __init__(self, v, tag):
            self.v, self.tag = v, tag

        def tree_flatten(self):
            return (self.v,), self.tag

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(children[0], aux)

    out = tree_util.tree_map(lambda x: x * 2, Box(3, "t"))
    assert (out.v, out.tag) == (6, "t")

    @tree_util.register_static
    class Static:
        def __init__(self, v):
            self.v = v

        def __hash__(self):
            return hash(self.v)

        def __eq__(self, other):
            return isinstance(other, Static) and other.v == self.v

    assert tree_util.tree_leaves([Static(1), 2]) == [2]
    assert tree_util.tree_structure([Static(1)]) != tree_util.tree_structure([Static(2)])


def test_partial_is_a_pytree():
    p = tree_util.Partial(lambda a, b, c=0: a * b + c, 3, c=1)
    assert p(4) == 13
    assert sorted(tree_util.tree_leaves(p)) == [1, 3]
    q = tree_util.tree_map(lambda x: x * 10, p)
    assert isinstance(q, tree_util.Partial) and q(4) == 130


def test_key_paths():
    tree = {"a": [1, Point(2, 3)], "b": None, "c": 4}
    pairs, _ = tree_util.tree_flatten_with_path(tree)
    assert [(tree_util.keystr(p), v) for p, v in pairs] == [("['a'][0]", 1), ("['a'][1].x", 2), ("['a'][1].y", 3),
                                                            ("['c']", 4)]
    assert tree_util.tree_map_with_path(lambda p, v: len(p) * 100 + v, tree) == \
        {"a": [201, Point(302, 303)], "b": None, "c": 104}


def test_tree_module_has_jax_tree_short_names():
    import tessera
    assert tessera.tree.map(lambda v: v + 1, [1, (2,)]) == [2, (3,)]
    assert tessera.tree.leaves({"b": 1, "a": 2}) == [2, 1]
    assert tessera.tree.reduce(lambda a, b: a + b, [1, 2, 3]) == 6
    assert tessera.tree.unflatten(tessera.tree.structure([0, 0]), [5, 6]) == [5, 6]


def test_keyed_registration_broadcast_and_one_level():
    from tessera import tree_util as tu

    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b

    tu.register_pytree_with_keys(Pair, lambda p: ([(tu.GetAttrKey("a"), p.a), (tu.GetAttrKey("b"), p.b)], None),
                                 lambda aux, ch: Pair(*ch))
    tree = {"x": Pair(1, [2, 3])}
    assert tu.tree_leaves(tree) == [1, 2, 3]
    paths = [tu.keystr(p) for p, _ in tu.tree_flatten_with_path(tree)[0]]
    assert paths == ["['x'].a", "['x'].b[0]", "['x'].b[1]"]
    back = tu.tree_unflatten(tu.tree_structure(tree), [4, 5, 6])
    assert back["x"].a == 4 and back["x"].b == [5, 6]
    assert tu.tree_broadcast([1, 2], [(7, 8), {"k": 9}]) == [(1, 1), {"k": 2}]
    children, data = tu.flatten_one_level({"b": 1, "a": (2, 3)})
    assert children == [(2, 3), 1] and data == ("dict", ("a", "b"))
    with pytest.raises(ValueError, match="leaf"):
        tu.flatten_one_level(5)
    t = tu.treedef_tuple([tu.tree_structure([1, 2]), tu.tree_structure(3)])
    assert tu.tree_unflatten(t, [1, 2, 3]) == ([1, 2], 3)
    assert tu.treedef_children(t) == [tu.tree_structure([1, 2]), tu.tree_structure(3)]
