"""tessera.optim's optimizers, schedules and losses against numpy implementations of Optax's update rules,
written here from their published definitions and run on the same gradients (float64), over several steps,
eagerly and under jit."""
import math

import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera import optim

rng = np.random.default_rng(0)
P0 = {"w": rng.standard_normal(6).astype(np.float32), "b": rng.standard_normal(3).astype(np.float32)}
GRADS = [{k: rng.standard_normal(v.shape).astype(np.float32) for k, v in P0.items()} for _ in range(12)]


def run(opt, steps=12, jit=False):
    params = {k: tnp.asarray(v) for k, v in P0.items()}
    state = opt.init(params)

    def step(params, state, g):
        updates, state = opt.update(g, state, params)
        return optim.apply_updates(params, updates), state

    f = tessera.jit(step) if jit else step
    for g in GRADS[:steps]:
        params, state = f(params, state, {k: tnp.asarray(v) for k, v in g.items()})
    return {k: np.asarray(v, np.float64) for k, v in params.items()}


def reference(rule, steps=12):
    """rule(g, p, state, t) -> (update, state) per leaf, numpy float64; returns the parameters after steps."""
    out = {}
    for k, p in P0.items():
        p = p.astype(np.float64)
        state = None
        for t, g in enumerate(GRADS[:steps], start=1):
            u, state = rule(g[k].astype(np.float64), p, state, t)
            p = p + u
        out[k] = p
    return out


def same(got, want, rtol=2e-5):
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=1e-6)


def rms_rule(lr, decay, eps, centered=False, momentum=None):
    def rule(g, p, s, t):
        mu, nu, tr = s if s is not None else (0 * g, 0 * g, 0 * g)
        nu = decay * nu + (1 - decay) * g * g
        if centered:
            mu = decay * mu + (1 - decay) * g
            u = -lr * g / np.sqrt(nu - mu * mu + eps)
        else:
            u = -lr * g / np.sqrt(nu + eps)
        if momentum is not None:
            tr = u + momentum * tr
            u = tr
        return u, (mu, nu, tr)
    return rule


@pytest.mark.parametrize("kw", [{}, {"centered": True}, {"momentum": 0.9}])
def test_rmsprop(kw):
    same(run(optim.rmsprop(0.01, decay=0.9, eps=1e-8, **kw)), reference(rms_rule(0.01, 0.9, 1e-8, **kw)))


def test_adagrad_adamax_nadam_radam_lion_lamb():
    def adagrad(g, p, s, t):
        s = (0.1 if s is None else s) + g * g
        return -0.05 * g / np.sqrt(s + 1e-7), s
    same(run(optim.adagrad(0.05)), reference(adagrad))

    def adamax(g, p, s, t):
        m, v = s if s is not None else (0 * g, 0 * g)
        m = 0.9 * m + 0.1 * g
        v = np.maximum(0.999 * v, np.abs(g))
        return -0.02 * (m / (1 - 0.9 ** t)) / (v + 1e-8), (m, v)
    same(run(optim.adamax(0.02)), reference(adamax))

    def nadam(g, p, s, t):
        m, v = s if s is not None else (0 * g, 0 * g)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        m_hat = 0.9 * m / (1 - 0.9 ** (t + 1)) + 0.1 * g / (1 - 0.9 ** t)
        return -0.01 * m_hat / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8), (m, v)
    same(run(optim.nadam(0.01)), reference(nadam))

    def radam(g, p, s, t):
        m, v = s if s is not None else (0 * g, 0 * g)
        m = 0.9 * m + 0.1 * g
        v = 0.99 * v + 0.01 * g * g
        ro_inf = 2 / (1 - 0.99) - 1
        ro = ro_inf - 2 * t * 0.99 ** t / (1 - 0.99 ** t)
        m_hat = m / (1 - 0.9 ** t)
        if ro >= 5:
            r = math.sqrt((ro - 4) * (ro - 2) * ro_inf / ((ro_inf - 4) * (ro_inf - 2) * ro))
            return -0.01 * r * m_hat / (np.sqrt(v / (1 - 0.99 ** t)) + 1e-8), (m, v)
        return -0.01 * m_hat, (m, v)
    same(run(optim.radam(0.01, b2=0.99)), reference(radam))  # b2 0.99: the rectified steps start at t = 6

    def lion(g, p, s, t):
        m = 0 * g if s is None else s
        u = np.sign(0.1 * g + 0.9 * m) + 1e-3 * p
        return -0.003 * u, 0.01 * g + 0.99 * m
    same(run(optim.lion(0.003)), reference(lion))

    def lamb(g, p, s, t):
        m, v = s if s is not None else (0 * g, 0 * g)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        u = (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-6) + 0.01 * p
        ratio = np.linalg.norm(p) / np.linalg.norm(u)
        return -0.01 * ratio * u, (m, v)
    same(run(optim.lamb(0.01, weight_decay=0.01)), reference(lamb), rtol=1e-4)


