"""tessera.nn.initializers against jax.nn.initializers' definitions: the fans (in, out, receptive field), the
variance each scheme promises (measured over large kernels), the truncation bound, orthogonality."""
import math

import numpy as np
import pytest

from tessera import random
from tessera.nn import initializers as I

KEY = random.PRNGKey(0)


@pytest.mark.parametrize("name,shape,fan", [
    ("glorot_uniform", (300, 500), 2 / 800), ("glorot_normal", (300, 500), 2 / 800),
    ("xavier_uniform", (3, 3, 32, 64), 2 / (9 * 96)), ("he_uniform", (400, 200), 2 / 400),
    ("he_normal", (3, 3, 64, 128), 2 / (9 * 64)), ("kaiming_normal", (500, 300), 2 / 500),
    ("lecun_uniform", (300, 400), 1 / 300)])
def test_variance_scaling_schemes_have_their_variance(name, shape, fan):
    w = np.asarray(getattr(I, name)()(KEY, shape), np.float64)
    assert w.shape == shape
    assert abs(w.var() / fan - 1) < 0.03, (w.var(), fan)
    if name.endswith("uniform"):
        assert np.abs(w).max() <= math.sqrt(3 * fan) * (1 + 1e-6)
    else:  # truncated at two standard deviations of the untruncated normal
        assert np.abs(w).max() <= 2 * math.sqrt(fan) / 0.87962566103423978 * (1 + 1e-6)


def test_variance_scaling_modes_axes_and_errors():
    w = np.asarray(I.variance_scaling(1.0, "fan_out", "normal")(KEY, (50, 800)), np.float64)
    assert abs(w.var() * 800 - 1) < 0.03
    w = np.asarray(I.variance_scaling(3.0, "fan_geo_avg", "uniform")(KEY, (400, 900)), np.float64)
    assert abs(w.var() * 600 / 3 - 1) < 0.03
    # batch axes count in neither fan; in_axis/out_axis may be tuples
    w = np.asarray(I.variance_scaling(1.0, "fan_in", "normal", in_axis=(1, 2), out_axis=-1, batch_axis=0)(
        KEY, (4, 20, 30, 16)), np.float64)
    assert abs(w.var() * 600 - 1) < 0.05
    with pytest.raises(ValueError, match="invalid mode"):
        I.variance_scaling(1.0, "fan_both", "normal")
    with pytest.raises(ValueError, match="invalid distribution"):
        I.variance_scaling(1.0, "fan_in", "cauchy")


# (shape, axes, (fan_in, fan_out)) as jax 0.10.2's jax.nn.initializers computes them: a named in_axis makes a
# 1-D kernel's fans 1; an axis in both in_axis and out_axis divides the receptive field twice.
JAX_FANS = [((5,), dict(in_axis=0), (1.0, 1.0)), ((5,), dict(in_axis=-1, out_axis=0), (1.0, 1.0)),
            ((5,), dict(in_axis=(), out_axis=()), (5.0, 5.0)), ((), dict(in_axis=(), out_axis=()), (1.0, 1.0)),
            ((4, 3), dict(in_axis=-1, out_axis=-1), (4.0, 4.0)), ((4, 3, 2), dict(in_axis=(0, 0)), (12.0, 1.5)),
            ((4, 3, 2), dict(in_axis=1, out_axis=(1, 2)), (4.0, 8.0)),
            ((4, 3, 2), dict(batch_axis=-2), (4.0, 8 / 3)), ((4, 3, 2), {}, (12.0, 8.0))]


@pytest.mark.parametrize("shape,axes,fans", JAX_FANS)
def test_fans_of_unusual_shapes_and_axes_are_jaxs(shape, axes, fans):
    unit = np.asarray(random.normal(KEY, shape), np.float64)  # the draw before scaling
    for mode, fan in zip(("fan_in", "fan_out"), fans):
        w = np.asarray(I.variance_scaling(2.0, mode, "normal", **axes)(KEY, shape), np.float64)
        np.testing.assert_allclose(w, unit * math.sqrt(2.0 / fan), rtol=1e-6)


@pytest.mark.parametrize("name", ["glorot_uniform", "glorot_normal", "lecun_uniform", "lecun_normal", "he_uniform",
                                  "he_normal", "xavier_uniform", "kaiming_normal"])
def test_scalar_and_vector_kernels_need_an_in_axis(name):
    for shape in ((), (5,), (0,)):
        with pytest.raises(ValueError, match=f"sizes of a {len(shape)}-dimensional weights tensor with default "
                                             "in_axis. Must be at least 2D or specify in_axis explicitly"):
            getattr(I, name)()(KEY, shape)
    assert np.asarray(getattr(I, name)(in_axis=0)(KEY, (5,))).shape == (5,)
    with pytest.raises(IndexError):  # JAX indexes the shape with the named axis
        getattr(I, name)(in_axis=0)(KEY, ())


def test_simple_initializers():
    np.testing.assert_array_equal(np.asarray(I.constant(2.5)(KEY, (2, 3))), np.full((2, 3), 2.5))
    u = np.asarray(I.uniform(0.5)(KEY, (20000,)))
    assert u.min() >= 0 and u.max() < 0.5 and abs(u.mean() - 0.25) < 0.01
    t = np.asarray(I.truncated_normal(0.1, lower=-1.0, upper=1.0)(KEY, (20000,)))
    assert np.abs(t).max() <= 0.1 + 1e-7 and abs(t.std() / 0.1 - 0.5379) < 0.02  # std of N(0,1) cut at +-1


@pytest.mark.parametrize("shape,axis", [((5, 3), -1), ((3, 5), -1), ((3, 2, 4), 0), ((6, 6), -1)])
def test_orthogonal_is_orthogonal_along_its_column_axis(shape, axis):
    q = np.asarray(I.orthogonal(scale=2.0, column_axis=axis)(KEY, shape), np.float64) / 2.0
    a = axis % len(shape)
    m = np.moveaxis(q, a, -1).reshape(-1, shape[a])  # rows: the other dims, columns: the column axis
    small = min(m.shape)
    gram = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    np.testing.assert_allclose(gram, np.eye(small), atol=1e-5)


def test_delta_orthogonal_is_an_orthogonal_centre_tap():
    d = np.asarray(I.delta_orthogonal()(KEY, (3, 3, 4, 6)), np.float64)
    centre = d[1, 1]
    np.testing.assert_allclose(centre @ centre.T, np.eye(4), atol=1e-5)
    assert np.abs(d).sum() == pytest.approx(np.abs(centre).sum())
    with pytest.raises(ValueError, match="less or equal"):
        I.delta_orthogonal()(KEY, (3, 3, 8, 4))
