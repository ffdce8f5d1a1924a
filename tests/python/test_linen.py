"""tessera.nn modules (Flax linen style): each layer against a forward pass written in numpy with the same
parameters; parameter paths; rng streams; init/apply under jit and grad."""
import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera import nn, random, tree_util


def close(actual, expected, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=rtol, atol=atol)


def shapes(variables):
    return tree_util.tree_map(lambda a: tuple(a.shape), variables)


def test_dense_against_numpy(rng):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    layer = nn.Dense(4)
    v = layer.init(random.PRNGKey(0), tnp.asarray(x))
    assert shapes(v) == {"params": {"kernel": (3, 4), "bias": (4,)}}
    k, b = np.asarray(v["params"]["kernel"]), np.asarray(v["params"]["bias"])
    assert np.all(b == 0) and 0.2 < k.std() < 1.0  # lecun normal: std 1/sqrt(3)
    close(layer.apply(v, tnp.asarray(x)), x @ k + b)
    assert shapes(nn.Dense(2, use_bias=False).init(random.PRNGKey(0), tnp.asarray(x))) == {"params": {"kernel": (3, 2)}}


def test_layer_norm_against_numpy(rng):
    x = rng.standard_normal((4, 6)).astype(np.float32) * 3 + 1
    ln = nn.LayerNorm(epsilon=1e-5)
    v = ln.init(random.PRNGKey(0), tnp.asarray(x))
    params = {"scale": tnp.asarray(rng.standard_normal(6).astype(np.float32)),
              "bias": tnp.asarray(rng.standard_normal(6).astype(np.float32))}
    assert shapes(v) == {"params": {"scale": (6,), "bias": (6,)}}
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    close(ln.apply({"params": params}, tnp.asarray(x)), ref * np.asarray(params["scale"]) + np.asarray(params["bias"]))


def test_embed_and_attend(rng):
    ids = np.array([[3, 0], [1, 3]], dtype=np.int32)
    emb = nn.Embed(5, 4)
    v = emb.init(random.PRNGKey(0), tnp.asarray(ids))
    table = np.asarray(v["params"]["embedding"])
    assert table.shape == (5, 4)
    close(emb.apply(v, tnp.asarray(ids)), table[ids])
    back = np.array([-1, -5, 2], dtype=np.int32)  # negative ids count from the end, as numpy's indexing
    close(emb.apply(v, tnp.asarray(back)), table[back])
    q = rng.standard_normal((2, 4)).astype(np.float32)
    close(emb.apply(v, tnp.asarray(q), method="attend"), q @ table.T)


