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
