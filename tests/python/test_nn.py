"""tessera.nn's activations against their formulas written in numpy."""
import math

import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera import nn


def close(actual, expected, rtol=1e-5, atol=1e-6):
    actual = np.asarray(actual)
    assert actual.shape == np.shape(expected)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def test_activations(rng):
    a = rng.standard_normal((4, 6)).astype(np.float64) * 3
    x = tnp.asarray(a)
    sig = 1 / (1 + np.exp(-a))
    close(nn.relu(x), np.maximum(a, 0))
    close(nn.sigmoid(x), sig, rtol=1e-5)
    close(nn.silu(x), a * sig, rtol=1e-5, atol=1e-5)
    close(nn.gelu(x), 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3))), rtol=1e-5, atol=1e-5)
    erf = np.vectorize(math.erf)
    close(nn.gelu(x, approximate=False), 0.5 * a * (1 + erf(a / math.sqrt(2))), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_family(rng, axis):
    a = rng.standard_normal((4, 6)) * 3
    x = tnp.asarray(a)
    m = a.max(axis, keepdims=True)
    lse = np.log(np.exp(a - m).sum(axis, keepdims=True)) + m
    close(nn.softmax(x, axis), np.exp(a - lse), rtol=1e-5)
    close(nn.log_softmax(x, axis), a - lse, rtol=1e-5, atol=1e-5)
    close(nn.logsumexp(x, axis), np.squeeze(lse, axis), rtol=1e-5)
    close(nn.logsumexp(x), np.log(np.exp(a).sum()), rtol=1e-5)


def test_one_hot_and_a_cross_entropy_gradient(rng):
    labels = np.array([2, 0, 1], dtype=np.int32)
    close(nn.one_hot(labels, 4), np.eye(4, dtype=np.float32)[labels])
    logits = rng.standard_normal((3, 4)).astype(np.float32)
    loss = lambda z: -tnp.mean(tnp.sum(nn.log_softmax(z) * nn.one_hot(labels, 4), axis=-1))
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    close(tessera.grad(loss)(tnp.asarray(logits)), (p - np.eye(4)[labels]) / 3, rtol=1e-5, atol=1e-6)


def numpy_logsumexp(a, axis, keepdims=False):
    # The reference as jax.scipy.special.logsumexp writes it: a non-finite max is replaced by 0.
    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def test_logsumexp_of_infinities():
    inf = np.inf
    a = np.array([[-inf, -inf, -inf], [1.0, inf, 0.0], [-inf, 2.0, 1.0], [inf, -inf, 3.0], [np.nan, 1.0, inf]],
                 dtype=np.float32)
    x = tnp.asarray(a)
    for axis, keepdims in [(1, False), (-1, True), ((1,), False)]:
        close(nn.logsumexp(x, axis, keepdims), numpy_logsumexp(a, axis, keepdims))
    close(nn.logsumexp(tnp.asarray(a[0])), -inf)
    close(nn.logsumexp(x[:4], axis=0), numpy_logsumexp(a[:4], 0))
    close(tessera.jit(lambda v: nn.logsumexp(v, axis=1))(x), numpy_logsumexp(a, 1))
    close(tessera.vmap(nn.logsumexp)(x), numpy_logsumexp(a, 1))


def test_logsumexp_over_no_axes_and_of_integers():
    a = np.array([[0.5, -np.inf], [np.inf, 2.0]], np.float32)
    close(nn.logsumexp(tnp.asarray(a), axis=()), a)
    i = np.array([1, 2, 3], np.int32)
    got = nn.logsumexp(tnp.asarray(i))
    assert np.asarray(got).dtype == np.float32
    close(got, np.log(np.exp(i.astype(np.float64)).sum()), rtol=1e-6)


def test_activations_take_integers_as_float32():
    i = np.array([[1, -2, 3]], np.int32)
    f = i.astype(np.float64)
    e = np.exp(f - f.max(-1, keepdims=True))
    for got, expected in [(nn.softmax(tnp.asarray(i)), e / e.sum(-1, keepdims=True)),
                          (nn.log_softmax(tnp.asarray(i)), np.log(e / e.sum(-1, keepdims=True))),
                          (nn.sigmoid(tnp.asarray(i)), 1 / (1 + np.exp(-f))),
                          (nn.silu(tnp.asarray(i)), f / (1 + np.exp(-f)))]:
        assert np.asarray(got).dtype == np.float32
        close(got, expected, rtol=1e-6)
    assert np.asarray(nn.gelu(tnp.asarray(i))).dtype == np.float32


def test_global_avg_pool_means_the_spatial_dims_only(rng):
    a = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    close(nn.global_avg_pool(tnp.asarray(a)), a.mean(axis=(1, 2)))
    close(nn.global_avg_pool(tnp.asarray(a[:, 0])), a[:, 0].mean(axis=1))
    close(nn.global_avg_pool(tnp.asarray(a[:, 0, 0])), a[:, 0, 0])  # [N, C]: no spatial dims, unchanged


def test_log1mexp_logmeanexp_and_the_sparse_activations_match_their_formulas():
    x = np.array([1e-6, 1e-3, 0.3, 0.69, 0.7, 2.0, 20.0, 80.0], np.float32)
    want = np.log(-np.expm1(-x.astype(np.float64)))  # log(1 - e^-x) without cancellation, in float64
    np.testing.assert_allclose(np.asarray(nn.log1mexp(x)), want, rtol=1e-5, atol=1e-30)
    g = np.asarray(tessera.grad(lambda v: tnp.sum(nn.log1mexp(v)))(x[2:6]))
    np.testing.assert_allclose(g, 1.0 / np.expm1(x[2:6].astype(np.float64)), rtol=1e-4)
    a = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32) * 10
    np.testing.assert_allclose(np.asarray(nn.logmeanexp(a, axis=1)),
                               np.log(np.mean(np.exp(a.astype(np.float64)), axis=1)), rtol=1e-5)
    mask = a > 0
    want = [np.log(np.mean(np.exp(r[m].astype(np.float64)))) for r, m in zip(a, mask)]
    np.testing.assert_allclose(np.asarray(nn.logmeanexp(a, axis=1, where=mask)), want, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(nn.logmeanexp(a)), np.log(np.mean(np.exp(a.astype(np.float64)))), rtol=1e-5)
    z = np.linspace(-2, 2, 17).astype(np.float32)
    np.testing.assert_allclose(np.asarray(nn.sparse_plus(z)), np.where(z <= -1, 0, np.where(z >= 1, z, (z + 1) ** 2 / 4)),
                               rtol=1e-6)
    np.testing.assert_allclose(np.asarray(nn.sparse_sigmoid(z)), np.clip((z + 1) / 2, 0, 1), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(tessera.grad(lambda v: tnp.sum(nn.sparse_plus(v)))(z)),
                               np.asarray(nn.sparse_sigmoid(z)), atol=1e-6)
    np.testing.assert_array_equal(np.asarray(nn.identity(z)), z)
