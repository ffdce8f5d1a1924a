"""tessera.checkpoint (jax.checkpoint): values and gradients equal those without it (and numpy finite
differences), under grad, jit and vmap, with each policy; the traced gradient recomputes behind an
optimization_barrier; errors for a bad policy."""
import numpy as np
import pytest

import tessera
import tessera.numpy as tnp


def block(x, w1, w2):
    return x + tnp.tanh(x @ w1) @ w2


def loss_of(params, x, policy=None, use_checkpoint=True):
    h = x
    for w1, w2 in params:
        if use_checkpoint:
            h = tessera.checkpoint(block, policy=policy)(h, w1, w2)
        else:
            h = block(h, w1, w2)
    return tnp.sum(h * h)


def f64(a):
    """float64 arrays (numpy's float64 alone becomes float32, as in JAX), so that equal math compares tightly."""
    return tnp.asarray(a, dtype=tnp.float64)


def make_params(rng, layers=3, width=4, hidden=6):
    return [(f64(rng.standard_normal((width, hidden)) / 2), f64(rng.standard_normal((hidden, width)) / 2))
            for _ in range(layers)]


@pytest.mark.parametrize("policy", [None, tessera.checkpoint_policies.nothing_saveable,
                                    tessera.checkpoint_policies.dots_saveable,
                                    tessera.checkpoint_policies.everything_saveable])
def test_values_and_grads_match_no_checkpoint(policy):
    rng = np.random.default_rng(0)
    params = make_params(rng)
    x = f64(rng.standard_normal((5, 4)))
    want = tessera.grad(lambda p: loss_of(p, x, use_checkpoint=False))(params)
    got = tessera.grad(lambda p: loss_of(p, x, policy))(params)
    jitted = tessera.jit(tessera.grad(lambda p: loss_of(p, x, policy)))(params)
    for (gw1, gw2), (jw1, jw2), (ww1, ww2) in zip(got, jitted, want):
        np.testing.assert_allclose(np.asarray(gw1), np.asarray(ww1), rtol=1e-10)
        np.testing.assert_allclose(np.asarray(gw2), np.asarray(ww2), rtol=1e-10)
        np.testing.assert_allclose(np.asarray(jw1), np.asarray(ww1), rtol=1e-10)
        np.testing.assert_allclose(np.asarray(jw2), np.asarray(ww2), rtol=1e-10)
    assert float(loss_of(params, x, policy)) == pytest.approx(float(loss_of(params, x, use_checkpoint=False)))


def test_grad_against_finite_differences():
    rng = np.random.default_rng(1)
    params = make_params(rng, layers=2)
    x = f64(rng.standard_normal((3, 4)))
    host = [(np.array(a), np.array(b)) for a, b in params]

    def numpy_loss(p):
        h = np.asarray(x)
        for w1, w2 in p:
            h = h + np.tanh(h @ w1) @ w2
        return float(np.sum(h * h))

    g = tessera.grad(lambda p: loss_of(p, x))(params)
    eps = 1e-6
    for layer in range(2):
        for i, j in [(0, 0), (2, 5), (3, 1)]:
            plus = [(a.copy(), b.copy()) for a, b in host]
            minus = [(a.copy(), b.copy()) for a, b in host]
            plus[layer][0][i, j] += eps
            minus[layer][0][i, j] -= eps
            fd = (numpy_loss(plus) - numpy_loss(minus)) / (2 * eps)
            assert float(np.asarray(g[layer][0])[i, j]) == pytest.approx(fd, rel=1e-6, abs=1e-8)


def test_decorator_forms_and_pytrees():
    @tessera.checkpoint
    def f(d):
        return {"y": tnp.sin(d["a"]) * d["b"]}

    @tessera.remat(policy=tessera.checkpoint_policies.dots_saveable)
    def g(a, b):
        return tnp.sin(a @ b)

    a = np.linspace(0.1, 1.0, 6).reshape(2, 3)
    b = np.linspace(-1.0, 1.0, 6).reshape(3, 2)
    np.testing.assert_allclose(np.asarray(f({"a": f64(a), "b": f64(a)})["y"]), np.sin(a) * a, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(g(f64(a), f64(b))), np.sin(a @ b), rtol=1e-12)
    ga = tessera.grad(lambda a: tnp.sum(g(a, f64(b))))(f64(a))
    np.testing.assert_allclose(np.asarray(ga), np.cos(a @ b) @ b.T, rtol=1e-10)


def test_vmap_of_checkpoint_is_a_loop():
    rng = np.random.default_rng(2)
    (w1, w2), = make_params(rng, layers=1)
    xs = rng.standard_normal((4, 2, 4))
    f = tessera.checkpoint(lambda x: block(x, w1, w2))
    got = np.asarray(tessera.vmap(f)(f64(xs)))
    h1, h2 = np.asarray(w1), np.asarray(w2)
    want = np.stack([xs[i] + np.tanh(xs[i] @ h1) @ h2 for i in range(4)])
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_traced_gradient_recomputes_behind_a_barrier():
    x = np.ones((2, 3), np.float32)
    w = np.full((3, 3), 0.5, np.float32)
    plain = str(tessera.trace(tessera.grad(lambda w: tnp.sum(tnp.tanh(x @ w))))(w))
    ir = str(tessera.trace(tessera.grad(lambda w: tnp.sum(tessera.checkpoint(lambda x, w: tnp.tanh(x @ w))(x, w))))(w))
    assert "optimization_barrier" in ir and "optimization_barrier" not in plain
    assert "remat_call" in ir
    # lax.optimization_barrier on its own is the identity.
    out = tessera.lax.optimization_barrier({"a": x, "b": w})
    np.testing.assert_array_equal(np.asarray(out["a"]), x)
    np.testing.assert_array_equal(np.asarray(out["b"]), w)


def test_bad_policy_is_an_error():
    with pytest.raises(ValueError, match="dots_saveable"):
        tessera.checkpoint(lambda x: x, policy="sometimes")(np.ones(3))
