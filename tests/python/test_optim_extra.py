"""tessera.optim's Adafactor, AdaBelief, SM3, Yogi, AdaDelta, Fromage, NovoGrad, noisy SGD, apply_if_finite and
inject_hyperparams against numpy float64 implementations of Optax's update rules written here from their
published definitions, run on the same gradients over 12 steps, eagerly and under jit."""
import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera import optim

rng = np.random.default_rng(1)
# a matrix, a 3-d kernel, a vector and a scalar: Adafactor and SM3 treat each rank differently
P0 = {"w": rng.standard_normal((5, 8)), "k": rng.standard_normal((2, 3, 4)), "b": rng.standard_normal(3),
      "s": np.array(0.7)}
P0 = {k: v.astype(np.float32) for k, v in P0.items()}
GRADS = [{k: rng.standard_normal(v.shape).astype(np.float32) for k, v in P0.items()} for _ in range(12)]


def as_tree(np_tree):
    return {k: tnp.asarray(v) for k, v in np_tree.items()}


def run(opt, grads=GRADS, jit=False):
    """The parameters after one update per gradient, and the final state."""
    params = as_tree(P0)
    state = opt.init(params)

    def step(params, state, g):
        updates, state = opt.update(g, state, params)
        return optim.apply_updates(params, updates), state

    f = tessera.jit(step) if jit else step
    for g in grads:
        params, state = f(params, state, as_tree(g))
    return {k: np.asarray(v, np.float64) for k, v in params.items()}, state


def reference(rule, grads=GRADS):
    """rule(g, p, state, t) -> (update, state) per leaf in float64, t counting from 1."""
    out = {}
    for k, p in P0.items():
        p = p.astype(np.float64)
        state = None
        for t, g in enumerate(grads, start=1):
            u, state = rule(g[k].astype(np.float64), p, state, t)
            p = p + u
        out[k] = p
    return out


def same(got, want, rtol=2e-5, atol=1e-6):
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=atol, err_msg=k)


def check(opt, rule, rtol=2e-5, atol=1e-6):
    """opt against rule, eagerly and under jit."""
    want = reference(rule)
    same(run(opt)[0], want, rtol, atol)
    same(run(opt, jit=True)[0], want, rtol, atol)


def rms(x):
    return np.sqrt(np.mean(x * x))


# ---- Adafactor ----


def factored_axes(shape, min_dim):
    """(second largest, largest) axis, a later axis counting as larger on a tie; None below 2-d or min_dim."""
    if len(shape) < 2:
        return None
    by_size = sorted(range(len(shape)), key=lambda i: (shape[i], i))
    d1, d0 = by_size[-2], by_size[-1]
    return None if shape[d1] < min_dim else (d1, d0)


def adafactor_rule(lr, min_dim=128, decay_rate=0.8, offset=0, param_scale=True, clip=1.0, momentum=None,
                   wd=None, eps=1e-30):
    """Shazeer & Stern's Adafactor as Optax composes it; lr may be a function of the step (from 0)."""

    def rule(g, p, s, t):
        axes = factored_axes(g.shape, min_dim)
        beta2 = 1 - (t - offset) ** -decay_rate
        g2 = g * g + eps
        if s is None:
            s = {"m": np.zeros_like(g)}
            if axes is None:
                s["v"] = np.zeros_like(g)
            else:
                s["r"], s["c"] = np.zeros_like(g2.mean(axis=axes[1])), np.zeros_like(g2.mean(axis=axes[0]))
        if axes is None:
            s["v"] = beta2 * s["v"] + (1 - beta2) * g2
            v = s["v"]
        else:
            d1, d0 = axes
            s["r"] = beta2 * s["r"] + (1 - beta2) * g2.mean(axis=d0)   # the largest axis averaged out
            s["c"] = beta2 * s["c"] + (1 - beta2) * g2.mean(axis=d1)
            r, c = np.expand_dims(s["r"], d0), np.expand_dims(s["c"], d1)
            v = r * c / np.mean(r, axis=d1, keepdims=True)  # the rank-1 estimate of the full second moment
        u = g / np.sqrt(v)
        if clip is not None:
            u = u / max(1.0, rms(u) / clip)
        if lr is not None:
            u = u * (lr(t - 1) if callable(lr) else lr)
        if param_scale:
            u = u * max(rms(p), 1e-3)
        if momentum is not None:
            s["m"] = momentum * s["m"] + (1 - momentum) * u
            u = s["m"]
        if wd is not None:
            u = u + wd * p
        return -u, s

    return rule


