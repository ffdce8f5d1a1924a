"""Front-end behaviours that follow jax.numpy, jax.random, jax.tree_util and flax.linen: bool + and *, how
arrays print, Flax's argument forms and errors (Conv's ints, GroupNorm, init's key, Dropout's deterministic),
bernoulli with an array p, OrderedDict pytrees and causal attention with more or fewer keys than queries. Each
against numpy, hand values or the documented JAX/Flax behaviour."""
import collections

import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera import nn, random, tree_util


def close(actual, expected, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=rtol, atol=atol)


# ---- random.bernoulli with an array p ------------------------------------------------------------------


def test_bernoulli_array_p_broadcasts():
    key = random.PRNGKey(3)
    p = np.array([0.1, 0.5, 0.9], np.float32)
    got = random.bernoulli(key, tnp.asarray(p), (4000, 3))
    assert got.shape == (4000, 3) and got.dtype == tnp.bool_
    # jax.random.bernoulli: uniform(key, shape, p's dtype) < p.
    u = np.asarray(random.uniform(key, (4000, 3)))
    np.testing.assert_array_equal(np.asarray(got), u < p)
    assert np.all(np.abs(np.asarray(got).mean(axis=0) - p) < 0.03)


def test_bernoulli_shape_defaults_to_p_and_matches_scalar_p():
    key = random.PRNGKey(11)
    p = np.full((5, 2), 0.3, np.float32)
    got = random.bernoulli(key, tnp.asarray(p))
    assert got.shape == (5, 2)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(random.bernoulli(key, 0.3, (5, 2))))
    assert random.bernoulli(key, 0.5).shape == ()


def test_bernoulli_array_p_errors():
    key = random.PRNGKey(0)
    with pytest.raises(ValueError, match="broadcast"):
        random.bernoulli(key, tnp.asarray(np.full((3,), 0.5, np.float32)), (4, 2))
    with pytest.raises(TypeError, match="float"):
        random.bernoulli(key, tnp.asarray(np.array([1, 0], np.int32)))


def test_bernoulli_array_p_under_jit():
    key = random.PRNGKey(5)
    p = tnp.asarray(np.array([0.2, 0.8], np.float32))
    f = tessera.jit(lambda k, p: random.bernoulli(k, p, (6, 2)))
    np.testing.assert_array_equal(np.asarray(f(key, p)), np.asarray(random.bernoulli(key, p, (6, 2))))


# ---- OrderedDict pytrees (jax.tree_util keeps their order) --------------------------------------------------


def test_ordered_dict_keeps_insertion_order():
    tree = collections.OrderedDict([("b", 1), ("a", 2), ("c", {"z": 3, "y": 4})])
    leaves, treedef = tree_util.tree_flatten(tree)
    assert leaves == [1, 2, 4, 3]  # the OrderedDict's order; the plain dict inside by sorted key
    back = tree_util.tree_unflatten(treedef, leaves)
    assert type(back) is collections.OrderedDict and list(back) == ["b", "a", "c"]
    assert back == tree
    mapped = tree_util.tree_map(lambda v: v * 10, tree)
    assert type(mapped) is collections.OrderedDict and list(mapped.items())[:2] == [("b", 10), ("a", 20)]
    assert repr(treedef) == "PyTreeDef(OrderedDict({'b': *, 'a': *, 'c': {'y': *, 'z': *}}))"


def test_ordered_dict_and_dict_are_different_structures():
    plain = tree_util.tree_structure({"b": 1, "a": 2})
    ordered = tree_util.tree_structure(collections.OrderedDict([("b", 1), ("a", 2)]))
    assert tree_util.tree_leaves({"b": 1, "a": 2}) == [2, 1]
    assert plain != ordered
    assert ordered != tree_util.tree_structure(collections.OrderedDict([("a", 2), ("b", 1)]))
    with pytest.raises(ValueError, match="structures differ"):
        tree_util.tree_map(lambda x, y: x, {"a": 1}, collections.OrderedDict(a=1))


