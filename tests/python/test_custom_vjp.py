"""tessera.custom_vjp against gradients worked out by hand (JAX's documentation examples), under grad, jit and
vmap, with pytrees and nondiff_argnums; errors carry the user's line."""
import functools
import inspect
import math

import numpy as np
import pytest

import tessera
import tessera.numpy as tnp


@tessera.custom_vjp
def f(x, y):
    return tnp.sin(x) * y


def f_fwd(x, y):
    return f(x, y), (tnp.cos(x), tnp.sin(x), y)


def f_bwd(res, g):
    cos_x, sin_x, y = res
    return (cos_x * g * y, sin_x * g)


f.defvjp(f_fwd, f_bwd)


@tessera.custom_vjp
def clip_gradient(lo, hi, x):
    return x


def clip_gradient_fwd(lo, hi, x):
    return x, (lo, hi)


def clip_gradient_bwd(res, g):
    lo, hi = res
    return (None, None, tnp.clip(g, lo, hi))


clip_gradient.defvjp(clip_gradient_fwd, clip_gradient_bwd)


@tessera.custom_vjp
def log1pexp(x):
    return tnp.log(1.0 + tnp.exp(x))


log1pexp.defvjp(lambda x: (log1pexp(x), x), lambda x, g: (g * (1.0 - 1.0 / (1.0 + tnp.exp(x))),))


def test_the_docs_example_uses_fwd_and_bwd():
    x, y = 0.7, 2.5
    np.testing.assert_allclose(float(f(tnp.asarray(x), tnp.asarray(y))), math.sin(x) * y, rtol=1e-6)
    gx, gy = tessera.grad(f, argnums=(0, 1))(tnp.asarray(x), tnp.asarray(y))
    np.testing.assert_allclose(float(gx), math.cos(x) * y, rtol=1e-6)
    np.testing.assert_allclose(float(gy), math.sin(x), rtol=1e-6)
    # jit of grad: the same, and the compiled program has no trace of the call left.
    jg = tessera.jit(tessera.grad(f))
    np.testing.assert_allclose(float(jg(tnp.asarray(x), tnp.asarray(y))), math.cos(x) * y, rtol=1e-6)
    assert "custom_vjp_call" in tessera.trace(f)(tnp.asarray(x), tnp.asarray(y))


def test_clip_gradient():
    x = tnp.asarray([0.5, -2.0, 3.0])
    assert np.asarray(clip_gradient(-1.0, 1.0, x)).tolist() == [0.5, -2.0, 3.0]
    g = tessera.grad(lambda x: tnp.sum(clip_gradient(-1.0, 1.0, x) * tnp.asarray([0.25, -3.0, 7.0])))(x)
    np.testing.assert_allclose(np.asarray(g), [0.25, -1.0, 1.0])


def test_log1pexp_bwd_is_stable_where_autodiff_is_not():
    x = tnp.asarray([0.0, 100.0])
    plain = tessera.grad(lambda x: tnp.sum(tnp.log(1.0 + tnp.exp(x))))(x)
    assert math.isnan(np.asarray(plain)[1])
    np.testing.assert_allclose(np.asarray(tessera.grad(lambda x: tnp.sum(log1pexp(x)))(x)), [0.5, 1.0])


def test_vmap_and_pytrees_and_nondiff_argnums():
    xs = tnp.asarray([0.1, 0.5, 1.5])
    # Per-example gradients under vmap use the user's bwd.
    per_example = tessera.vmap(tessera.grad(lambda x: f(x, tnp.asarray(2.0))))(xs)
    np.testing.assert_allclose(np.asarray(per_example), np.cos([0.1, 0.5, 1.5]) * 2.0, rtol=1e-6)

    # A dict of primals, a list of residuals; a nondiff Python value passed to bwd first.
    @functools.partial(tessera.custom_vjp, nondiff_argnums=(0,))
    def scaled(factor, p):
        return p["a"] * p["b"] * factor

    scaled.defvjp(lambda factor, p: (scaled(factor, p), [p["a"], p["b"]]),
                  lambda factor, res, g: ({"a": g * res[1] * 10 * factor, "b": g * res[0] * 10 * factor},))
    p = {"a": tnp.asarray(2.0), "b": tnp.asarray(5.0)}
    assert float(scaled(3.0, p)) == 30.0
    g = tessera.grad(lambda p: scaled(3.0, p))(p)
    assert float(g["a"]) == 150.0 and float(g["b"]) == 60.0


def test_errors_carry_the_users_line():
    @tessera.custom_vjp
    def bad(x):
        return x * 2

    with pytest.raises(TypeError, match="call bad.defvjp"):
        bad(tnp.asarray(1.0))
    bad.defvjp(lambda x: (bad(x), None), lambda res, g: (tnp.concatenate([g, g]),))
    with pytest.raises(tessera.TesseraError) as e:
        line = inspect.currentframe().f_lineno + 1
        bad(tnp.asarray([1.0, 2.0]))
    assert "custom_vjp: bwd returns a cotangent f32[4] for primal 0, which is f32[2]" in str(e.value)
    assert f"test_custom_vjp.py:{line}" in str(e.value)
    bad.defvjp(lambda x: (bad(x), None), lambda res, g: g)
    with pytest.raises(TypeError, match="must return a tuple with one cotangent per differentiated argument"):
        bad(tnp.asarray(1.0))
