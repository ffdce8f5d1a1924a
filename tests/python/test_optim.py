"""tessera.optim: each optimizer against its update formula written out in numpy, over a few steps; schedules
against their formulas; a small model trained with jit, value_and_grad and adamw."""
import math

import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera import optim, tree_util


def close(actual, expected, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=rtol, atol=atol)


def run(opt, params, grads_per_step, jit=False):
    """The parameters after one update per entry of grads_per_step."""
    p = tree_util.tree_map(tnp.asarray, params)
    state = opt.init(p)

    def step(p, state, g):
        updates, state = opt.update(g, state, p)
        return optim.apply_updates(p, updates), state

    step = tessera.jit(step) if jit else step
    for g in grads_per_step:
        p, state = step(p, state, tree_util.tree_map(tnp.asarray, g))
    return p


@pytest.fixture
def problem(rng):
    params = {"w": rng.standard_normal((2, 3)).astype(np.float32), "b": rng.standard_normal(3).astype(np.float32)}
    grads = [{k: rng.standard_normal(v.shape).astype(np.float32) for k, v in params.items()} for _ in range(4)]
    return params, grads


@pytest.mark.parametrize("jit", [False, True])
def test_sgd_and_momentum(problem, jit):
    params, grads = problem
    got = run(optim.sgd(0.1), params, grads, jit)
    for k in params:
        close(got[k], params[k] - 0.1 * sum(g[k] for g in grads))
    for nesterov in (False, True):
        got = run(optim.sgd(0.1, momentum=0.9, nesterov=nesterov), params, grads, jit)
        for k in params:
            p, t = params[k].astype(np.float64), np.zeros_like(params[k], np.float64)
            for g in grads:
                t = g[k] + 0.9 * t
                p = p - 0.1 * (g[k] + 0.9 * t if nesterov else t)
            close(got[k], p, rtol=1e-5, atol=1e-5)


def adam_reference(params, grads, lr, b1, b2, eps, wd=0.0, mask=None):
    out = {}
    for k in params:
        p = params[k].astype(np.float64)
        m = np.zeros_like(p)
        v = np.zeros_like(p)
        for t, g in enumerate(grads, start=1):
            m = b1 * m + (1 - b1) * g[k]
            v = b2 * v + (1 - b2) * g[k] ** 2
            u = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
            if mask is None or mask[k]:
                u = u + wd * p
            p = p - lr * u
        out[k] = p
    return out


@pytest.mark.parametrize("jit", [False, True])
def test_adam_and_adamw(problem, jit):
    params, grads = problem
    got = run(optim.adam(0.01, b1=0.8, b2=0.95, eps=1e-6), params, grads, jit)
    want = adam_reference(params, grads, 0.01, 0.8, 0.95, 1e-6)
    for k in params:
        close(got[k], want[k], rtol=1e-5, atol=1e-6)
    mask = {"w": True, "b": False}
    got = run(optim.adamw(0.01, weight_decay=0.1, mask=mask), params, grads, jit)
    want = adam_reference(params, grads, 0.01, 0.9, 0.999, 1e-8, wd=0.1, mask=mask)
    for k in params:
        close(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_clip_by_global_norm_and_chain(problem):
    params, grads = problem
    g = grads[0]
    norm = math.sqrt(sum(float(np.sum(v.astype(np.float64) ** 2)) for v in g.values()))
    close(optim.global_norm(tree_util.tree_map(tnp.asarray, g)), norm, rtol=1e-5)
    got = run(optim.chain(optim.clip_by_global_norm(0.5), optim.sgd(1.0)), params, [g])
    for k in params:
        close(got[k], params[k] - g[k] * 0.5 / norm, rtol=1e-5)
    got = run(optim.chain(optim.clip_by_global_norm(1e6), optim.sgd(1.0)), params, [g])
    for k in params:
        close(got[k], params[k] - g[k], rtol=1e-5)


def test_schedules():
    lin = optim.linear_schedule(1.0, 0.1, transition_steps=10, transition_begin=5)
    cos = optim.cosine_decay_schedule(2.0, decay_steps=20, alpha=0.1)
    wc = optim.warmup_cosine_decay_schedule(0.0, 1.0, warmup_steps=5, decay_steps=25, end_value=0.05)
    for count in [0, 3, 5, 9, 15, 20, 30]:
        close(lin(count), 1.0 + min(max((count - 5) / 10, 0), 1) * (0.1 - 1.0), rtol=1e-6)
        c = min(count, 20)
        close(cos(count), 2.0 * (0.9 * 0.5 * (1 + math.cos(math.pi * c / 20)) + 0.1), rtol=1e-6)
        if count < 5:
            want = count / 5
        else:
            d = min(count - 5, 20)
            want = (1 - 0.05) * 0.5 * (1 + math.cos(math.pi * d / 20)) + 0.05
        close(wc(count), want, rtol=1e-6, atol=1e-7)
    assert optim.constant_schedule(0.3)(7) == 0.3


def test_a_learning_rate_schedule_drives_the_updates(problem):
    params, grads = problem
    schedule = optim.linear_schedule(0.1, 0.0, transition_steps=4)
    got = run(optim.sgd(schedule), params, grads, jit=True)
    for k in params:
        close(got[k], params[k] - sum((0.1 - 0.025 * i) * g[k] for i, g in enumerate(grads)), rtol=1e-5)


def test_training_an_mlp_with_jit_value_and_grad_and_adamw(rng):
    """The tutorial habit: the loss of a small MLP on a learnable target falls by 10x."""
    from tessera import nn, random

    k1, k2, k3 = random.split(random.PRNGKey(0), 3)
    params = {"w1": random.normal(k1, (4, 32)) * 0.5, "b1": tnp.zeros((32,)),
              "w2": random.normal(k2, (32, 1)) * 0.2, "b2": tnp.zeros((1,))}
    x = random.normal(k3, (64, 4))
    y = tnp.sin(x[:, :1] * 2.0) + x[:, 1:2] * x[:, 2:3]

    def loss(p, x, y):
        h = nn.gelu(x @ p["w1"] + p["b1"])
        return tnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)

    opt = optim.adamw(optim.warmup_cosine_decay_schedule(0.0, 0.02, 20, 400), weight_decay=1e-4)

    @tessera.jit
    def step(p, state, x, y):
        value, g = tessera.value_and_grad(loss)(p, x, y)
        updates, state = opt.update(g, state, p)
        return optim.apply_updates(p, updates), state, value

    state = opt.init(params)
    first = float(loss(params, x, y))
    for _ in range(400):
        params, state, value = step(params, state, x, y)
    assert float(value) < first / 10
    assert step.cache_info()["misses"] == 1
