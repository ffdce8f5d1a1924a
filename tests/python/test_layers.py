"""tessera.nn's BatchNorm (with the batch_stats collection and apply(..., mutable=...)), ConvTranspose
(lax.conv_transpose), Upsample and tessera.image.resize, global_avg_pool: against numpy loops and values worked
out by hand."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera import lax, nn, random


def test_batchnorm_trains_on_batch_statistics_and_keeps_running_averages():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 5, 3)).astype(np.float32) * 2 + 1
    bn = nn.BatchNorm(use_running_average=False, momentum=0.9, epsilon=1e-5)
    variables = bn.init(random.PRNGKey(0), x)
    assert set(variables) == {"params", "batch_stats"}
    np.testing.assert_array_equal(np.asarray(variables["batch_stats"]["mean"]), np.zeros(3))
    np.testing.assert_array_equal(np.asarray(variables["batch_stats"]["var"]), np.ones(3))
    y, updates = bn.apply(variables, x, mutable=["batch_stats"])
    mean = x.reshape(-1, 3).mean(0)
    var = x.reshape(-1, 3).var(0)
    np.testing.assert_allclose(np.asarray(y), (x - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(updates["batch_stats"]["mean"]), 0.1 * mean, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(updates["batch_stats"]["var"]), 0.9 + 0.1 * var, rtol=1e-5)
    # The variables given are left as they were.
    np.testing.assert_array_equal(np.asarray(variables["batch_stats"]["mean"]), np.zeros(3))
    # Inference normalises with the running averages.
    stats = {"params": variables["params"], "batch_stats": updates["batch_stats"]}
    z = nn.BatchNorm(momentum=0.9, epsilon=1e-5).apply(stats, x, use_running_average=True)
    ra_mean, ra_var = 0.1 * mean, 0.9 + 0.1 * var
    np.testing.assert_allclose(np.asarray(z), (x - ra_mean) / np.sqrt(ra_var + 1e-5), rtol=1e-4, atol=1e-5)


def test_batchnorm_channels_first_scale_bias_and_errors():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    bn = nn.BatchNorm(axis=1, use_running_average=False)
    variables = bn.init(random.PRNGKey(0), x)
    params = {"scale": np.array([1.0, 2.0, 3.0], np.float32), "bias": np.array([0.5, 0.0, -1.0], np.float32)}
    y = bn.apply({"params": params, "batch_stats": variables["batch_stats"]}, x, mutable=["batch_stats"])[0]
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = x.var(axis=(0, 2, 3), keepdims=True)
    want = (x - mean) / np.sqrt(var + 1e-5) * params["scale"].reshape(1, 3, 1, 1) + params["bias"].reshape(1, 3, 1, 1)
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-4, atol=1e-5)
    with pytest.raises(RuntimeError, match="mutable"):
        bn.apply(variables, x)  # training updates batch_stats, which this apply may not write
    with pytest.raises(ValueError, match="use_running_average"):
        nn.BatchNorm().init(random.PRNGKey(0), x)


def test_batchnorm_in_a_model_trains_with_grad():
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            x = nn.Dense(4)(x)
            x = nn.BatchNorm(use_running_average=not train)(x)
            return nn.Dense(1)(nn.relu(x))

    rng = np.random.default_rng(2)
    x = rng.standard_normal((16, 3)).astype(np.float32)
    target = (x[:, :1] * 2 - x[:, 1:2]).astype(np.float32)
    net = Net()
    variables = net.init(random.PRNGKey(1), x, train=False)
    params, stats = variables["params"], variables["batch_stats"]

    def loss_fn(p, stats):
        out, updates = net.apply({"params": p, "batch_stats": stats}, x, train=True, mutable=["batch_stats"])
        return tnp.mean((out - target) ** 2), updates["batch_stats"]

    step = tessera.jit(tessera.value_and_grad(loss_fn, has_aux=True))
    losses = []
    for _ in range(30):
        (loss, stats), grads = step(params, stats)
        params = tessera.tree_util.tree_map(lambda w, g: w - 0.1 * g, params, grads)
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0]
    # The running mean moved towards the batch's mean of the first Dense's outputs.
    assert float(np.abs(np.asarray(stats["BatchNorm_0"]["mean"])).sum()) > 0


def conv_transpose_reference(x, k, stride, pads):
    """NHWC x, HWIO k: x dilated by stride, padded by pads ((lo, hi) per spatial dim), correlated at stride 1."""
    n, h, w, c = x.shape
    kh, kw, _, o = k.shape
    dh, dw = (h - 1) * stride[0] + 1, (w - 1) * stride[1] + 1
    dil = np.zeros((n, dh, dw, c), x.dtype)
    dil[:, ::stride[0], ::stride[1], :] = x
    (ph0, ph1), (pw0, pw1) = pads
    padded = np.zeros((n, dh + ph0 + ph1, dw + pw0 + pw1, c), x.dtype)
    padded[:, ph0:ph0 + dh, pw0:pw0 + dw, :] = dil
    oh, ow = padded.shape[1] - kh + 1, padded.shape[2] - kw + 1
    out = np.zeros((n, oh, ow, o), np.float64)
    for i in range(oh):
        for j in range(ow):
            out[:, i, j, :] = np.einsum("nhwc,hwco->no", padded[:, i:i + kh, j:j + kw, :], k)
    return out


@pytest.mark.parametrize("padding", ["SAME", "VALID", ((1, 2), (0, 1))])
@pytest.mark.parametrize("stride", [(1, 1), (2, 2), (3, 2)])
def test_conv_transpose_against_a_loop(padding, stride):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 5, 3)).astype(np.float32)
    k = rng.standard_normal((3, 2, 3, 4)).astype(np.float32)
    got = lax.conv_transpose(x, k, stride, padding, dimension_numbers=("NHWC", "HWIO", "NHWC"))
    if isinstance(padding, str):
        pads = [lax._conv_transpose_padding(e, s, padding) for e, s in zip(k.shape[:2], stride)]
    else:
        pads = padding
    want = conv_transpose_reference(x, k, stride, pads)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    if padding == "SAME":
        assert got.shape[1:3] == (4 * stride[0], 5 * stride[1])


def test_conv_transpose_with_transpose_kernel_is_the_gradient_of_conv():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 6, 6, 2)).astype(np.float32)
    k = rng.standard_normal((3, 3, 2, 5)).astype(np.float32)  # conv kernel: HWIO, 2 -> 5
    dn = ("NHWC", "HWIO", "NHWC")
    y, pullback = tessera.vjp(lambda x: lax.conv_general_dilated(x, k, (2, 2), "SAME", dimension_numbers=dn), x)
    g = rng.standard_normal(y.shape).astype(np.float32)
    (want,) = pullback(tnp.asarray(g))
    got = lax.conv_transpose(g, k, (2, 2), "SAME", dimension_numbers=dn, transpose_kernel=True)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)


def test_conv_transpose_module_shapes_and_params():
    x = np.ones((2, 4, 4, 3), np.float32)
    m = nn.ConvTranspose(features=6, kernel_size=(3, 3), strides=(2, 2))
    variables = m.init(random.PRNGKey(0), x)
    assert variables["params"]["kernel"].shape == (3, 3, 3, 6)
    assert variables["params"]["bias"].shape == (6,)
    assert m.apply(variables, x).shape == (2, 8, 8, 6)


def test_resize_nearest_and_linear_by_hand():
    x = np.array([[0.0, 1.0]], np.float32)  # [1, 2]
    # Upsampling 2 -> 4 samples at input positions -0.25, 0.25, 0.75, 1.25: the edges repeat.
    np.testing.assert_allclose(np.asarray(tessera.image.resize(x, (1, 4), "linear")), [[0.0, 0.25, 0.75, 1.0]],
                               atol=1e-6)
    np.testing.assert_array_equal(np.asarray(tessera.image.resize(x, (1, 4), "nearest")), [[0, 0, 1, 1]])
    # Shrinking 4 -> 2: the triangle widened by the scale (2), centred at 0.5 and 2.5, weights renormalised:
    # (2 * 0.75 + 4 * 0.25) / 1.75 and (2 * 0.25 + 4 * 0.75 + 6 * 0.75) / 1.75.
    y = np.array([[0.0, 2.0, 4.0, 6.0]], np.float32)
    np.testing.assert_allclose(np.asarray(tessera.image.resize(y, (1, 2), "linear")), [[10 / 7, 32 / 7]], atol=1e-5)
    with pytest.raises(ValueError, match="method"):
        tessera.image.resize(x, (1, 4), "cubic-ish")


def test_upsample_module_and_global_avg_pool():
    x = np.arange(2 * 2 * 3 * 1, dtype=np.float32).reshape(2, 2, 3, 1)
    up = nn.Upsample(scale_factor=2, method="nearest")
    y = up.apply(up.init(random.PRNGKey(0), x), x)
    np.testing.assert_array_equal(np.asarray(y), np.repeat(np.repeat(x, 2, axis=1), 2, axis=2))
    np.testing.assert_allclose(np.asarray(nn.global_avg_pool(x)), x.mean(axis=(1, 2)), rtol=1e-6)
    # Bilinear upsampling is differentiable: each input's gradient sums its weights (4 per input for 2x).
    g = tessera.grad(lambda v: tnp.sum(tessera.image.resize(v, (2, 4, 6, 1), "linear")))(x)
    np.testing.assert_allclose(np.asarray(g), np.full(x.shape, 4.0), rtol=1e-5)


def test_batchnorm_traces_one_op_when_fused():
    """With TESSERA_FUSED_BATCH_NORM=on, training traces BatchNorm as one batch_norm_training op (oneDNN's primitive
    on the CPU) and its gradient as batch_norm_grad; the default traces reductions. The values are numpy's."""
    from tessera import _tessera as C
    x = np.random.default_rng(3).standard_normal((6, 4, 5)).astype(np.float32)
    bn = nn.BatchNorm(use_running_average=False, epsilon=1e-3)
    variables = bn.init(random.PRNGKey(0), x)

    def loss(params):
        y, _ = bn.apply({"params": params, "batch_stats": variables["batch_stats"]}, x, mutable=["batch_stats"])
        return tnp.sum(y * y * 0.5 + y)

    text = tessera.trace(tessera.grad(loss))(variables["params"])
    fused = C.fused_batch_norm_default()
    assert ("batch_norm_training" in text) == fused and ("batch_norm_grad" in text) == fused
    y, mean, var = C.batch_norm_training(x, np.full(5, 2.0, np.float32), np.full(5, 0.5, np.float32), 1e-3, 2)
    m, v = x.reshape(-1, 5).mean(0), x.reshape(-1, 5).var(0)
    np.testing.assert_allclose(np.asarray(y), (x - m) / np.sqrt(v + 1e-3) * 2 + 0.5, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(mean), m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(var), v, rtol=1e-5, atol=1e-6)


def test_batchnorm_tests_pass_with_the_fused_op():
    """The BatchNorm tests of this file again with TESSERA_FUSED_BATCH_NORM=on (a process of their own: the switch
    is read once)."""
    if os.environ.get("TESSERA_FUSED_BATCH_NORM") == "on":
        pytest.skip("this process already runs them fused")
    env = dict(os.environ, TESSERA_FUSED_BATCH_NORM="on")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                        "batchnorm and not with_the_fused_op"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 passed" in r.stdout, r.stdout
