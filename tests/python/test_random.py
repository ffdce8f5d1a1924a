"""tessera.random: JAX's Threefry bits (reference values printed by JAX 0.4 with its default PRNG), and the
samplers' statistics."""
import numpy as np

import tessera
import tessera.numpy as tnp
from tessera import random


def test_keys_and_split_match_jax():
    np.testing.assert_array_equal(np.asarray(random.PRNGKey(0)), [0, 0])
    np.testing.assert_array_equal(np.asarray(random.PRNGKey(42)), [0, 42])
    np.testing.assert_array_equal(np.asarray(random.split(random.PRNGKey(0))),
                                  [[4146024105, 967050713], [2718843009, 1272950319]])


def test_normal_matches_jax():
    np.testing.assert_allclose(np.asarray(random.normal(random.PRNGKey(0), (3,))),
                               [1.8160863, -0.48262316, 0.33988908], rtol=1e-5)


def test_same_key_same_bits_and_split_keys_differ():
    k = random.PRNGKey(7)
    np.testing.assert_array_equal(np.asarray(random.bits(k, (16,))), np.asarray(random.bits(random.PRNGKey(7), (16,))))
    a, b = random.split(k)
    assert not np.array_equal(np.asarray(random.bits(a, (16,))), np.asarray(random.bits(b, (16,))))
    f1, f2 = random.fold_in(k, 1), random.fold_in(k, 2)
    assert not np.array_equal(np.asarray(f1), np.asarray(f2))
    np.testing.assert_array_equal(np.asarray(random.fold_in(k, 1)), np.asarray(f1))


def test_sampler_statistics():
    k1, k2, k3 = random.split(random.PRNGKey(1), 3)
    u = np.asarray(random.uniform(k1, (20000,), minval=-2.0, maxval=3.0))
    assert u.min() >= -2.0 and u.max() < 3.0 and abs(u.mean() - 0.5) < 0.05
    n = np.asarray(random.normal(k2, (20000,)))
    assert abs(n.mean()) < 0.03 and abs(n.std() - 1.0) < 0.03
    b = np.asarray(random.bernoulli(k3, 0.3, (20000,)))
    assert b.dtype == np.bool_ and abs(b.mean() - 0.3) < 0.02
    c = np.asarray(random.categorical(k1, tnp.log(tnp.asarray([0.1, 0.6, 0.3])), axis=-1))
    assert c.shape == () and 0 <= int(c) < 3


def test_random_under_jit_equals_eager():
    f = tessera.jit(lambda k: random.normal(k, (5,)))
    k = random.PRNGKey(3)
    np.testing.assert_array_equal(np.asarray(f(k)), np.asarray(random.normal(k, (5,))))


def test_negative_shapes_are_shape_errors():
    import pytest

    for sampler in (random.normal, random.uniform, random.bits):
        with pytest.raises(tessera.ShapeError):
            sampler(random.PRNGKey(0), (-1, 2))
