"""tessera.nn's DenseGeneral, Einsum, InstanceNorm, PReLU (tessera/linen.py) and the recurrent cells and RNN
(tessera/_linen_recurrent.py) against numpy implementations of Flax's definitions, run with the parameters the
modules made; gradients through an LSTM against finite differences."""
import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera import nn, random
from finite_differences import finite_difference

KEY = random.PRNGKey(0)
rng = np.random.default_rng(1)


def np_params(tree):
    return tessera.tree_util.tree_map(lambda a: np.asarray(a, np.float64), tree)


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def lstm_step(p, c, h, x):
    def lin(name, v, bias):
        out = v @ p[name]["kernel"]
        return out + p[name]["bias"] if bias else out
    i = sigmoid(lin("ii", x, False) + lin("hi", h, True))
    f = sigmoid(lin("if", x, False) + lin("hf", h, True))
    g = np.tanh(lin("ig", x, False) + lin("hg", h, True))
    o = sigmoid(lin("io", x, False) + lin("ho", h, True))
    c = f * c + i * g
    return c, o * np.tanh(c)


def gru_step(p, h, x):
    def lin(name, v):
        out = v @ p[name]["kernel"]
        return out + p[name]["bias"] if "bias" in p[name] else out
    r = sigmoid(lin("ir", x) + lin("hr", h))
    z = sigmoid(lin("iz", x) + lin("hz", h))
    n = np.tanh(lin("in", x) + r * lin("hn", h))
    return (1 - z) * n + z * h


def test_lstm_gru_simple_cells_in_an_rnn_match_numpy():
    x = rng.standard_normal((2, 6, 3)).astype(np.float32)
    m = nn.RNN(nn.LSTMCell(4), return_carry=True)
    v = m.init(KEY, x)
    (c_out, h_out), y = m.apply(v, x)
    p = np_params(v["params"]["cell"])
    c = h = np.zeros((2, 4))
    ys = []
    for t in range(6):
        c, h = lstm_step(p, c, h, x[:, t].astype(np.float64))
        ys.append(h)
    np.testing.assert_allclose(np.asarray(y), np.stack(ys, 1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(c_out), c, rtol=1e-5, atol=1e-6)
    assert set(v["params"]["cell"]) == {"ii", "if", "ig", "io", "hi", "hf", "hg", "ho"}
    assert "bias" not in v["params"]["cell"]["ii"] and "bias" in v["params"]["cell"]["hi"]

    g = nn.RNN(nn.GRUCell(5), time_major=True, reverse=True, keep_order=True)
    xt = np.swapaxes(x, 0, 1)
    vg = g.init(KEY, xt)
    pg = np_params(vg["params"]["cell"])
    h = np.zeros((2, 5))
    outs = [None] * 6
    for t in reversed(range(6)):
        h = gru_step(pg, h, xt[t].astype(np.float64))
        outs[t] = h
    np.testing.assert_allclose(np.asarray(g.apply(vg, xt)), np.stack(outs, 0), rtol=1e-5, atol=1e-6)

    s = nn.RNN(nn.SimpleCell(3))
    vs = s.init(KEY, x)
    ps = np_params(vs["params"]["cell"])
    h = np.zeros((2, 3))
    outs = []
    for t in range(6):
        h = np.tanh(x[:, t] @ ps["i"]["kernel"] + h @ ps["h"]["kernel"] + ps["h"]["bias"])
        outs.append(h)
    np.testing.assert_allclose(np.asarray(s.apply(vs, x)), np.stack(outs, 1), rtol=1e-5, atol=1e-6)
    # the recurrent kernels start orthogonal, as Flax's
    k = np.asarray(v["params"]["cell"]["hi"]["kernel"], np.float64)
    np.testing.assert_allclose(k.T @ k, np.eye(4), atol=1e-5)


def test_gradient_through_an_lstm_matches_finite_differences():
    x = rng.standard_normal((1, 4, 2)).astype(np.float32)
    m = nn.RNN(nn.LSTMCell(3))
    v = m.init(KEY, x)
    p = np_params(v["params"]["cell"])
    w = rng.standard_normal((1, 4, 3))

    def loss_np(xs):
        c = h = np.zeros((1, 3))
        total = 0.0
        for t in range(4):
            c, h = lstm_step(p, c, h, xs[:, t])
            total += np.sum(h * w[:, t])
        return total

    g = tessera.jit(tessera.grad(lambda xs: tnp.sum(m.apply(v, xs) * w.astype(np.float32))))(x)
    np.testing.assert_allclose(np.asarray(g), finite_difference(loss_np, x), rtol=2e-3, atol=2e-4)


def test_dense_general_einsum_instance_norm_prelu():
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    d = nn.DenseGeneral((2, 6), axis=(-2, -1))
    v = d.init(KEY, x)
    kern, bias = np.asarray(v["params"]["kernel"]), np.asarray(v["params"]["bias"])
    assert kern.shape == (4, 5, 2, 6) and bias.shape == (2, 6)
    np.testing.assert_allclose(np.asarray(d.apply(v, x)), np.tensordot(x, kern, axes=([2, 3], [0, 1])) + bias,
                               rtol=1e-5, atol=1e-6)
    e = nn.Einsum((5, 7), "abcd,de->abce")
    ve = e.init(KEY, x)
    ke, be = np.asarray(ve["params"]["kernel"]), np.asarray(ve["params"]["bias"])
    assert be.shape == (7,)
    np.testing.assert_allclose(np.asarray(e.apply(ve, x)), np.einsum("abcd,de->abce", x, ke) + be, rtol=1e-5,
                               atol=1e-6)
    with pytest.raises(ValueError, match="do not fit its shape"):
        nn.Einsum((5,), "abcd,de->abce").init(KEY, x)
    n = nn.InstanceNorm()
    vn = n.init(KEY, x)
    mean = x.mean(axis=(1, 2), keepdims=True)
    var = x.var(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(np.asarray(n.apply(vn, x)), (x - mean) / np.sqrt(var + 1e-6), rtol=1e-4, atol=1e-5)
    pr = nn.PReLU(negative_slope_init=0.2)
    vp = pr.init(KEY, x)
    np.testing.assert_allclose(np.asarray(pr.apply(vp, x)), np.where(x >= 0, x, 0.2 * x), rtol=1e-6)


def test_rnn_runs_its_steps_as_one_scan():
    x = rng.standard_normal((2, 40, 3)).astype(np.float32)
    m = nn.RNN(nn.GRUCell(4), reverse=True)
    v = m.init(KEY, x)
    p = np_params(v["params"]["cell"])
    h = np.zeros((2, 4))
    outs = []
    for t in reversed(range(40)):
        h = gru_step(p, h, x[:, t].astype(np.float64))
        outs.append(h)
    np.testing.assert_allclose(np.asarray(tessera.jit(m.apply)(v, x)), np.stack(outs, 1), rtol=1e-4, atol=1e-5)
    ir = tessera.trace(lambda xs: m.apply(v, xs))(x)
    assert ir.count(" scan") + ir.count("scan(") >= 1 and ir.count("logistic") < 10  # one loop, not 40 cells
    one = nn.RNN(nn.SimpleCell(2))
    y = one.apply(one.init(KEY, x[:, :1]), x[:, :1])
    assert y.shape == (2, 1, 2)
    with pytest.raises(ValueError, match="no time steps"):
        one.apply(one.init(KEY, x[:, :1]), x[:, :0])