class Block(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        return x + nn.Dense(self.features, name="proj")(nn.LayerNorm()(x))


class Model(nn.Module):
    depth: int
    features: int

    def blocks(self):
        return [Block(self.features) for _ in range(self.depth)]

    @nn.compact
    def __call__(self, x, train=False):
        x = nn.Dense(self.features)(x)
        for block in self.blocks():
            x = block(x)
        x = nn.Dropout(0.5)(x, deterministic=not train)
        shared = nn.Dense(self.features)
        return shared(shared(x))  # one set of parameters, used twice


def test_parameter_paths_and_sharing():
    v = Model(2, 4).init(random.PRNGKey(0), tnp.ones((1, 3)))
    paths = [p for p in _paths(v["params"])]
    assert paths == ["Block_0.LayerNorm_0.bias", "Block_0.LayerNorm_0.scale", "Block_0.proj.bias",
                     "Block_0.proj.kernel", "Block_1.LayerNorm_0.bias", "Block_1.LayerNorm_0.scale",
                     "Block_1.proj.bias", "Block_1.proj.kernel", "Dense_0.bias", "Dense_0.kernel",
                     "Dense_1.bias", "Dense_1.kernel"]
    seq = nn.Sequential([nn.Dense(4), nn.Dense(3)])
    assert list(_paths(seq.init(random.PRNGKey(0), tnp.ones((1, 2)))["params"])) == [
        "layers_0.bias", "layers_0.kernel", "layers_1.bias", "layers_1.kernel"]


def _paths(tree, prefix=""):
    for k in sorted(tree):
        path = f"{prefix}.{k}" if prefix else k
        if isinstance(tree[k], dict):
            yield from _paths(tree[k], path)
        else:
            yield path


def test_init_is_deterministic_per_key():
    x = tnp.ones((2, 3))
    a = Model(1, 4).init(random.PRNGKey(0), x)
    b = Model(1, 4).init(random.PRNGKey(0), x)
    c = Model(1, 4).init(random.PRNGKey(1), x)
    for la, lb, lc in zip(tree_util.tree_leaves(a), tree_util.tree_leaves(b), tree_util.tree_leaves(c)):
        np.testing.assert_array_equal(np.asarray(la), np.asarray(lb))
    k_a, k_c = np.asarray(a["params"]["Dense_0"]["kernel"]), np.asarray(c["params"]["Dense_0"]["kernel"])
    assert not np.array_equal(k_a, k_c)
    # Two layers of the same shape get different initial values.
    assert not np.array_equal(k_a, np.asarray(a["params"]["Block_0"]["proj"]["kernel"])[:3])


def test_dropout_streams(rng):
    x = tnp.ones((100, 100))
    drop = nn.Dropout(0.3)
    close(drop.apply({}, x, deterministic=True), np.ones((100, 100)))
    y = np.asarray(drop.apply({}, x, deterministic=False, rngs={"dropout": random.PRNGKey(5)}))
    assert abs((y == 0).mean() - 0.3) < 0.02
    close(y[y != 0], 1 / 0.7)
    y2 = np.asarray(drop.apply({}, x, deterministic=False, rngs={"dropout": random.PRNGKey(5)}))
    np.testing.assert_array_equal(y, y2)
    with pytest.raises(ValueError, match="dropout"):
        drop.apply({}, x, deterministic=False)


def test_apply_under_jit_and_grad(rng):
    x = rng.standard_normal((8, 3)).astype(np.float32)
    y = rng.standard_normal((8, 2)).astype(np.float32)
    layer = nn.Dense(2)
    v = layer.init(random.PRNGKey(0), tnp.asarray(x))

    def loss(v, x, y):
        return tnp.mean((layer.apply(v, x) - y) ** 2)

    value, g = tessera.jit(tessera.value_and_grad(loss))(v, tnp.asarray(x), tnp.asarray(y))
    k, b = np.asarray(v["params"]["kernel"]), np.asarray(v["params"]["bias"])
    r = x @ k + b - y
    close(value, np.mean(r ** 2))
    close(g["params"]["kernel"], 2 * x.T @ r / r.size, rtol=1e-4)
    close(g["params"]["bias"], 2 * r.sum(0) / r.size, rtol=1e-4)


def test_misuse_is_a_clear_error():
    with pytest.raises(RuntimeError, match="init"):
        nn.Dense(3)(tnp.ones((1, 2)))
    v = nn.Dense(3).init(random.PRNGKey(0), tnp.ones((1, 2)))
    with pytest.raises(KeyError, match="kernel"):
        nn.Dense(3).apply({"params": {"bias": v["params"]["bias"]}}, tnp.ones((1, 2)))


def test_causal_self_attention_against_numpy(rng):
    b, length, f, h = 2, 5, 8, 2
    x = rng.standard_normal((b, length, f)).astype(np.float32)
    attn = nn.MultiHeadDotProductAttention(num_heads=h)
    mask = nn.make_causal_mask(tnp.ones((b, length)))
    v = attn.init(random.PRNGKey(0), tnp.asarray(x), mask=mask)
    p = tree_util.tree_map(np.asarray, v["params"])
    d = f // h
    # Flax's layout: projections [F, H, D] with [H, D] biases, the out projection [H, D, F].
    assert sorted(p) == ["key", "out", "query", "value"] and p["query"]["kernel"].shape == (f, h, d)
    assert p["query"]["bias"].shape == (h, d) and p["out"]["kernel"].shape == (h, d, f)

    def proj(name, x):
        return np.einsum("blf,fhd->blhd", x, p[name]["kernel"]) + p[name]["bias"]

    q, k, val = (proj(n, x) for n in ("query", "key", "value"))
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d)
    logits = np.where(np.tril(np.ones((length, length), bool)), logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    ref = np.einsum("bqhd,hdf->bqf", np.einsum("bhqk,bkhd->bqhd", w, val), p["out"]["kernel"]) + p["out"]["bias"]
    close(attn.apply(v, tnp.asarray(x), mask=mask), ref, rtol=1e-4, atol=1e-5)
    # Causal: the first position's output does not depend on later positions.
    x2 = x.copy()
    x2[:, 1:] += 1.0
    out1 = np.asarray(attn.apply(v, tnp.asarray(x), mask=mask))
    out2 = np.asarray(attn.apply(v, tnp.asarray(x2), mask=mask))
    close(out1[:, 0], out2[:, 0])


def test_attention_inputs_and_dropout_as_flax(rng):
    # Cross attention with distinct keys and values (Flax's inputs_k / inputs_v), and dropout of the attention
    # weights with an explicit rng against the same mask applied by hand.
    b, lq, lk, f, h = 2, 3, 4, 8, 2
    d = f // h
    xq, xk, xv = (rng.standard_normal((b, n, f)).astype(np.float32) for n in (lq, lk, lk))
    attn = nn.MultiHeadDotProductAttention(num_heads=h, dropout_rate=0.5, out_features=5)
    v = attn.init(random.PRNGKey(0), tnp.asarray(xq), tnp.asarray(xk), tnp.asarray(xv), deterministic=True)
    p = tree_util.tree_map(np.asarray, v["params"])

    def proj(name, x):
        return np.einsum("blf,fhd->blhd", x, p[name]["kernel"]) + p[name]["bias"]

    q, k, val = proj("query", xq), proj("key", xk), proj("value", xv)
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)

    def out(weights):
        return np.einsum("bqhd,hdf->bqf", np.einsum("bhqk,bkhd->bqhd", weights, val), p["out"]["kernel"]) + \
            p["out"]["bias"]

    args = (tnp.asarray(xq), tnp.asarray(xk), tnp.asarray(xv))
    close(attn.apply(v, *args, deterministic=True), out(w), rtol=1e-4, atol=1e-5)
    key = random.PRNGKey(7)
    keep = np.asarray(random.bernoulli(key, 0.5, (1, 1, lq, lk)))  # one mask over the batch and the heads
    close(attn.apply(v, *args, deterministic=False, dropout_rng=key), out(np.where(keep, w / 0.5, 0.0)), rtol=1e-4,
          atol=1e-5)
    with pytest.raises(ValueError, match="deterministic"):
        attn.apply(v, *args)
    with pytest.raises(ValueError, match="inputs_kv"):
        attn.apply(v, args[0], args[1], inputs_kv=args[1], deterministic=True)


