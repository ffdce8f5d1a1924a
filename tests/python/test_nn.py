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