@pytest.mark.parametrize("kw", [{}, {"min_dim_size_to_factor": 3}, {"min_dim_size_to_factor": 2, "momentum": 0.9,
                                                                   "weight_decay_rate": 0.01, "decay_offset": -2},
                                {"clipping_threshold": None, "multiply_by_parameter_scale": False}])
def test_adafactor(kw):
    rule_kw = {"min_dim": kw.get("min_dim_size_to_factor", 128), "momentum": kw.get("momentum"),
               "wd": kw.get("weight_decay_rate"), "offset": kw.get("decay_offset", 0),
               "clip": kw.get("clipping_threshold", 1.0), "param_scale": kw.get("multiply_by_parameter_scale", True)}
    check(optim.adafactor(0.05, **kw), adafactor_rule(0.05, **rule_kw), rtol=1e-4)


def test_adafactor_without_learning_rate_and_with_a_schedule():
    check(optim.adafactor(), adafactor_rule(None), rtol=1e-4)
    sched = optim.linear_schedule(0.1, 0.01, 10)
    check(optim.adafactor(sched, min_dim_size_to_factor=3),
          adafactor_rule(lambda c: 0.1 + min(c / 10, 1.0) * (0.01 - 0.1), min_dim=3), rtol=1e-4)


def test_adafactor_factors_the_two_largest_dims():
    params = {"w": tnp.zeros((5, 8)), "k": tnp.zeros((2, 3, 4)), "tie": tnp.zeros((6, 1, 6)), "b": tnp.zeros(3),
              "small": tnp.zeros((2, 9))}
    state = optim.scale_by_factored_rms(min_dim_size_to_factor=3).init(params)
    shapes = {name: {k: tuple(getattr(state, name)[k].shape) for k in params} for name in ("v_row", "v_col", "v")}
    # the row statistic drops the largest dim, the column one the second largest (the first of equal ones)
    assert shapes["v_row"] == {"w": (5,), "k": (2, 3), "tie": (6, 1), "b": (1,), "small": (1,)}
    assert shapes["v_col"] == {"w": (8,), "k": (2, 4), "tie": (1, 6), "b": (1,), "small": (1,)}
    assert shapes["v"] == {"w": (1,), "k": (1,), "tie": (1,), "b": (3,), "small": (2, 9)}
    unfactored = optim.scale_by_factored_rms(factored=False).init(params)
    assert {k: tuple(v.shape) for k, v in unfactored.v.items()} == {k: tuple(v.shape) for k, v in params.items()}
    assert all(tuple(v.shape) == (1,) for v in list(unfactored.v_row.values()) + list(unfactored.v_col.values()))
    assert int(state.count) == 0


# ---- AdaBelief, Yogi, AdaDelta, SM3, NovoGrad, Fromage ----


def adabelief_rule(lr, b1=0.9, b2=0.999, eps=1e-16, eps_root=1e-16, wd=None, nesterov=False):
    def rule(g, p, s, t):
        m, v = s if s is not None else (0 * g, 0 * g)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * (g - m) ** 2 + eps_root
        if nesterov:
            m_hat = b1 * m / (1 - b1 ** (t + 1)) + (1 - b1) * g / (1 - b1 ** t)
        else:
            m_hat = m / (1 - b1 ** t)
        u = m_hat / (np.sqrt(v / (1 - b2 ** t)) + eps)
        if wd is not None:
            u = u + wd * p
        return -lr * u, (m, v)

    return rule


@pytest.mark.parametrize("kw", [{}, {"nesterov": True}, {"weight_decay": 0.01}])
def test_adabelief(kw):
    rule_kw = {"nesterov": kw.get("nesterov", False), "wd": kw.get("weight_decay")}
    check(optim.adabelief(0.01, **kw), adabelief_rule(0.01, **rule_kw), rtol=1e-4)


def test_yogi():
    def rule(g, p, s, t):
        m, v = s if s is not None else (np.full_like(g, 1e-6), np.full_like(g, 1e-6))
        m = 0.9 * m + 0.1 * g
        v = v - 0.001 * np.sign(v - g * g) * g * g
        return -0.02 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-3), (m, v)
    check(optim.yogi(0.02), rule, rtol=1e-4)


