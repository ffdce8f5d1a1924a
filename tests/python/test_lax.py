"""lax.scan, fori_loop and cond against Python loops and branches, eagerly, under jit and under grad."""
import numpy as np

import tessera
import tessera.numpy as tnp
from tessera import lax


def test_scan_is_a_loop(rng):
    xs = rng.standard_normal((6, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3)).astype(np.float32) * 0.5

    def step(h, x):
        h = tnp.tanh(h @ tnp.asarray(w) + x)
        return h, {"h": h, "s": tnp.sum(h)}

    h, ys = lax.scan(step, tnp.zeros((3,)), tnp.asarray(xs))
    ref, hs = np.zeros(3, np.float32), []
    for x in xs:
        ref = np.tanh(ref @ w + x)
        hs.append(ref)
    np.testing.assert_allclose(np.asarray(h), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(ys["h"]), np.stack(hs), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(ys["s"]), np.stack(hs).sum(1), rtol=1e-5, atol=1e-5)
    jitted = tessera.jit(lambda h0, xs: lax.scan(step, h0, xs))(tnp.zeros((3,)), tnp.asarray(xs))
    np.testing.assert_allclose(np.asarray(jitted[0]), ref, rtol=1e-5, atol=1e-6)
    assert "scan" in tessera.trace(lambda xs: lax.scan(step, tnp.zeros((3,)), xs)[0])(tnp.asarray(xs))


def test_scan_reverse_and_grad():
    xs = tnp.asarray([1.0, 2.0, 3.0])
    _, ys = lax.scan(lambda c, x: (c * 10 + x, c * 10 + x), tnp.asarray(0.0), xs, reverse=True)
    np.testing.assert_allclose(np.asarray(ys), [321.0, 32.0, 3.0])
    # d/da of a * a * ... (4 steps of c = c * a) is 4 a^3.
    g = tessera.grad(lambda a: lax.scan(lambda c, _: (c * a, None), tnp.asarray(1.0), length=4)[0])(tnp.asarray(1.5))
    np.testing.assert_allclose(float(g), 4 * 1.5 ** 3, rtol=1e-5)


def test_fori_loop():
    out = lax.fori_loop(2, 6, lambda i, v: v + tnp.astype(i, tnp.float32) * v, tnp.asarray([1.0, 2.0]))
    expected = np.array([1.0, 2.0])
    for i in range(2, 6):
        expected = expected + i * expected
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-6)


def test_cond_runs_one_branch_and_traces_both():
    f = lambda p, x: lax.cond(p, lambda x: x * 2, lambda x: -x, x)
    x = tnp.asarray([1.0, -3.0])
    np.testing.assert_allclose(np.asarray(f(True, x)), [2.0, -6.0])
    np.testing.assert_allclose(np.asarray(f(tnp.asarray(False), x)), [-1.0, 3.0])
    jf = tessera.jit(f)
    np.testing.assert_allclose(np.asarray(jf(tnp.asarray(True), x)), [2.0, -6.0])
    np.testing.assert_allclose(np.asarray(jf(tnp.asarray(False), x)), [-1.0, 3.0])
    assert jf.cache_info()["misses"] == 1