def test_fused_dot_product_attention_against_numpy(rng):
    """implementation="fused" (one dot_product_attention op) and "xla" (einsum + softmax) against numpy, causal and
    cross attention, and the fused op's gradient (its own vjp) against the unfused form's."""
    def reference(q, k, v, causal):
        logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
        if causal:
            logits = np.where(np.tril(np.ones((q.shape[1], k.shape[1]), bool)), logits, -np.inf)
        w = np.exp(logits - logits.max(-1, keepdims=True))
        return np.einsum("bhqk,bkhd->bqhd", w / w.sum(-1, keepdims=True), v)

    for (tq, tk, causal) in ((6, 6, True), (4, 7, False)):
        q = rng.standard_normal((2, tq, 3, 4)).astype(np.float32)
        k, v = (rng.standard_normal((2, tk, 3, 4)).astype(np.float32) for _ in range(2))
        want = reference(q, k, v, causal)
        for impl in ("fused", "xla"):
            got = nn.dot_product_attention(tnp.asarray(q), tnp.asarray(k), tnp.asarray(v), is_causal=causal,
                                           implementation=impl)
            close(got, want, rtol=1e-4, atol=1e-5)

        def loss(impl):
            return lambda q, k, v: tnp.sum(nn.dot_product_attention(q, k, v, is_causal=causal, implementation=impl)
                                           * tnp.asarray(want))
        args = (tnp.asarray(q), tnp.asarray(k), tnp.asarray(v))
        fused = tessera.grad(loss("fused"), argnums=(0, 1, 2))(*args)
        unfused = tessera.grad(loss("xla"), argnums=(0, 1, 2))(*args)
        for a, b in zip(fused, unfused):
            close(a, np.asarray(b), rtol=1e-4, atol=1e-5)
        # bf16 q, k and v (autocast's activations) go to the op as they are and give bf16: the attention of the
        # rounded values, rounded once.
        qb, kb, vb = (tnp.asarray(a).astype(tnp.bfloat16) for a in (q, k, v))
        got = nn.dot_product_attention(qb, kb, vb, is_causal=causal, implementation="fused")
        assert got.dtype == tnp.bfloat16
        close(np.asarray(got.astype("float32")), reference(_bf16(q), _bf16(k), _bf16(v), causal), rtol=8e-3, atol=8e-3)
    with pytest.raises(ValueError, match="mask"):
        nn.dot_product_attention(tnp.asarray(q), tnp.asarray(k), tnp.asarray(v), mask=tnp.ones((2, 3, 4, 7)) > 0,
                                 implementation="fused")
    with pytest.raises(ValueError, match="implementation"):
        nn.dot_product_attention(tnp.asarray(q), tnp.asarray(k), tnp.asarray(v), implementation="flash2")


