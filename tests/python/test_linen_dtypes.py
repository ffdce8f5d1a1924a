"""Flax's dtype options on tessera.nn's layers (tessera/linen.py, _linen_recurrent.py): param_dtype (the dtype the
parameters are made in), dtype (the one they compute in; None: the promoted dtype of the inputs and parameters, as
flax.linen.dtypes.promote_dtype), precision and dot_general. Values against numpy on the bfloat16-rounded
operands; norms compute their statistics in float32 (Flax's _compute_stats)."""
import numpy as np
import pytest

import tessera.numpy as tnp
from tessera import lax, nn, random

KEY = random.PRNGKey(0)
BF16 = 2.0 ** -8  # bfloat16's relative spacing: a result rounded once is within half of it


def bf16(a):
    """float32 values rounded to bfloat16 (to nearest even), as float32."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def f32(a):
    return np.asarray(tnp.astype(a, tnp.float32))


def close_bf16(got, want):
    np.testing.assert_allclose(f32(got), want, rtol=BF16, atol=BF16 * np.abs(want).max())


@pytest.fixture
def x():
    return np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)


def dtypes(tree):
    return {k: dtypes(v) if isinstance(v, dict) else str(v.dtype) for k, v in tree.items()}


def test_dense_in_bfloat16_rounds_operands_and_result(x):
    dense = nn.Dense(4, dtype=tnp.bfloat16, param_dtype=tnp.float32, precision=lax.Precision.HIGHEST,
                     bias_init=nn.initializers.normal(1.0))
    v = dense.init(KEY, tnp.asarray(x))
    assert dtypes(v["params"]) == {"kernel": "float32", "bias": "float32"}
    k, b = np.asarray(v["params"]["kernel"]), np.asarray(v["params"]["bias"])
    y = dense.apply(v, tnp.asarray(x))
    assert y.dtype == tnp.bfloat16
    want = bf16(bf16(bf16(x).astype(np.float64) @ bf16(k)) + bf16(b))
    close_bf16(y, want)


def test_dense_default_dtype_is_the_promoted_one(x):
    xb = tnp.astype(tnp.asarray(x), tnp.bfloat16)
    dense = nn.Dense(3)
    v = dense.init(KEY, xb)
    assert dtypes(v["params"]) == {"kernel": "float32", "bias": "float32"}
    y = dense.apply(v, xb)  # bf16 inputs, f32 parameters: float32 (jnp's promotion)
    assert y.dtype == tnp.float32
    np.testing.assert_allclose(np.asarray(y), bf16(x) @ np.asarray(v["params"]["kernel"]), rtol=1e-5, atol=1e-5)
    # bfloat16 parameters with float32 inputs: float32 again, the kernel's values rounded
    half = nn.Dense(3, param_dtype=tnp.bfloat16)
    hv = half.init(KEY, tnp.asarray(x))
    assert dtypes(hv["params"]) == {"kernel": "bfloat16", "bias": "bfloat16"}
    y = half.apply(hv, tnp.asarray(x))
    assert y.dtype == tnp.float32
    np.testing.assert_allclose(np.asarray(y), x @ f32(hv["params"]["kernel"]), rtol=1e-5, atol=1e-5)
    # both bfloat16: bfloat16
    assert half.apply(hv, tnp.astype(tnp.asarray(x), tnp.bfloat16)).dtype == tnp.bfloat16


def test_dense_precision_is_checked_and_changes_no_float32_result(x):
    v = nn.Dense(4).init(KEY, tnp.asarray(x))
    want = np.asarray(nn.Dense(4).apply(v, tnp.asarray(x)))
    for p in (lax.Precision.HIGHEST, "highest", lax.Precision.DEFAULT, (lax.Precision.HIGH, lax.Precision.HIGH)):
        np.testing.assert_array_equal(np.asarray(nn.Dense(4, precision=p).apply(v, tnp.asarray(x))), want)
    with pytest.raises(ValueError):
        nn.Dense(4, precision="sometimes").apply(v, tnp.asarray(x))


def test_dense_dot_general_and_dot_general_cls(x):
    calls = []

    def doubled(lhs, rhs, dimension_numbers, precision=None):
        calls.append((tuple(lhs.shape), tuple(rhs.shape), dimension_numbers, precision))
        return 2.0 * lax.dot_general(lhs, rhs, dimension_numbers, precision=precision)

    dense = nn.Dense(4, dot_general=doubled, precision=lax.Precision.HIGH)
    v = dense.init(KEY, tnp.asarray(x))
    k, b = np.asarray(v["params"]["kernel"]), np.asarray(v["params"]["bias"]) + 0.5
    params = {"params": {"kernel": tnp.asarray(k), "bias": tnp.asarray(b)}}
    np.testing.assert_allclose(np.asarray(dense.apply(params, tnp.asarray(x))), 2 * x @ k + b, rtol=1e-5, atol=1e-5)
    assert calls[-1] == ((5, 7), (7, 4), (((1,), (0,)), ((), ())), lax.Precision.HIGH)

    class Tripled:
        def __call__(self, lhs, rhs, dimension_numbers, precision=None):
            return 3.0 * lax.dot_general(lhs, rhs, dimension_numbers, precision=precision)

    y = nn.Dense(4, dot_general_cls=Tripled).apply(params, tnp.asarray(x))
    np.testing.assert_allclose(np.asarray(y), 3 * x @ k + b, rtol=1e-5, atol=1e-5)
    # DenseGeneral over two axes
    x3 = x.reshape(5, 7, 1) * np.ones((1, 1, 2), np.float32)
    dg = nn.DenseGeneral(3, axis=(1, 2), dot_general=doubled)
    dv = dg.init(KEY, tnp.asarray(x3))
    want = 2 * np.tensordot(x3, np.asarray(dv["params"]["kernel"]), axes=([1, 2], [0, 1]))
    np.testing.assert_allclose(np.asarray(dg.apply(dv, tnp.asarray(x3))), want, rtol=1e-5, atol=1e-5)
    assert calls[-1][2] == (((1, 2), (0, 1)), ((), ()))


def test_dense_like_layers_in_bfloat16(x):
    xb = bf16(x).astype(np.float64)
    dg = nn.DenseGeneral((2, 3), dtype=tnp.bfloat16, param_dtype=tnp.bfloat16)
    v = dg.init(KEY, tnp.asarray(x))
    assert dtypes(v["params"]) == {"kernel": "bfloat16", "bias": "bfloat16"}
    y = dg.apply(v, tnp.asarray(x))
    assert y.dtype == tnp.bfloat16 and y.shape == (5, 2, 3)
    close_bf16(y, bf16(np.tensordot(xb, f32(v["params"]["kernel"]), axes=([1], [0]))))

    es = nn.Einsum((7, 4), "bi,io->bo", dtype=tnp.bfloat16, bias_init=nn.initializers.ones,
                   precision=lax.Precision.HIGHEST)
    v = es.init(KEY, tnp.asarray(x))
    assert dtypes(v["params"]) == {"kernel": "float32", "bias": "float32"}
    y = es.apply(v, tnp.asarray(x))
    assert y.dtype == tnp.bfloat16
    close_bf16(y, bf16(bf16(xb @ bf16(np.asarray(v["params"]["kernel"]))) + 1.0))


def conv1d(x, k, bias):
    """x: [N, W, C], k: [K, C, F], "SAME" padding, stride 1."""
    n, w, c = x.shape
    size = k.shape[0]
    lo = (size - 1) // 2
    padded = np.pad(x, ((0, 0), (lo, size - 1 - lo), (0, 0)))
    out = np.zeros((n, w, k.shape[2]))
    for i in range(w):
        out[:, i] = np.einsum("nkc,kcf->nf", padded[:, i:i + size], k)
    return out + bias


def test_conv_in_bfloat16(x):
    xs = x.reshape(5, 7, 1) * np.array([1.0, -0.5], np.float32)  # [N, W, C=2]
    conv = nn.Conv(3, (3,), dtype=tnp.bfloat16, precision="highest", bias_init=nn.initializers.normal(1.0))
    v = conv.init(KEY, tnp.asarray(xs))
    assert dtypes(v["params"]) == {"kernel": "float32", "bias": "float32"}
    y = conv.apply(v, tnp.asarray(xs))
    assert y.dtype == tnp.bfloat16
    k, b = np.asarray(v["params"]["kernel"]), np.asarray(v["params"]["bias"])
    close_bf16(y, bf16(bf16(conv1d(bf16(xs), bf16(k), 0.0)) + bf16(b)))
    # float32 by default; bfloat16 parameters
    half = nn.Conv(3, (3,), param_dtype=tnp.bfloat16)
    hv = half.init(KEY, tnp.asarray(xs))
    assert dtypes(hv["params"]) == {"kernel": "bfloat16", "bias": "bfloat16"}
    y = half.apply(hv, tnp.asarray(xs))
    assert y.dtype == tnp.float32
    np.testing.assert_allclose(np.asarray(y), conv1d(xs, f32(hv["params"]["kernel"]), 0.0), rtol=1e-5, atol=1e-5)

    ct = nn.ConvTranspose(2, (3,), dtype=tnp.bfloat16, param_dtype=tnp.bfloat16, precision=lax.Precision.HIGHEST)
    cv = ct.init(KEY, tnp.asarray(xs))
    assert dtypes(cv["params"]) == {"kernel": "bfloat16", "bias": "bfloat16"}
    y = ct.apply(cv, tnp.asarray(xs))
    assert y.dtype == tnp.bfloat16
    # stride 1, "SAME": the correlation with the kernel as it is (transpose_kernel=False)
    close_bf16(y, bf16(conv1d(bf16(xs), f32(cv["params"]["kernel"]), 0.0)))


def test_embed_dtypes():
    ids = tnp.asarray([0, 3, 1])
    emb = nn.Embed(4, 6, param_dtype=tnp.bfloat16)
    v = emb.init(KEY, ids)
    table = v["params"]["embedding"]
    assert table.dtype == tnp.bfloat16
    y = emb.apply(v, ids)
    assert y.dtype == tnp.bfloat16  # the table's own dtype (no inexact promotion)
    np.testing.assert_array_equal(f32(y), f32(table)[[0, 3, 1]])
    y = nn.Embed(4, 6, dtype=tnp.float32, param_dtype=tnp.bfloat16).apply(v, ids)
    assert y.dtype == tnp.float32
    q = np.random.default_rng(2).standard_normal((2, 6)).astype(np.float32)
    out = emb.apply(v, tnp.asarray(q), method="attend")  # float32 query, bfloat16 table: float32
    assert out.dtype == tnp.float32
    np.testing.assert_allclose(np.asarray(out), q @ f32(table).T, rtol=1e-5, atol=1e-5)
    out = nn.Embed(4, 6, dtype=tnp.bfloat16).apply(v, tnp.asarray(q), method="attend")
    assert out.dtype == tnp.bfloat16
    close_bf16(out, bf16(bf16(q).astype(np.float64) @ f32(table).T))


def layer_norm(x, axes, eps, mean=True):
    x = x.astype(np.float64)
    mu = x.mean(axes, keepdims=True) if mean else 0.0
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(axes, keepdims=True) + eps)


def test_norms_compute_statistics_in_float32():
    # Large offsets: statistics in bfloat16 would lose the spread (bf16 spacing at 300 is 2).
    rng = np.random.default_rng(3)
    x = bf16(300.0 + rng.standard_normal((4, 3, 8)).astype(np.float32) * 4)
    xb = tnp.astype(tnp.asarray(x), tnp.bfloat16)
    cases = [(nn.LayerNorm(dtype=tnp.bfloat16), layer_norm(x, -1, 1e-6)),
             (nn.RMSNorm(dtype=tnp.bfloat16), layer_norm(x, -1, 1e-6, mean=False)),
             (nn.GroupNorm(num_groups=2, dtype=tnp.bfloat16),
              layer_norm(x.reshape(4, 3, 2, 4), (1, 3), 1e-6).reshape(4, 3, 8)),
             (nn.InstanceNorm(dtype=tnp.bfloat16), layer_norm(x, 1, 1e-6))]
    for norm, want in cases:
        v = norm.init(KEY, xb)
        assert set(dtypes(v["params"]).values()) == {"float32"}, type(norm).__name__
        y = norm.apply(v, xb)
        assert y.dtype == tnp.bfloat16, type(norm).__name__
        close_bf16(y, bf16(want))
        # dtype None: the promoted dtype of the input and the float32 parameters
        y = type(norm)(**{k: getattr(norm, k) for k in ("num_groups",) if hasattr(norm, k)}).apply(v, xb)
        assert y.dtype == tnp.float32, type(norm).__name__
        np.testing.assert_allclose(np.asarray(y), want, rtol=1e-3, atol=1e-3)


def test_norm_param_dtype_and_output():
    x = np.random.default_rng(4).standard_normal((3, 8)).astype(np.float32)
    xb = tnp.astype(tnp.asarray(x), tnp.bfloat16)
    ln = nn.LayerNorm(param_dtype=tnp.bfloat16, scale_init=nn.initializers.constant(2.0))
    v = ln.init(KEY, xb)
    assert dtypes(v["params"]) == {"scale": "bfloat16", "bias": "bfloat16"}
    y = ln.apply(v, xb)
    assert y.dtype == tnp.bfloat16  # input and parameters all bfloat16
    close_bf16(y, bf16(2 * layer_norm(bf16(x), -1, 1e-6)))
    assert ln.apply(v, tnp.asarray(x)).dtype == tnp.float32


def test_batch_norm_dtypes():
    x = bf16(50.0 + np.random.default_rng(5).standard_normal((6, 4)).astype(np.float32))
    xb = tnp.astype(tnp.asarray(x), tnp.bfloat16)
    bn = nn.BatchNorm(use_running_average=False, dtype=tnp.bfloat16, param_dtype=tnp.bfloat16)
    v = bn.init(KEY, xb)
    assert dtypes(v["params"]) == {"scale": "bfloat16", "bias": "bfloat16"}
    assert dtypes(v["batch_stats"]) == {"mean": "float32", "var": "float32"}
    y, updated = bn.apply(v, xb, mutable=["batch_stats"])
    assert y.dtype == tnp.bfloat16
    close_bf16(y, bf16(layer_norm(x, 0, 1e-5)))
    assert updated["batch_stats"]["mean"].dtype == tnp.float32
    np.testing.assert_allclose(np.asarray(updated["batch_stats"]["mean"]), 0.01 * x.mean(0), rtol=1e-5)
    # inference with the running statistics; dtype None: the promoted dtype of the input and the parameters
    bn = nn.BatchNorm(use_running_average=True)
    assert bn.apply(v, xb).dtype == tnp.bfloat16
    assert bn.apply(v, tnp.asarray(x)).dtype == tnp.float32
    v32 = bn.init(KEY, tnp.asarray(x))
    assert bn.apply(v32, xb).dtype == tnp.float32


def test_recurrent_cells_and_attention_dtypes():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 5)).astype(np.float32)
    cell = nn.LSTMCell(4, dtype=tnp.bfloat16)
    carry = cell.initialize_carry(KEY, (2, 5))
    assert carry[0].dtype == tnp.float32 and carry[0].shape == (2, 4)
    v = cell.init(KEY, carry, tnp.asarray(x))
    assert {d for sub in dtypes(v["params"]).values() for d in sub.values()} == {"float32"}
    (c, h), out = cell.apply(v, carry, tnp.asarray(x))
    assert out.dtype == tnp.float32  # the gates are bfloat16; the float32 carry promotes c' and h'
    bf_carry = tuple(tnp.astype(a, tnp.bfloat16) for a in carry)
    assert cell.apply(v, bf_carry, tnp.asarray(x))[1].dtype == tnp.bfloat16
    p = {k: {n: np.asarray(a, np.float64) for n, a in d.items()} for k, d in v["params"].items()}
    xr = bf16(x).astype(np.float64)

    def gate(i, h_name):  # bf16 products and bias adds; h is zero
        return bf16(bf16(xr @ bf16(p[i]["kernel"])) + bf16(p[h_name]["bias"]))

    sig = lambda a: 1 / (1 + np.exp(-a))  # noqa: E731
    want_c = sig(gate("ii", "hi")) * np.tanh(gate("ig", "hg"))
    want_h = sig(gate("io", "ho")) * np.tanh(want_c)
    np.testing.assert_allclose(f32(out), want_h, rtol=0, atol=0.02)
    half = nn.GRUCell(3, param_dtype=tnp.bfloat16)
    assert half.initialize_carry(KEY, (2, 5)).dtype == tnp.bfloat16
    hv = half.init(KEY, half.initialize_carry(KEY, (2, 5)), tnp.asarray(x))
    assert {d for sub in dtypes(hv["params"]).values() for d in sub.values()} == {"bfloat16"}

    q = rng.standard_normal((2, 3, 8)).astype(np.float32)
    mha = nn.MultiHeadDotProductAttention(num_heads=2, dtype=tnp.bfloat16, param_dtype=tnp.float32,
                                          precision=lax.Precision.HIGHEST)
    mv = mha.init(KEY, tnp.asarray(q))
    assert {d for sub in dtypes(mv["params"]).values() for d in sub.values()} == {"float32"}
    assert mha.apply(mv, tnp.asarray(q)).dtype == tnp.bfloat16


def test_prelu_param_dtype():
    x = np.array([-2.0, -0.5, 1.5], np.float32)
    pr = nn.PReLU(param_dtype=tnp.bfloat16, negative_slope_init=0.3)
    v = pr.init(KEY, tnp.asarray(x))
    assert v["params"]["negative_slope"].dtype == tnp.bfloat16
    y = pr.apply(v, tnp.asarray(x))
    assert y.dtype == tnp.float32  # the input's dtype
    np.testing.assert_allclose(np.asarray(y), np.where(x >= 0, x, bf16(np.float32([0.3]))[0] * x), rtol=1e-6)