def test_the_optimizers_give_the_same_under_jit():
    for opt in (optim.rmsprop(0.01, centered=True, momentum=0.5), optim.radam(0.01, b2=0.99), optim.lamb(0.01),
                optim.lion(0.003)):
        same(run(opt, jit=True), run(opt), rtol=1e-5)


def test_multisteps_applies_the_mean_of_every_k_gradients():
    opt = optim.MultiSteps(optim.sgd(0.1), every_k_schedule=3)
    got = run(opt.gradient_transformation(), steps=9)
    want = {k: P0[k].astype(np.float64) - 0.1 * sum(g[k] for g in GRADS[:9]) / 3 for k in P0}
    same(got, want)
    got8 = run(opt.gradient_transformation(), steps=8)  # the last two gradients are still waiting
    want8 = {k: P0[k].astype(np.float64) - 0.1 * sum(g[k] for g in GRADS[:6]) / 3 for k in P0}
    same(got8, want8)
    same(run(opt.gradient_transformation(), steps=9, jit=True), want)


def test_transformations_clip_ema_zero_nans_masked_trust_ratio():
    g = {"w": tnp.asarray(np.array([3.0, -0.2, np.nan], np.float32))}
    u, _ = optim.clip(1.0).update(g, optim.clip(1.0).init(g))
    np.testing.assert_allclose(np.asarray(u["w"])[:2], [1.0, -0.2], rtol=1e-7)
    u, _ = optim.zero_nans().update(g, optim.zero_nans().init(g))
    np.testing.assert_allclose(np.asarray(u["w"]), [3.0, -0.2, 0.0], rtol=1e-7)
    e = optim.ema(0.5)
    s = e.init({"x": tnp.zeros(2)})
    out1, s = e.update({"x": tnp.asarray([2.0, 4.0])}, s)
    out2, s = e.update({"x": tnp.asarray([4.0, 0.0])}, s)
    np.testing.assert_allclose(np.asarray(out1["x"]), [2.0, 4.0])  # debiased: the first value itself
    np.testing.assert_allclose(np.asarray(out2["x"]), np.array([0.5 * 4 + 0.25 * 2, 0.25 * 4]) / 0.75)
    m = optim.masked(optim.scale(10.0), {"w": True, "b": False})
    params = {k: tnp.asarray(v) for k, v in P0.items()}
    u, _ = m.update({k: tnp.ones_like(v) for k, v in params.items()}, m.init(params), params)
    np.testing.assert_array_equal(np.asarray(u["w"]), 10.0)
    np.testing.assert_array_equal(np.asarray(u["b"]), 1.0)
    tr = optim.scale_by_trust_ratio()
    u, _ = tr.update({"w": tnp.asarray([3.0, 4.0])}, tr.init(None), {"w": tnp.asarray([0.0, 10.0])})
    np.testing.assert_allclose(np.asarray(u["w"]), np.array([3.0, 4.0]) * 10 / 5)