class TiedLM(nn.Module):
    vocab: int
    width: int

    def setup(self):
        self.embed = nn.Embed(self.vocab, self.width)
        self.blocks = [Block(self.width) for _ in range(2)]
        self.scale = self.param("scale", nn.initializers.ones, (self.width,))

    def __call__(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.embed.attend(x * self.scale)  # the output layer shares the embedding


def test_setup_names_submodules_by_attribute_and_methods_use_their_own_parameters(rng):
    ids = np.array([[1, 3, 2]], dtype=np.int32)
    model = TiedLM(5, 4)
    v = model.init(random.PRNGKey(0), tnp.asarray(ids))
    assert list(_paths(v["params"])) == [
        "blocks_0.LayerNorm_0.bias", "blocks_0.LayerNorm_0.scale", "blocks_0.proj.bias", "blocks_0.proj.kernel",
        "blocks_1.LayerNorm_0.bias", "blocks_1.LayerNorm_0.scale", "blocks_1.proj.bias", "blocks_1.proj.kernel",
        "embed.embedding", "scale"]
    p = tree_util.tree_map(np.asarray, v["params"])
    x = p["embed"]["embedding"][ids]
    for name in ("blocks_0", "blocks_1"):
        b = p[name]
        h = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)
        h = h * b["LayerNorm_0"]["scale"] + b["LayerNorm_0"]["bias"]
        x = x + h @ b["proj"]["kernel"] + b["proj"]["bias"]
    close(model.apply(v, tnp.asarray(ids)), (x * p["scale"]) @ p["embed"]["embedding"].T, rtol=1e-4)


class UsesAttend(nn.Module):
    @nn.compact
    def __call__(self, ids):
        embed = nn.Embed(6, 3)
        return embed.attend(embed(ids))


def test_a_compact_submodules_method_reads_its_parameters():
    v = UsesAttend().init(random.PRNGKey(0), tnp.asarray([0, 5]))
    assert list(_paths(v["params"])) == ["Embed_0.embedding"]
    table = np.asarray(v["params"]["Embed_0"]["embedding"])
    close(UsesAttend().apply(v, tnp.asarray([0, 5])), table[[0, 5]] @ table.T)


def test_a_submodule_without_parameters_applies():
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x, train=False):
            x = nn.Dense(4)(x)
            return nn.Dropout(0.5, deterministic=not train)(x)

    x = tnp.ones((2, 3))
    variables = Net().init(tessera.random.PRNGKey(0), x)
    assert set(variables["params"]) == {"Dense_0"}
    out = Net().apply(variables, x)
    assert out.shape == (2, 4)
    dropped = np.asarray(Net().apply(variables, x, train=True, rngs={"dropout": tessera.random.PRNGKey(1)}))
    kept = np.asarray(out)
    assert np.all((dropped == 0) | np.isclose(dropped, 2 * kept))


def test_rms_norm_against_numpy(rng):
    x = rng.standard_normal((3, 8)).astype(np.float32)
    variables = nn.RMSNorm().init(random.PRNGKey(0), tnp.asarray(x))
    scale = rng.standard_normal(8).astype(np.float32)
    out = nn.RMSNorm().apply({"params": {"scale": tnp.asarray(scale)}}, tnp.asarray(x))
    expected = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * scale
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-6)
    assert np.asarray(variables["params"]["scale"]).tolist() == [1.0] * 8


def test_group_norm_against_numpy(rng):
    x = rng.standard_normal((2, 5, 5, 6)).astype(np.float32)
    module = nn.GroupNorm(num_groups=3)
    variables = module.init(random.PRNGKey(0), tnp.asarray(x))
    out = np.asarray(module.apply(variables, tnp.asarray(x)))
    g = x.reshape(2, 5, 5, 3, 2)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = ((g - mean) ** 2).mean(axis=(1, 2, 4), keepdims=True)
    expected = ((g - mean) / np.sqrt(var + 1e-6)).reshape(x.shape)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="do not split into 4 groups"):
        nn.GroupNorm(num_groups=4).init(random.PRNGKey(0), tnp.asarray(x))


