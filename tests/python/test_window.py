"""lax.reduce_window and nn.max_pool / avg_pool against a numpy loop reference (SAME/VALID/explicit padding,
strides, window dilation), eagerly, under jit, grad (against finite differences) and vmap (against a loop)."""
import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera import lax, nn

IDENTITY = {"add": 0.0, "max": -np.inf, "min": np.inf}
REDUCE = {"add": np.sum, "max": np.max, "min": np.min}


def ref_reduce_window(x, op, window, strides, pads, dilation=None):
    """Straight from the definition: pad with the identity, then reduce each (dilated) window."""
    x = np.asarray(x, np.float64)
    dilation = dilation or (1,) * x.ndim
    xp = np.pad(x, pads, constant_values=IDENTITY[op])
    extent = [(w - 1) * d + 1 for w, d in zip(window, dilation)]
    out_shape = [(xp.shape[d] - extent[d]) // strides[d] + 1 for d in range(x.ndim)]
    out = np.empty(out_shape)
    for idx in np.ndindex(*out_shape):
        out[idx] = REDUCE[op](xp[tuple(slice(i * s, i * s + e, d)
                                       for i, s, e, d in zip(idx, strides, extent, dilation))])
    return out


def distinct(rng, shape):
    """Distinct values 0.1 apart, shuffled: no ties, so max pooling's gradient is unambiguous."""
    n = int(np.prod(shape))
    return (rng.permutation(n).reshape(shape) * 0.1 - n * 0.05).astype(np.float32)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), b, rtol=tol, atol=tol)


@pytest.mark.parametrize("op", ["add", "max", "min"])
def test_reduce_window_nchw_padding_kinds(rng, op):
    x = distinct(rng, (2, 3, 7, 6))
    init = IDENTITY[op]
    window, strides = (1, 1, 3, 3), (1, 1, 2, 2)
    close(lax.reduce_window(x, init, op, window, strides, "VALID"),
          ref_reduce_window(x, op, window, strides, [(0, 0)] * 4))
    # SAME, stride 2: out = ceil(in / 2); total padding (out - 1) * 2 + 3 - in: 2 for H = 7, 1 for W = 6, the odd
    # unit on the high side.
    out = lax.reduce_window(x, init, op, window, strides, "SAME")
    assert out.shape == (2, 3, 4, 3)
    close(out, ref_reduce_window(x, op, window, strides, [(0, 0), (0, 0), (1, 1), (0, 1)]))
    pads = [(0, 0), (1, 0), (2, 1), (0, 2)]
    close(lax.reduce_window(x, init, op, (2, 2, 2, 3), (1, 1, 3, 1), pads),
          ref_reduce_window(x, op, (2, 2, 2, 3), (1, 1, 3, 1), pads))


def test_reduce_window_dilation_and_computation_spellings(rng):
    x = rng.standard_normal((2, 9, 8)).astype(np.float32)
    pads = [(0, 0), (1, 2), (0, 1)]
    want = ref_reduce_window(x, "max", (1, 2, 3), (1, 1, 2), pads, (1, 2, 2))
    for computation in (lax.max, "max", tnp.maximum):
        close(lax.reduce_window(x, -np.inf, computation, (1, 2, 3), (1, 1, 2), pads, window_dilation=(1, 2, 2)), want)
    close(lax.reduce_window(x, 0.0, lax.add, (1, 2, 3), (1, 1, 2), pads, window_dilation=(1, 2, 2)),
          ref_reduce_window(x, "add", (1, 2, 3), (1, 1, 2), pads, (1, 2, 2)), 1e-4)
    xi = rng.integers(-50, 50, (4, 6)).astype(np.int32)
    got = lax.reduce_window(xi, np.iinfo(np.int32).max, lax.min, (2, 2), (2, 2), "VALID")
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), ref_reduce_window(xi, "min", (2, 2), (2, 2), [(0, 0)] * 2))


def test_reduce_window_rejects_what_it_cannot_do():
    x = tnp.zeros((4, 4))
    with pytest.raises(ValueError, match="init_value 0.0 is not the identity of max"):
        lax.reduce_window(x, 0.0, lax.max, (2, 2), (1, 1), "VALID")
    with pytest.raises(ValueError, match="computation must be lax.add, lax.max or lax.min"):
        lax.reduce_window(x, 1.0, tnp.multiply, (2, 2), (1, 1), "VALID")
    with pytest.raises(ValueError, match="base_dilation"):
        lax.reduce_window(x, 0.0, "add", (2, 2), (1, 1), "VALID", base_dilation=(2, 1))
    with pytest.raises(tessera.ShapeError, match=r"reduce_window_max.*f32\[4,4\]"):
        lax.reduce_window(x, -np.inf, "max", (2, 2, 1), (1, 1, 1), "VALID")
    with pytest.raises(tessera.ShapeError, match="larger than the padded operand"):
        lax.reduce_window(x, -np.inf, "max", (5, 1), (1, 1), "VALID")
    with pytest.raises(tessera.ShapeError, match="window_strides"):
        lax.reduce_window(x, -np.inf, "max", (2, 2), (0, 1), "VALID")


