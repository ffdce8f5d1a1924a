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


# ---- bool + and * (jnp.add / jnp.multiply on bools: logical or / and) --------------------------------------

A = np.array([True, True, False, False])
B = np.array([True, False, True, False])


@pytest.mark.parametrize("op, ref", [(lambda x, y: x + y, np.logical_or), (lambda x, y: x * y, np.logical_and),
                                     (tnp.add, np.logical_or), (tnp.multiply, np.logical_and)])
def test_bool_add_and_multiply_are_logical(op, ref):
    got = op(tnp.asarray(A), tnp.asarray(B))
    assert got.dtype == tnp.bool_
    np.testing.assert_array_equal(np.asarray(got), ref(A, B))


def test_bool_with_python_bool_and_reflected():
    x = tnp.asarray(A)
    np.testing.assert_array_equal(np.asarray(x + False), A)
    np.testing.assert_array_equal(np.asarray(True * x), A)
    np.testing.assert_array_equal(np.asarray(False + x), A)
    assert (x * True).dtype == tnp.bool_


def test_bool_with_int_stays_arithmetic():
    # numpy: bool + int32 is int32 arithmetic, not logical.
    got = tnp.asarray(A) + tnp.asarray(np.array([1, 1, 1, 1], np.int32))
    assert got.dtype == tnp.int32
    np.testing.assert_array_equal(np.asarray(got), A.astype(np.int32) + 1)


def test_bool_logic_under_jit():
    f = tessera.jit(lambda x, y: (x + y, x * y))
    s, p = f(tnp.asarray(A), tnp.asarray(B))
    np.testing.assert_array_equal(np.asarray(s), A | B)
    np.testing.assert_array_equal(np.asarray(p), A & B)


# ---- printing ----------------------------------------------------------------------------------------------


def test_integers_print_exactly():
    assert repr(tnp.array([123456789, -7], tnp.int32)) == "Array(i32[2] [123456789, -7])"
    assert repr(tnp.array([2**40 + 1], tnp.int64)) == "Array(i64[1] [1099511627777])"
    assert repr(tnp.array(200, tnp.uint8)) == "Array(u8[] 200)"


def test_random_key_prints_its_words():
    # PRNGKey(seed) = [seed >> 32, seed & 0xffffffff].
    assert repr(random.PRNGKey(4294967295)) == "Array(u32[2] [0, 4294967295])"
    assert repr(random.PRNGKey(3 * 2**32 + 5)) == "Array(u32[2] [3, 5])"


def test_bools_print_as_words_and_floats_as_before():
    assert repr(tnp.array([[True, False]])) == "Array(bool[1,2] [[true, false]])"
    assert repr(tnp.array([1.5, 2.0, -0.25])) == "Array(f32[3] [1.5, 2, -0.25])"
    assert repr(tnp.array([1.5], tnp.bfloat16)) == "Array(bf16[1] [1.5])"
    assert repr(tnp.zeros((0, 3), tnp.int32)) == "Array(i32[0,3] [])"


# ---- Flax's argument forms and errors --------------------------------------------------------------------


def test_group_norm_needs_a_positive_group_count():
    x = tnp.ones((1, 4, 4, 8))
    for groups in (0, -2):
        with pytest.raises(ValueError, match="num_groups must be a positive integer"):
            nn.GroupNorm(num_groups=groups).init(random.PRNGKey(0), x)