def test_conv_against_a_numpy_loop(rng):
    x = rng.standard_normal((2, 6, 7, 4)).astype(np.float32)
    module = nn.Conv(features=5, kernel_size=(3, 3), strides=(2, 1), padding="VALID")
    variables = module.init(random.PRNGKey(0), tnp.asarray(x))
    k = np.asarray(variables["params"]["kernel"])
    b = rng.standard_normal(5).astype(np.float32)
    out = np.asarray(module.apply({"params": {"kernel": tnp.asarray(k), "bias": tnp.asarray(b)}}, tnp.asarray(x)))
    assert k.shape == (3, 3, 4, 5)
    expected = np.zeros((2, 2, 5, 5), np.float32)
    for i in range(2):
        for j in range(5):
            patch = x[:, 2 * i:2 * i + 3, j:j + 3, :]  # [N, 3, 3, C]
            expected[:, i, j, :] = np.einsum("nhwc,hwco->no", patch, k) + b
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    # SAME keeps the spatial size at stride 1; grouped (depthwise) kernels hold C / groups inputs.
    same = nn.Conv(features=8, kernel_size=(3, 3), feature_group_count=4)
    v = same.init(random.PRNGKey(1), tnp.asarray(x))
    assert v["params"]["kernel"].shape == (3, 3, 1, 8)
    assert same.apply(v, tnp.asarray(x)).shape == (2, 6, 7, 8)


def _bf16(a):
    """float32 values rounded to bfloat16 (to nearest even), as float32."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def test_autocast_runs_products_in_bf16_and_norms_in_f32(rng):
    x = rng.standard_normal((5, 7)).astype(np.float32)
    dense = nn.Dense(4)
    v = dense.init(random.PRNGKey(1), tnp.asarray(x))
    k, b = np.asarray(v["params"]["kernel"]), np.asarray(v["params"]["bias"]) + 0.25
    params = {"params": {"kernel": tnp.asarray(k), "bias": tnp.asarray(b)}}
    with tessera.autocast():
        y = dense.apply(params, tnp.asarray(x))
        assert y.dtype == tnp.bfloat16
        # The product of the rounded operands, plus the rounded bias, each rounded once (bf16 half ulp: 2^-9).
        close(np.asarray(y.astype("float32")), _bf16(_bf16(_bf16(x) @ _bf16(k)) + _bf16(b)), rtol=2e-2, atol=2e-2)
        ln = nn.LayerNorm()
        lv = ln.init(random.PRNGKey(0), y)
        assert ln.apply(lv, y).dtype == tnp.float32
        assert tessera.nn.softmax(y).dtype == tnp.float32
        with tessera.autocast(None):  # switched off inside
            assert (tnp.asarray(x) @ tnp.asarray(k)).dtype == tnp.float32
    assert (tnp.asarray(x) @ tnp.asarray(k)).dtype == tnp.float32
    with pytest.raises(TypeError, match="bf16"):
        tessera.autocast("float16")


def test_autocast_inside_grad_gives_f32_gradients(rng):
    x = tnp.asarray(rng.standard_normal((6, 8)).astype(np.float32))
    w = rng.standard_normal((8, 3)).astype(np.float32)

    def loss(w):
        with tessera.autocast():
            return tnp.sum(tnp.square(x @ w).astype("float32"))

    g = tessera.grad(loss)(tnp.asarray(w))
    assert g.dtype == tnp.float32
    xn = np.asarray(x)
    want = 2 * xn.T @ (xn @ w)
    np.testing.assert_allclose(np.asarray(g), want, rtol=0, atol=0.03 * np.abs(want).max())


def test_jit_traces_autocast_regions_apart(rng):
    x = tnp.asarray(rng.standard_normal((4, 5)).astype(np.float32))
    w = tnp.asarray(rng.standard_normal((5, 3)).astype(np.float32))
    f = tessera.jit(lambda a, b: a @ b)
    assert f(x, w).dtype == tnp.float32
    with tessera.autocast():
        assert f(x, w).dtype == tnp.bfloat16
        assert f(x, w).dtype == tnp.bfloat16  # the region's own cached program
    assert f(x, w).dtype == tnp.float32  # not the region's
    assert f.cache_info()["size"] == 2
