"""jvp, linearize, jacfwd, jacrev, hessian and eval_shape against derivatives written out by hand in numpy (float64)
and against central differences."""

import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera import lax, optim
import tessera.nn as nn

RS = np.random.RandomState(7)


def arr(*shape):
    return tnp.array(RS.randn(*shape).astype(np.float32))


def f64(x):
    return np.asarray(x, dtype=np.float64)


def mlp(params, x):
    return tnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"]


def mlp_jacobian_x(params, x):
    """d mlp / d x for one example x [n]: W2^T diag(1 - h^2) W1^T, by hand."""
    w1, b1, w2 = (f64(params[k]) for k in ("w1", "b1", "w2"))
    h = np.tanh(f64(x) @ w1 + b1)
    return (w1 * (1 - h ** 2)) @ w2  # [n, hidden] * [hidden] @ [hidden, m] -> [n, m]; transposed below


@pytest.fixture
def params():
    return {"w1": arr(4, 6), "b1": arr(6), "w2": arr(6, 3)}


def test_jvp_is_the_jacobian_times_the_tangent(params):
    x, t = arr(4), arr(4)
    out, tangent = tessera.jvp(lambda x: mlp(params, x), (x,), (t,))
    np.testing.assert_allclose(f64(out), f64(mlp(params, x)), rtol=1e-6)
    np.testing.assert_allclose(f64(tangent), mlp_jacobian_x(params, x).T @ f64(t), rtol=1e-5, atol=1e-6)


def test_jvp_over_a_pytree_matches_central_differences(params):
    x = arr(5, 4)
    tangents = {k: arr(*v.shape) for k, v in params.items()}
    _, tangent = tessera.jvp(lambda p: mlp(p, x), (params,), (tangents,))

    def at(eps):
        moved = {k: f64(params[k]) + eps * f64(tangents[k]) for k in params}
        return np.tanh(f64(x) @ moved["w1"] + moved["b1"]) @ moved["w2"]

    eps = 1e-5
    np.testing.assert_allclose(f64(tangent), (at(eps) - at(-eps)) / (2 * eps), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["softmax", "gelu", "cross_entropy", "take", "conv", "max_pool", "cumsum", "sort",
                                  "scan", "max"])
def test_jvp_through_the_ops_matches_central_differences(name):
    labels = tnp.array([1, 3])
    cases = {
        "softmax": (lambda x: nn.softmax(x), (2, 5)),
        "gelu": (lambda x: nn.gelu(x), (2, 5)),
        "cross_entropy": (lambda x: optim.softmax_cross_entropy_with_integer_labels(x, labels), (2, 5)),
        "take": (lambda x: tnp.take(x, tnp.array([0, 2, 2]), axis=0), (4, 3)),
        "conv": (lambda x: lax.conv_general_dilated(x, tnp.ones((3, 3, 2, 2)), (1, 1), "SAME",
                                                    dimension_numbers=("NHWC", "HWIO", "NHWC")), (1, 5, 5, 2)),
        "max_pool": (lambda x: nn.max_pool(x, (2, 2), (2, 2)), (1, 4, 4, 2)),
        "cumsum": (lambda x: tnp.cumsum(x, axis=1), (2, 5)),
        "sort": (lambda x: tnp.sort(x, axis=1), (2, 5)),
        "scan": (lambda x: lax.scan(lambda c, xi: (c * xi + 1.0, c), tnp.zeros(5), x)[0], (3, 5)),
        # distinct values a step apart: the maximum does not move within the differences' reach
        "max": (lambda x: tnp.max(x, axis=1), None),
    }
    f, shape = cases[name]
    x = arr(*shape) if shape else tnp.array(np.arange(10, dtype=np.float32)[RS.permutation(10)].reshape(2, 5))
    t = arr(*x.shape)
    out, tangent = tessera.jvp(f, (x,), (t,))
    eps = 1e-2
    fd = (f64(f(x + eps * t)) - f64(f(x - eps * t))) / (2 * eps)
    np.testing.assert_allclose(f64(tangent), fd, rtol=2e-3, atol=2e-3 * np.abs(fd).max())