@pytest.mark.parametrize("lr,wd", [(1.0, 0.0), (0.5, 0.01), (None, 0.0)])
def test_adadelta(lr, wd):
    def rule(g, p, s, t):
        eg, ex = s if s is not None else (0 * g, 0 * g)
        g = g + wd * p
        eg = 0.9 * eg + 0.1 * g * g
        u = np.sqrt(ex + 1e-6) / np.sqrt(eg + 1e-6) * g
        ex = 0.9 * ex + 0.1 * u * u
        return (u if lr is None else -lr * u), (eg, ex)  # Optax: no learning rate, no sign flip
    check(optim.adadelta(lr, weight_decay=wd), rule)


def sm3_rule(lr, momentum=0.9, eps=1e-8):
    """Anil et al.'s SM3-II: one accumulator per (axis, index); nu at an element is the smallest accumulator
    over its axes plus g^2, and each accumulator becomes the largest nu over its slice."""

    def rule(g, p, s, t):
        if g.ndim < 2:
            acc, m = s if s is not None else (np.zeros_like(g), 0 * g)
            nu = acc + g * g
            new_acc = nu
        else:
            accs, m = s if s is not None else ([np.zeros(n) for n in g.shape], 0 * g)
            idx = np.indices(g.shape)
            nu = np.minimum.reduce([accs[a][idx[a]] for a in range(g.ndim)]) + g * g
            new_acc = [np.array([nu.take(i, axis=a).max() for i in range(g.shape[a])]) for a in range(g.ndim)]
        m = momentum * m + (1 - momentum) * g / np.sqrt(nu + eps)
        return -lr * m, (new_acc, m)

    return rule


def test_sm3():
    check(optim.sm3(0.1), sm3_rule(0.1))
    check(optim.sm3(0.05, momentum=0.5), sm3_rule(0.05, momentum=0.5))
    state = optim.scale_by_sm3().init(as_tree(P0))
    assert [tuple(a.shape) for a in state.mu["k"]] == [(2,), (3,), (4,)]
    assert [tuple(a.shape) for a in state.mu["b"]] == [(3,)]


@pytest.mark.parametrize("wd", [0.0, 0.05])
def test_novograd(wd):
    def rule(g, p, s, t):
        sq = np.sum(g * g)
        if s is None:
            v = sq
            m = g / (np.sqrt(v) + 1e-6) + wd * p
        else:
            m, v = s
            v = 0.25 * v + 0.75 * sq
            m = 0.9 * m + g / (np.sqrt(v) + 1e-6) + wd * p
        return -0.05 * m, (m, v)
    check(optim.novograd(0.05, weight_decay=wd), rule, rtol=1e-4)


def test_fromage():
    def rule(lr_of):
        def one(g, p, s, t):
            lr = lr_of(t - 1)
            mult = 1 / np.sqrt(1 + lr * lr)
            # the step keeps each leaf's norm ratio: p <- mult (p - lr |p| / |g| g)
            return mult * (p - lr * np.linalg.norm(p) / np.linalg.norm(g) * g) - p, None
        return one
    check(optim.fromage(0.1), rule(lambda c: 0.1))
    check(optim.fromage(optim.linear_schedule(0.2, 0.02, 8)), rule(lambda c: 0.2 - 0.18 * min(c / 8, 1.0)))


# ---- noisy SGD, apply_if_finite, inject_hyperparams ----


def test_noisy_sgd_adds_annealed_gaussian_noise():
    # the noise itself comes from tessera.random (checked against JAX's bits elsewhere): split the state's key,
    # then the second half into one key per leaf in the tree's (sorted) leaf order
    key = tessera.random.PRNGKey(7)
    names = sorted(P0)
    want = {k: P0[k].astype(np.float64) for k in P0}
    for t, g in enumerate(GRADS, start=1):
        key, sample = tessera.random.split(key)
        keys = tessera.random.split(sample, len(names))
        std = np.sqrt(0.01 / t ** 0.55)
        for i, k in enumerate(names):
            noise = np.asarray(tessera.random.normal(keys[i], P0[k].shape), np.float64)
            want[k] = want[k] - 0.1 * (g[k] + std * noise)
    opt = optim.noisy_sgd(0.1, key=7)
    same(run(opt)[0], want, rtol=1e-5)
    same(run(opt, jit=True)[0], want, rtol=1e-5)
    same(run(optim.noisy_sgd(0.1, key=tessera.random.PRNGKey(7)))[0], want, rtol=1e-5)
    assert not np.allclose(run(optim.noisy_sgd(0.1, key=8))[0]["w"], want["w"])