def test_defaultdict_keeps_its_factory():
    tree = collections.defaultdict(list, {"b": 1, "a": 2})
    leaves, treedef = tree_util.tree_flatten(tree)
    assert leaves == [2, 1]
    back = tree_util.tree_unflatten(treedef, leaves)
    assert type(back) is collections.defaultdict and back.default_factory is list and back == tree


def test_ordered_dict_through_jit_and_grad():
    tree = collections.OrderedDict([("w", tnp.asarray(np.float32(2.0))), ("a", tnp.asarray(np.float32(3.0)))])
    g = tessera.grad(lambda t: t["w"] * t["a"] ** 2)(tree)
    assert type(g) is collections.OrderedDict and list(g) == ["w", "a"]
    close(g["w"], 9.0)
    close(g["a"], 12.0)
    out = tessera.jit(lambda t: collections.OrderedDict([("s", t["w"] + t["a"]), ("d", t["w"] - t["a"])]))(tree)
    assert list(out) == ["s", "d"]
    close(out["d"], -1.0)


# ---- causal attention with Q != K ----------------------------------------------------------------------------


def _numpy_attention(q, k, v, causal):
    """q: [B, Q, H, D], k, v: [B, K, H, D]; JAX's causal mask is tril(ones((Q, K))): query i attends keys j <= i."""
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    if causal:
        logits = np.where(np.tril(np.ones((q.shape[1], k.shape[1]), bool)), logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", w, v)


@pytest.mark.parametrize("q_len, k_len", [(3, 5), (5, 3), (1, 4), (4, 4)])
@pytest.mark.parametrize("implementation", [None, "xla"])
def test_causal_attention_q_ne_k(rng, q_len, k_len, implementation):
    q = rng.standard_normal((2, q_len, 2, 4)).astype(np.float32)
    k = rng.standard_normal((2, k_len, 2, 4)).astype(np.float32)
    v = rng.standard_normal((2, k_len, 2, 4)).astype(np.float32)
    got = nn.dot_product_attention(tnp.asarray(q), tnp.asarray(k), tnp.asarray(v), is_causal=True,
                                   implementation=implementation)
    close(got, _numpy_attention(q, k, v, True), atol=1e-5)


@pytest.mark.parametrize("implementation", ["fused", "cudnn"])
def test_fused_causal_attention_refuses_q_ne_k(rng, implementation):
    q = tnp.asarray(rng.standard_normal((1, 3, 2, 4)).astype(np.float32))
    k = tnp.asarray(rng.standard_normal((1, 5, 2, 4)).astype(np.float32))
    with pytest.raises(ValueError, match="as many keys as queries.*implementation='xla'"):
        nn.dot_product_attention(q, k, k, is_causal=True, implementation=implementation)


def test_fused_attention_q_ne_k_without_causal(rng):
    q = rng.standard_normal((1, 3, 2, 4)).astype(np.float32)
    k = rng.standard_normal((1, 6, 2, 4)).astype(np.float32)
    v = rng.standard_normal((1, 6, 2, 4)).astype(np.float32)
    for implementation in (None, "fused", "xla"):
        got = nn.dot_product_attention(tnp.asarray(q), tnp.asarray(k), tnp.asarray(v), implementation=implementation)
        close(got, _numpy_attention(q, k, v, False), atol=1e-5)


def test_causal_attention_q_ne_k_under_jit(rng):
    q = rng.standard_normal((1, 2, 1, 4)).astype(np.float32)
    k = rng.standard_normal((1, 5, 1, 4)).astype(np.float32)
    f = tessera.jit(lambda q, k: nn.dot_product_attention(q, k, k, is_causal=True))
    close(f(tnp.asarray(q), tnp.asarray(k)), _numpy_attention(q, k, k, True), atol=1e-5)