def test_schedules():
    steps = np.arange(0, 40)
    f = optim.exponential_decay(1.0, 10, 0.5, transition_begin=5)
    np.testing.assert_allclose([float(f(s)) for s in steps], [0.5 ** (max(s - 5, 0) / 10) for s in steps], rtol=1e-6)
    f = optim.exponential_decay(1.0, 10, 0.5, staircase=True, end_value=0.3)
    np.testing.assert_allclose([float(f(s)) for s in steps], [max(0.5 ** (s // 10), 0.3) for s in steps], rtol=1e-6)
    f = optim.piecewise_constant_schedule(2.0, {10: 0.5, 25: 0.1})
    np.testing.assert_allclose([float(f(s)) for s in steps], [2.0 * (0.5 if s >= 10 else 1) * (0.1 if s >= 25 else 1)
                                                             for s in steps], rtol=1e-6)
    f = optim.polynomial_schedule(1.0, 0.1, 2.0, 20, transition_begin=4)
    np.testing.assert_allclose([float(f(s)) for s in steps],
                               [0.9 * (1 - min(max(s - 4, 0), 20) / 20) ** 2 + 0.1 for s in steps], rtol=1e-6)
    f = optim.warmup_exponential_decay_schedule(0.0, 1.0, 5, 10, 0.5)
    np.testing.assert_allclose([float(f(s)) for s in steps],
                               [s / 5 if s < 5 else 0.5 ** ((s - 5) / 10) for s in steps], rtol=1e-6, atol=1e-7)


def test_losses():
    p = rng.standard_normal((4, 5)).astype(np.float32)
    t = rng.standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(optim.l2_loss(tnp.asarray(p), t)), 0.5 * (p - t) ** 2, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(optim.squared_error(tnp.asarray(p), t)), (p - t) ** 2, rtol=1e-6)
    e = np.abs(p - t)
    np.testing.assert_allclose(np.asarray(optim.huber_loss(tnp.asarray(p), t, delta=0.7)),
                               np.where(e <= 0.7, 0.5 * e * e, 0.7 * (e - 0.35)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(optim.log_cosh(tnp.asarray(p * 100), t)),
                               np.logaddexp(100 * p - t, t - 100 * p) - math.log(2), rtol=1e-5)
    labels = (rng.uniform(size=(4, 5)) > 0.5).astype(np.float32)
    sig = 1 / (1 + np.exp(-p.astype(np.float64)))
    np.testing.assert_allclose(np.asarray(optim.sigmoid_binary_cross_entropy(tnp.asarray(p), labels)),
                               -labels * np.log(sig) - (1 - labels) * np.log(1 - sig), rtol=1e-5)
    dist = np.exp(t) / np.exp(t).sum(-1, keepdims=True)
    log_sm = p - np.log(np.exp(p.astype(np.float64)).sum(-1, keepdims=True))
    np.testing.assert_allclose(np.asarray(optim.softmax_cross_entropy(tnp.asarray(p), dist)),
                               -(dist * log_sm).sum(-1), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(optim.kl_divergence(tnp.asarray(log_sm.astype(np.float32)), dist)),
                               (dist * (np.log(dist) - log_sm)).sum(-1), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.asarray(optim.hinge_loss(tnp.asarray(p), np.sign(t))),
                               np.maximum(0, 1 - p * np.sign(t)), rtol=1e-6)
    cos = (p * t).sum(-1) / (np.linalg.norm(p, axis=-1) * np.linalg.norm(t, axis=-1))
    np.testing.assert_allclose(np.asarray(optim.cosine_similarity(tnp.asarray(p), t)), cos, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(optim.cosine_distance(tnp.asarray(p), t)), 1 - cos, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(optim.smooth_labels(tnp.asarray(labels), 0.1)), 0.9 * labels + 0.02,
                               rtol=1e-6)