def test_apply_if_finite_skips_non_finite_steps():
    bad = {2, 5, 6, 9, 10, 11}  # runs of 1, 2 and 3 non-finite steps
    grads = [{k: np.where(np.arange(v.size).reshape(v.shape) == 0, np.nan, v) if t in bad else v
              for k, v in g.items()} for t, g in enumerate(GRADS)]
    opt = optim.apply_if_finite(optim.adam(0.01), max_consecutive_errors=2)

    def adam(g, p, s, t):
        m, v, n = s if s is not None else (0 * g, 0 * g, 0)
        if t - 1 in bad:
            return np.zeros_like(g), (m, v, n)
        n += 1
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        return -0.01 * (m / (1 - 0.9 ** n)) / (np.sqrt(v / (1 - 0.999 ** n)) + 1e-8), (m, v, n)

    for jit in (False, True):
        got, state = run(opt, grads[:11], jit=jit)
        same(got, reference(adam, grads[:11]), rtol=1e-4)
        assert int(state.notfinite_count) == 2 and not bool(state.last_finite)
        assert int(state.total_notfinite) == 5 and int(state.inner_state[0].count) == 11 - 5
        # a third non-finite step in a row is applied: the NaN reaches the parameters, as in Optax
        got, state = run(opt, grads, jit=jit)
        assert np.isnan(got["w"]).any() and int(state.notfinite_count) == 3 and int(state.total_notfinite) == 6


def adam_rule(lr_of, b1=0.9):
    def rule(g, p, s, t):
        m, v = s if s is not None else (0 * g, 0 * g)
        m = b1 * m + (1 - b1) * g
        v = 0.999 * v + 0.001 * g * g
        return -lr_of(t) * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8), (m, v)
    return rule


def test_inject_hyperparams_keeps_numbers_in_the_state():
    opt = optim.inject_hyperparams(optim.adam)(learning_rate=0.01, b1=0.8)
    state = opt.init(as_tree(P0))
    assert sorted(state.hyperparams) == ["b1", "b2", "eps", "eps_root", "learning_rate"]
    assert state.hyperparams["learning_rate"].dtype == np.float32 and float(state.hyperparams["b1"]) == np.float32(0.8)
    check(opt, adam_rule(lambda t: 0.01, b1=0.8), rtol=1e-4)


def test_inject_hyperparams_evaluates_schedules_and_takes_written_values():
    sched = optim.exponential_decay(0.02, 3, 0.5)
    opt = optim.inject_hyperparams(optim.adam)(learning_rate=sched)
    check(opt, adam_rule(lambda t: 0.02 * 0.5 ** ((t - 1) / 3)), rtol=1e-4)
    _, state = run(opt)
    np.testing.assert_allclose(float(state.hyperparams["learning_rate"]), 0.02 * 0.5 ** (11 / 3), rtol=1e-6)
    assert int(state.count) == 12

    # a written learning rate is used from the next step on, by the same compiled step
    opt = optim.inject_hyperparams(optim.sgd)(learning_rate=0.1, momentum=0.5)

    @tessera.jit
    def step(params, state, g):
        updates, state = opt.update(g, state, params)
        return optim.apply_updates(params, updates), state

    want = {k: P0[k].astype(np.float64) for k in P0}
    trace = {k: 0 * v for k, v in want.items()}
    params = as_tree(P0)
    state = opt.init(params)
    for t, g in enumerate(GRADS):
        lr = 0.1 if t < 6 else 0.03
        if t == 6:
            state.hyperparams["learning_rate"] = tnp.asarray(0.03)
        params, state = step(params, state, as_tree(g))
        for k in want:
            trace[k] = g[k] + 0.5 * trace[k]
            want[k] = want[k] - lr * trace[k]
    same({k: np.asarray(v, np.float64) for k, v in params.items()}, want)
    assert step.cache_info()["misses"] == 1
    np.testing.assert_allclose(float(state.hyperparams["learning_rate"]), 0.03)


def test_inject_hyperparams_static_args():
    with pytest.raises(ValueError, match="static_args"):
        optim.inject_hyperparams(optim.adam, static_args="nope")
    # adafactor decides the factored leaves from min_dim_size_to_factor: a Python int, so static under jit
    opt = optim.inject_hyperparams(optim.adafactor, static_args="min_dim_size_to_factor")(
        0.05, min_dim_size_to_factor=3)
    state = opt.init(as_tree(P0))
    assert "min_dim_size_to_factor" not in state.hyperparams and "learning_rate" in state.hyperparams
    assert "momentum" not in state.hyperparams  # None stays a fixed argument
    check(opt, adafactor_rule(0.05, min_dim=3), rtol=1e-4)