def test_linearize_gives_jvp_for_every_tangent(params):
    x = arr(4)
    out, f_jvp = tessera.linearize(lambda x: mlp(params, x), x)
    np.testing.assert_allclose(f64(out), f64(mlp(params, x)), rtol=1e-6)
    jac = mlp_jacobian_x(params, x).T
    for _ in range(3):
        t = arr(4)
        np.testing.assert_allclose(f64(f_jvp(t)), jac @ f64(t), rtol=1e-5, atol=1e-6)


def test_jvp_and_linearize_with_aux():
    x, t = arr(3), arr(3)
    out, tangent, aux = tessera.jvp(lambda x: (tnp.sin(x), {"n": tnp.sum(x)}), (x,), (t,), has_aux=True)
    np.testing.assert_allclose(f64(tangent), np.cos(f64(x)) * f64(t), rtol=1e-5)
    np.testing.assert_allclose(f64(aux["n"]), f64(x).sum(), rtol=1e-5)
    out, f_jvp, aux = tessera.linearize(lambda x: (tnp.exp(x), 2.0 * x), x, has_aux=True)
    np.testing.assert_allclose(f64(f_jvp(t)), np.exp(f64(x)) * f64(t), rtol=1e-5)
    np.testing.assert_allclose(f64(aux), 2 * f64(x), rtol=1e-6)


def test_jacobians_have_jax_layout_and_values(params):
    x = arr(4)
    expected = mlp_jacobian_x(params, x).T  # [3, 4]: output index first
    for transform in (tessera.jacrev, tessera.jacfwd):
        j = transform(mlp, argnums=1)(params, x)
        assert j.shape == (3, 4)
        np.testing.assert_allclose(f64(j), expected, rtol=1e-5, atol=1e-6)


def test_jacobian_of_a_pytree_argument_and_output():
    def f(p, x):
        return {"a": tnp.sum(p["w"] * x), "b": p["w"] * p["v"][0]}

    p = {"w": arr(2, 3), "v": arr(4)}
    x = arr(2, 3)
    w, v = f64(p["w"]), f64(p["v"])
    for transform in (tessera.jacrev, tessera.jacfwd):
        j = transform(f)(p, x)
        assert set(j) == {"a", "b"} and set(j["a"]) == {"w", "v"}
        assert j["a"]["w"].shape == (2, 3) and j["a"]["v"].shape == (4,)
        assert j["b"]["w"].shape == (2, 3, 2, 3) and j["b"]["v"].shape == (2, 3, 4)
        np.testing.assert_allclose(f64(j["a"]["w"]), f64(x), rtol=1e-6)
        np.testing.assert_allclose(f64(j["a"]["v"]), np.zeros(4))
        np.testing.assert_allclose(f64(j["b"]["w"]), v[0] * np.eye(6).reshape(2, 3, 2, 3), rtol=1e-6)
        dv = np.zeros((2, 3, 4))
        dv[:, :, 0] = w
        np.testing.assert_allclose(f64(j["b"]["v"]), dv, rtol=1e-6)


def test_jacobian_of_several_arguments_is_a_tuple():
    x, y = arr(3), arr(3)
    for transform in (tessera.jacrev, tessera.jacfwd):
        jx, jy = transform(lambda x, y: x * y, argnums=(0, 1))(x, y)
        np.testing.assert_allclose(f64(jx), np.diag(f64(y)), rtol=1e-6)
        np.testing.assert_allclose(f64(jy), np.diag(f64(x)), rtol=1e-6)


def test_hessian_of_logistic_regression_is_xt_d_x():
    n, d = 8, 3
    X, y = arr(n, d), tnp.array((RS.rand(n) > 0.5).astype(np.float32))

    def loss(w):
        z = X @ w
        return tnp.mean(tnp.log(1.0 + tnp.exp(z)) - y * z)

    w = arr(d)
    h = tessera.hessian(loss)(w)
    p = 1 / (1 + np.exp(-(f64(X) @ f64(w))))
    expected = f64(X).T @ np.diag(p * (1 - p)) @ f64(X) / n
    assert h.shape == (d, d)
    np.testing.assert_allclose(f64(h), expected, rtol=1e-4, atol=1e-6)


def test_hessian_of_a_cubic_by_hand():
    x = arr(3)
    h = tessera.hessian(lambda x: tnp.sum(x ** 3) + x[0] * x[1])(x)
    expected = np.diag(6 * f64(x))
    expected[0, 1] = expected[1, 0] = 1.0
    np.testing.assert_allclose(f64(h), expected, rtol=1e-5, atol=1e-6)