def _numpy_conv2d(x, k, strides, pads, dilation):
    """x: [N, H, W, C], k: [kh, kw, C, F]; pads ((lo, hi), (lo, hi)). A direct loop."""
    x = np.pad(x, ((0, 0), pads[0], pads[1], (0, 0)))
    kh, kw = (k.shape[0] - 1) * dilation[0] + 1, (k.shape[1] - 1) * dilation[1] + 1
    oh, ow = (x.shape[1] - kh) // strides[0] + 1, (x.shape[2] - kw) // strides[1] + 1
    out = np.zeros((x.shape[0], oh, ow, k.shape[3]), np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = x[:, i * strides[0]:i * strides[0] + kh:dilation[0], j * strides[1]:j * strides[1] + kw:dilation[1]]
            out[:, i, j] = np.einsum("nhwc,hwcf->nf", patch, k)
    return out


@pytest.mark.parametrize("kwargs, strides, pads, dilation", [
    (dict(strides=2), (2, 2), ((1, 1), (1, 1)), (1, 1)),                       # SAME at stride 2 on 7: (1, 1)
    (dict(padding=1), (1, 1), ((1, 1), (1, 1)), (1, 1)),
    (dict(padding=(2, (0, 1)), kernel_dilation=2), (1, 1), ((2, 2), (0, 1)), (2, 2)),
    (dict(strides=(1, 2), padding="VALID", kernel_dilation=(2, 1)), (1, 2), ((0, 0), (0, 0)), (2, 1)),
])
def test_conv_takes_ints_as_flax(rng, kwargs, strides, pads, dilation):
    x = rng.standard_normal((2, 7, 7, 3)).astype(np.float32)
    layer = nn.Conv(4, (3, 3), **kwargs)
    v = layer.init(random.PRNGKey(0), tnp.asarray(x))
    k = np.asarray(v["params"]["kernel"]).astype(np.float64)
    close(layer.apply(v, tnp.asarray(x)), _numpy_conv2d(x.astype(np.float64), k, strides, pads, dilation), atol=1e-4)


def test_conv_int_kernel_size_is_one_dim():
    # Flax: an int kernel_size k is the 1-d kernel (k,).
    x = tnp.ones((2, 9, 3))
    v = nn.Conv(5, 3, strides=2).init(random.PRNGKey(0), x)
    assert v["params"]["kernel"].shape == (3, 3, 5)
    with pytest.raises(ValueError, match="1-d kernel"):
        nn.Conv(5, 3).init(random.PRNGKey(0), tnp.ones((1, 4, 4, 3)))
    with pytest.raises(ValueError, match="padding"):
        nn.Conv(5, (3, 3), padding=[1, 2, 3]).init(random.PRNGKey(0), tnp.ones((1, 4, 4, 3)))


def test_conv_transpose_takes_int_strides():
    x = tnp.ones((1, 4, 4, 2))
    a = nn.ConvTranspose(3, (3, 3), strides=2)
    b = nn.ConvTranspose(3, (3, 3), strides=(2, 2))
    v = a.init(random.PRNGKey(0), x)
    np.testing.assert_array_equal(np.asarray(a.apply(v, x)), np.asarray(b.apply(v, x)))
    assert a.apply(v, x).shape == (1, 8, 8, 3)


def test_init_refuses_a_seed_for_a_key():
    x = tnp.ones((2, 3))
    with pytest.raises(TypeError, match="PRNGKey"):
        nn.Dense(2).init(0, x)
    with pytest.raises(TypeError, match="'dropout'"):
        nn.Dense(2).init({"params": random.PRNGKey(0), "dropout": 1}, x)
    with pytest.raises(TypeError, match="PRNGKey"):
        nn.Dropout(0.5).apply({}, x, deterministic=False, rngs={"dropout": 7})
    # A key made by split is a key.
    assert nn.Dense(2).init(random.split(random.PRNGKey(0))[1], x)["params"]["kernel"].shape == (3, 2)


def test_dropout_needs_deterministic():
    # flax.linen.Dropout: merge_param raises when neither the module nor the call says deterministic.
    x = tnp.ones((4, 4))
    with pytest.raises(ValueError, match="deterministic"):
        nn.Dropout(0.5).apply({}, x, rngs={"dropout": random.PRNGKey(0)})
    with pytest.raises(ValueError, match="deterministic"):
        nn.Dropout(0.0).apply({}, x)
    np.testing.assert_array_equal(np.asarray(nn.Dropout(0.5, deterministic=True).apply({}, x)), np.ones((4, 4)))
    np.testing.assert_array_equal(np.asarray(nn.Dropout(0.5).apply({}, x, deterministic=True)), np.ones((4, 4)))


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
