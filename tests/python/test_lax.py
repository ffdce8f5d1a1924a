"""lax.scan, while_loop, fori_loop and cond against Python loops and branches, eagerly, under jit, grad and vmap."""
import inspect
import math

import numpy as np
import pytest

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


def collatz_steps(n):
    """The number of Collatz steps from n to 1, with the carry a dict."""
    def step(c):
        n = c["n"]
        return {"n": tnp.where(n % 2 == 0, n // 2, 3 * n + 1), "steps": c["steps"] + 1}

    return lax.while_loop(lambda c: c["n"] != 1, step, {"n": n, "steps": tnp.asarray(0, "i32")})["steps"]


def collatz_loop(n):
    steps = 0
    while n != 1:
        n, steps = n // 2 if n % 2 == 0 else 3 * n + 1, steps + 1
    return steps


def test_while_loop_is_a_loop():
    for n in (1, 6, 27):
        assert int(collatz_steps(tnp.asarray(n, "i32"))) == collatz_loop(n)
    # Newton's iteration for sqrt(2) until converged, under jit: one trace for every input.
    def newton(a):
        return lax.while_loop(lambda x: tnp.abs(x * x - a) > 1e-6 * a, lambda x: (x + a / x) / 2, a)

    jitted = tessera.jit(newton)
    for a in (2.0, 10.0):
        np.testing.assert_allclose(float(jitted(tnp.asarray(a))), math.sqrt(a), rtol=1e-6)
    assert jitted.cache_info()["misses"] == 1
    assert "while_loop" in tessera.trace(newton)(tnp.asarray(2.0))
    # A false predicate: the body never runs.
    assert float(lax.while_loop(lambda x: x > 5, lambda x: x + 1, tnp.asarray(1.0))) == 1.0


def test_while_loop_under_vmap_with_a_batched_predicate():
    starts = [1, 6, 27, 7]
    steps = tessera.vmap(collatz_steps)(tnp.asarray(starts, "i32"))
    assert np.asarray(steps).tolist() == [collatz_loop(n) for n in starts]


def test_fori_loop_with_traced_bounds_is_a_while_loop():
    body = lambda i, v: v + tnp.astype(i, tnp.float32) * v
    expected = np.array([1.0, 2.0])
    for i in range(2, 6):
        expected = expected + i * expected
    f = tessera.jit(lambda lo, hi, v: lax.fori_loop(lo, hi, body, v))
    out = f(tnp.asarray(2, "i32"), tnp.asarray(6, "i32"), tnp.asarray([1.0, 2.0]))
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-6)
    out = f(tnp.asarray(6, "i32"), tnp.asarray(2, "i32"), tnp.asarray([1.0, 2.0]))  # an empty range
    np.testing.assert_allclose(np.asarray(out), [1.0, 2.0])
    text = tessera.trace(lambda lo, hi, v: lax.fori_loop(lo, hi, body, v))(
        tnp.asarray(2, "i32"), tnp.asarray(6, "i32"), tnp.asarray([1.0, 2.0]))
    assert "while_loop" in text and "scan" not in text
    # numpy ints are static bounds: a scan, which grad differentiates.
    g = tessera.grad(lambda a: lax.fori_loop(np.int64(0), 3, lambda i, c: c * a, tnp.asarray(1.0)))(tnp.asarray(2.0))
    np.testing.assert_allclose(float(g), 3 * 2.0 ** 2, rtol=1e-6)


def test_grad_of_while_loop_is_a_clear_error_at_the_users_line():
    def f(a):
        return lax.while_loop(lambda x: x < 100.0, lambda x: x * a, tnp.asarray(1.0))

    line = inspect.getsourcelines(f)[1] + 1
    with pytest.raises(tessera.TesseraError) as e:
        tessera.grad(f)(tnp.asarray(2.0))
    message = str(e.value)
    assert "reverse-mode differentiation does not work for while_loop" in message
    assert "fori_loop" in message and "static bounds" in message
    assert f"test_lax.py:{line}" in message
    with pytest.raises(TypeError, match="while_loop: body_fun returns"):
        lax.while_loop(lambda c: c[0] < 3, lambda c: c[0] + 1, (tnp.asarray(0, "i32"),))
    with pytest.raises(tessera.TesseraError, match="cond function must return a scalar bool"):
        lax.while_loop(lambda x: x, lambda x: x + 1, tnp.asarray(0.0))


def test_cond_runs_one_branch_and_traces_both():
    f = lambda p, x: lax.cond(p, lambda x: x * 2, lambda x: -x, x)
    x = tnp.asarray([1.0, -3.0])
    np.testing.assert_allclose(np.asarray(f(True, x)), [2.0, -6.0])
    np.testing.assert_allclose(np.asarray(f(tnp.asarray(False), x)), [-1.0, 3.0])
    jf = tessera.jit(f)
    np.testing.assert_allclose(np.asarray(jf(tnp.asarray(True), x)), [2.0, -6.0])
    np.testing.assert_allclose(np.asarray(jf(tnp.asarray(False), x)), [-1.0, 3.0])
    assert jf.cache_info()["misses"] == 1


def test_stop_gradient():
    f = lambda x: tnp.sum(x * lax.stop_gradient(x) ** 2)
    x = np.array([0.5, -2.0, 3.0], dtype=np.float32)
    np.testing.assert_allclose(np.asarray(tessera.grad(f)(tnp.asarray(x))), x ** 2, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(tessera.jit(tessera.grad(f))(tnp.asarray(x))), x ** 2, rtol=1e-6)
    tree = lax.stop_gradient({"a": tnp.asarray(1.0), "b": [tnp.asarray([2.0, 3.0])]})
    np.testing.assert_allclose(np.asarray(tree["b"][0]), [2.0, 3.0])


def test_integer_pow_and_its_gradient():
    x = np.array([0.5, -1.5, 2.0], dtype=np.float32)
    for n in (0, 1, 2, 3, -1, -2):
        np.testing.assert_allclose(np.asarray(lax.integer_pow(tnp.asarray(x), n)), x ** float(n), rtol=1e-6)
        g = tessera.grad(lambda v: tnp.sum(lax.integer_pow(v, n)))(tnp.asarray(x))
        np.testing.assert_allclose(np.asarray(g), n * x ** float(n - 1) if n else np.zeros_like(x), rtol=1e-5)
    xi = np.array([2, -3, 5], dtype=np.int32)
    np.testing.assert_array_equal(np.asarray(lax.integer_pow(tnp.asarray(xi), 3)), xi ** 3)
    with pytest.raises(tessera.TesseraError, match="integer_pow"):
        lax.integer_pow(tnp.asarray(xi), -1)


def test_lgamma_digamma_closed_forms():
    # Gamma(1/2) = sqrt(pi), Gamma(n) = (n - 1)!; psi(1) = -euler, psi(1/2) = -euler - 2 ln 2, psi(n + 1) = psi(n) + 1/n.
    euler = 0.5772156649015329
    x = np.array([0.5, 1.0, 2.0, 5.0], dtype=np.float64)
    lg = np.asarray(lax.lgamma(tnp.asarray(x.astype(np.float32))))
    np.testing.assert_allclose(lg, [0.5 * math.log(math.pi), 0.0, 0.0, math.log(24.0)], atol=1e-6)
    dg = np.asarray(lax.digamma(tnp.asarray(x.astype(np.float32))))
    np.testing.assert_allclose(dg, [-euler - 2 * math.log(2), -euler, 1 - euler, -euler + 1 + 1 / 2 + 1 / 3 + 1 / 4],
                               rtol=1e-6, atol=1e-6)
    # d/dx lgamma = digamma.
    g = tessera.grad(lambda v: tnp.sum(lax.lgamma(v)))(tnp.asarray(x.astype(np.float32)))
    np.testing.assert_allclose(np.asarray(g), dg, rtol=1e-6, atol=1e-6)


def _naive_scan(x, axis, reverse, fn):
    x = np.moveaxis(x, axis, 0)
    out = np.empty_like(x)
    order = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    acc = None
    for i in order:
        acc = x[i] if acc is None else fn(acc, x[i])
        out[i] = acc
    return np.moveaxis(out, 0, axis)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumulative(rng, axis, reverse):
    x = rng.uniform(-1.0, 1.0, (3, 5)).astype(np.float32)
    ops = [(lax.cumsum, np.add), (lax.cumprod, np.multiply), (lax.cummax, np.maximum),
           (lax.cumlogsumexp, np.logaddexp)]
    for op, fn in ops:
        np.testing.assert_allclose(np.asarray(op(tnp.asarray(x), axis=axis, reverse=reverse)),
                                   _naive_scan(x, axis, reverse, fn), rtol=1e-5, atol=1e-6)
    # Under vmap and grad: d/dx sum(cumsum(x)) counts how many prefixes hold each element.
    g = tessera.grad(lambda v: tnp.sum(lax.cumsum(v, axis=axis, reverse=reverse)))(tnp.asarray(x))
    n = x.shape[axis]
    counts = np.arange(1, n + 1) if reverse else np.arange(n, 0, -1)
    shape = [1, 1]
    shape[axis] = n
    np.testing.assert_allclose(np.asarray(g), np.broadcast_to(counts.reshape(shape), x.shape).astype(np.float32))
    batched = tessera.vmap(lambda v: lax.cummax(v, axis=0, reverse=reverse))(tnp.asarray(x))
    np.testing.assert_allclose(np.asarray(batched), _naive_scan(x, 1, reverse, np.maximum))


def test_sort_multi_operand_and_grad(rng):
    keys = np.array([[2, 1, 2, 0, 1], [0, 0, 1, 1, 0]], dtype=np.int32)
    vals = rng.standard_normal((2, 5)).astype(np.float32)
    k, v = lax.sort((tnp.asarray(keys), tnp.asarray(vals)), dimension=1, num_keys=1)
    order = np.argsort(keys, axis=1, kind="stable")
    np.testing.assert_array_equal(np.asarray(k), np.take_along_axis(keys, order, 1))
    np.testing.assert_array_equal(np.asarray(v), np.take_along_axis(vals, order, 1))
    # The gradient goes back through the permutation: d/dx sum(sort(x) * w) = w at each element's sorted place.
    x = rng.standard_normal((6,)).astype(np.float32)
    w = np.arange(1.0, 7.0, dtype=np.float32)
    g = tessera.grad(lambda a: tnp.sum(lax.sort(a) * tnp.asarray(w)))(tnp.asarray(x))
    expected = np.empty_like(x)
    expected[np.argsort(x)] = w
    np.testing.assert_allclose(np.asarray(g), expected)


def test_top_k(rng):
    x = rng.standard_normal((3, 10)).astype(np.float32)
    values, indices = lax.top_k(tnp.asarray(x), 4)
    order = np.argsort(-x, axis=1, kind="stable")[:, :4]
    np.testing.assert_array_equal(np.asarray(indices), order)
    assert np.asarray(indices).dtype == np.int32
    np.testing.assert_array_equal(np.asarray(values), np.take_along_axis(x, order, 1))
    g = tessera.grad(lambda a: tnp.sum(lax.top_k(a, 2)[0]))(tnp.asarray(x))
    expected = np.zeros_like(x)
    np.put_along_axis(expected, order[:, :2], 1.0, 1)
    np.testing.assert_array_equal(np.asarray(g), expected)
    batched = tessera.vmap(lambda r: lax.top_k(r, 3)[0])(tnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(batched), np.take_along_axis(x, order[:, :3], 1))
    with pytest.raises(tessera.TesseraError, match="top_k"):
        lax.top_k(tnp.asarray(x), 11)