def test_hessian_vector_product_under_jit_and_vmap():
    x = arr(4)

    def f(x):
        return tnp.sum(tnp.sin(x) * x)

    # d2/dx2 of sin(x) x: 2 cos x - x sin x (diagonal)
    hvp = tessera.jit(lambda x, v: tessera.jvp(tessera.grad(f), (x,), (v,))[1])
    vs = arr(3, 4)
    got = tessera.vmap(hvp, in_axes=(None, 0))(x, vs)
    diag = 2 * np.cos(f64(x)) - f64(x) * np.sin(f64(x))
    np.testing.assert_allclose(f64(got), f64(vs) * diag, rtol=1e-4, atol=1e-6)


def test_jvp_errors_name_what_is_wrong():
    x = arr(3)
    with pytest.raises(TypeError, match="tuple or a list"):
        tessera.jvp(tnp.sin, x, (x,))
    with pytest.raises(ValueError, match=r"shape \(3,\).*\(4,\)"):
        tessera.jvp(tnp.sin, (x,), (arr(4),))
    with pytest.raises(ValueError, match="one tangent per primal"):
        tessera.jvp(lambda a, b: a * b, (x, x), (x,))
    with pytest.raises(TypeError, match="floating-point"):
        tessera.jacrev(lambda i: i * 2)(tnp.array([1, 2]))


def test_eval_shape_runs_nothing():
    # 40 GB of float32 if it ran
    big = tessera.ShapeDtypeStruct((100_000, 100_000), tnp.float32)
    out = tessera.eval_shape(lambda a, b: {"p": a @ b, "n": tnp.sum(a, axis=0).astype(tnp.int32)}, big, big)
    assert out["p"].shape == (100_000, 100_000) and out["p"].dtype == tnp.float32
    assert out["n"].shape == (100_000,) and out["n"].dtype == tnp.int32
    x = arr(2, 3)
    s = tessera.eval_shape(lambda x, scale=1.0: (x * scale).T, x, scale=2.0)
    assert s.shape == (3, 2) and s.dtype == tnp.float32


def test_vjp_aux_is_a_value_not_a_tracer():
    x = arr(3)
    out, vjp_fn, aux = tessera.vjp(lambda x: (tnp.sin(x), {"sum": tnp.sum(x), "x2": x * 2.0}), x, has_aux=True)
    assert not aux["sum"].is_tracer and not aux["x2"].is_tracer
    np.testing.assert_allclose(f64(aux["sum"]), f64(x).sum(), rtol=1e-6)
    np.testing.assert_allclose(f64(aux["x2"]), 2 * f64(x), rtol=1e-6)
    (g,) = vjp_fn(tnp.ones(3))
    np.testing.assert_allclose(f64(g), np.cos(f64(x)), rtol=1e-6)
    with pytest.raises(TypeError, match="pair"):
        tessera.vjp(lambda x: tnp.sin(x), x, has_aux=True)


@pytest.mark.parametrize("causal", [True, False])
def test_second_derivatives_through_the_fused_attention_match_the_composed_one(causal):
    q, k, v = arr(2, 5, 2, 3), arr(2, 5, 2, 3), arr(2, 5, 2, 3)

    def loss(implementation):
        return lambda q, k, v: tnp.sum(tnp.sin(nn.dot_product_attention(q, k, v, is_causal=causal,
                                                                        implementation=implementation)))

    assert "dot_product_attention(" in tessera.trace(loss(None))(q, k, v)  # the fused op on the CPU
    np.testing.assert_allclose(f64(tessera.hessian(loss(None))(q, k, v)),
                               f64(tessera.hessian(loss("xla"))(q, k, v)), atol=2e-6)
    tangents = (arr(2, 5, 2, 3), arr(2, 5, 2, 3), arr(2, 5, 2, 3))
    _, fused = tessera.jvp(tessera.grad(loss(None), argnums=(0, 1, 2)), (q, k, v), tangents)
    _, composed = tessera.jvp(tessera.grad(loss("xla"), argnums=(0, 1, 2)), (q, k, v), tangents)
    for a, b in zip(fused, composed):
        np.testing.assert_allclose(f64(a), f64(b), atol=5e-6)