def test_pools_nhwc_and_avg_count(rng):
    x = rng.standard_normal((2, 7, 6, 3)).astype(np.float32)
    pads = [(0, 0), (1, 1), (0, 1), (0, 0)]  # SAME for a 3x3 window, stride 2
    close(nn.max_pool(x, (3, 3), (2, 2), "SAME"), ref_reduce_window(x, "max", (1, 3, 3, 1), (1, 2, 2, 1), pads))
    sums = ref_reduce_window(x, "add", (1, 3, 3, 1), (1, 2, 2, 1), pads)
    close(nn.avg_pool(x, (3, 3), (2, 2), "SAME"), sums / 9)
    counts = ref_reduce_window(np.ones_like(x), "add", (1, 3, 3, 1), (1, 2, 2, 1), pads)
    close(nn.avg_pool(x, (3, 3), (2, 2), "SAME", count_include_pad=False), sums / counts)


def test_max_pool_grad_matches_finite_differences(rng):
    x = distinct(rng, (2, 6, 5, 2))
    w = rng.standard_normal((2, 3, 3, 2)).astype(np.float32)

    def loss(a):
        return tnp.sum(nn.max_pool(a, (3, 3), (2, 2), [(1, 1), (1, 1)]) * w)

    g = np.asarray(tessera.grad(loss)(x))
    jitted = np.asarray(tessera.jit(tessera.grad(loss))(x))
    np.testing.assert_allclose(jitted, g, rtol=1e-6)
    h = 0.01  # below half the gap between values: no window changes its maximum
    numeric = np.zeros_like(g)
    for idx in np.ndindex(*x.shape):
        plus, minus = x.copy(), x.copy()
        plus[idx] += h
        minus[idx] -= h
        numeric[idx] = (float(loss(plus)) - float(loss(minus))) / (2 * h)
    np.testing.assert_allclose(g, numeric, rtol=1e-3, atol=1e-3)
    # Every window sends its weight to exactly one element.
    np.testing.assert_allclose(g.sum(), w.sum(), rtol=1e-5)


def test_avg_and_min_pool_grads_match_finite_differences(rng):
    x = distinct(rng, (1, 5, 5, 1))

    def loss(a):
        avg = nn.avg_pool(a, (2, 2), (1, 1), "SAME", count_include_pad=False)
        low = lax.reduce_window(a, np.inf, lax.min, (1, 2, 3, 1), (1, 2, 1, 1), "VALID")
        return tnp.sum(avg * avg) + tnp.sum(low * 3.0)

    g = np.asarray(tessera.grad(loss)(x))
    h = 0.01
    for idx in np.ndindex(*x.shape):
        plus, minus = x.copy(), x.copy()
        plus[idx] += h
        minus[idx] -= h
        numeric = (float(loss(plus)) - float(loss(minus))) / (2 * h)
        assert abs(g[idx] - numeric) < 2e-2 * max(1.0, abs(numeric)), (idx, g[idx], numeric)


def test_vmap_matches_a_loop(rng):
    xs = rng.standard_normal((4, 6, 5, 2)).astype(np.float32)

    def f(x):
        return nn.max_pool(x, (2, 2), (2, 1)) + lax.reduce_window(x, 0.0, "add", (2, 2, 1), (2, 1, 1), "VALID")

    batched = tessera.vmap(f)(xs)
    close(batched, np.stack([np.asarray(f(x)) for x in xs]))
    # Gradients of a vmapped max pool: the batch dim joins the window dims as one of size 1.
    gs = tessera.vmap(tessera.grad(lambda x: tnp.sum(nn.max_pool(x, (2, 2)))))(xs)
    loop = np.stack([np.asarray(tessera.grad(lambda x: tnp.sum(nn.max_pool(x, (2, 2))))(x)) for x in xs])
    close(gs, loop)


def test_pools_run_spmd_with_batch_and_features_split(rng):
    """The shard rule keeps N and C split (window 1) and H, W whole: a sharded H is gathered first."""
    from tessera.sharding import Mesh, NamedSharding, P
    mesh = Mesh(np.array(tessera.devices()).reshape(4, 2), ("data", "model"))
    a = distinct(rng, (8, 6, 4, 2))
    pads = [(0, 0), (0, 1), (0, 1), (0, 0)]  # SAME for a 3x3 window, stride 2, over 6 x 4

    def step(x):
        y = nn.max_pool(x, (3, 3), (2, 2), "SAME")
        return y, tessera.grad(lambda z: tnp.sum(nn.max_pool(z, (3, 3), (2, 2), "SAME") ** 2))(x)

    want_y = ref_reduce_window(a, "max", (1, 3, 3, 1), (1, 2, 2, 1), pads)
    want_g = np.asarray(tessera.grad(lambda z: tnp.sum(nn.max_pool(z, (3, 3), (2, 2), "SAME") ** 2))(a))
    for spec in (P("data", None, None, "model"), P(None, None, "data")):
        y, g = tessera.jit(step)(tessera.device_put(tnp.asarray(a), NamedSharding(mesh, spec)))
        close(y, want_y)
        close(g, want_g)
