"""shard_map and its collectives, against numpy: each expected value is computed from the blocks each device holds
(JAX's semantics, written out by hand), gradients against the analytic ones."""

import numpy as np
import pytest

import tessera
from tessera import lax
from tessera import numpy as tnp
from tessera.sharding import P, make_mesh


@pytest.fixture(scope="module")
def mesh():
    return make_mesh((2, 2), ("x", "y"))  # devices 0..3, (x, y) row-major


@pytest.fixture(scope="module")
def ring():
    return make_mesh((4,), ("i",))


def data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def smap(f, mesh, in_specs, out_specs):
    return tessera.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs)


def test_psum_over_one_axis(mesh):
    a = data(8, 6)
    out = smap(lambda b: lax.psum(b, "x"), mesh, P("x", "y"), P(None, "y"))(tnp.asarray(a))
    # Device (x, y) holds a[4x:4x+4, 3y:3y+3]; the sum over x of the row blocks, kept split over y.
    np.testing.assert_allclose(np.asarray(out), a[:4] + a[4:], rtol=1e-6)
    assert out.sharding.spec == [[], ["y"]]


def test_psum_over_both_axes_and_python_numbers(mesh):
    a = data(8, 6)
    f = smap(lambda b: (lax.psum(b, ("x", "y")), lax.psum(1, ("x", "y")), lax.axis_size("y")), mesh,
             P("x", "y"), (P(), P(), P()))
    total, count, size_y = f(tnp.asarray(a))
    blocks = [a[4 * x:4 * x + 4, 3 * y:3 * y + 3] for x in range(2) for y in range(2)]
    np.testing.assert_allclose(np.asarray(total), sum(blocks), rtol=1e-6)
    assert int(count) == 4 and int(size_y) == 2


def test_pmean_pmax_pmin(ring):
    a = data(4, 5)
    f = smap(lambda b: (lax.pmean(b, "i"), lax.pmax(b, "i"), lax.pmin(b, "i")), ring, P("i"), (P(), P(), P()))
    mean, mx, mn = f(tnp.asarray(a))
    np.testing.assert_allclose(np.asarray(mean), a.mean(0, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(mx), a.max(0, keepdims=True))
    np.testing.assert_array_equal(np.asarray(mn), a.min(0, keepdims=True))


def test_axis_index(mesh):
    f = smap(lambda b: b + 10 * lax.axis_index("x") + lax.axis_index("y") + 100 * lax.axis_index(("x", "y")),
             mesh, P("x", "y"), P("x", "y"))
    out = np.asarray(f(tnp.zeros((2, 2), tnp.int32)))
    np.testing.assert_array_equal(out, [[0, 101], [210, 311]])


def test_all_gather(ring):
    a = data(8, 3)
    stacked = smap(lambda b: lax.all_gather(b, "i"), ring, P("i"), P())(tnp.asarray(a))
    np.testing.assert_array_equal(np.asarray(stacked), a.reshape(4, 2, 3))
    tiled = smap(lambda b: lax.all_gather(b, "i", axis=1, tiled=True), ring, P("i"), P("i"))(tnp.asarray(a))
    # Every device holds all four blocks side by side along dim 1: [2, 12] each, stacked over i.
    expected = np.concatenate([np.concatenate([a[2 * k:2 * k + 2] for k in range(4)], axis=1)] * 4)
    np.testing.assert_array_equal(np.asarray(tiled), expected)


def test_psum_scatter(ring):
    a = data(16, 3)
    # Each device holds a [4, 3] block; the sum of the blocks, split into four rows: device k keeps row k.
    out = smap(lambda b: lax.psum_scatter(b, "i", tiled=True), ring, P("i"), P("i"))(tnp.asarray(a))
    np.testing.assert_allclose(np.asarray(out), a.reshape(4, 4, 3).sum(0), rtol=1e-5)
    out2 = smap(lambda b: lax.psum_scatter(b, "i"), ring, P("i"), P("i"))(tnp.asarray(a))
    # Without tiled each device's row loses its dim: [3] each, put end to end by out_specs P('i').
    np.testing.assert_allclose(np.asarray(out2), a.reshape(4, 4, 3).sum(0).ravel(), rtol=1e-5)


def test_all_to_all(ring):
    a = data(8, 12)
    # Device k holds rows 2k..2k+1; it sends columns 3j..3j+2 to device j, which stacks what it gets along dim 0.
    out = smap(lambda b: lax.all_to_all(b, "i", 1, 0, tiled=True), ring, P("i"), P(None, "i"))(tnp.asarray(a))
    np.testing.assert_array_equal(np.asarray(out), a)  # rows whole, columns split: the same array, resplit
    b = data(4, 4, 3)  # device k: [1, 4, 3]; split axis 1 (size 4) over the devices, stacked on a new axis 0
    out2 = smap(lambda v: lax.all_to_all(v[0], "i", 0, 0), ring, P("i"), P("i"))(tnp.asarray(b))
    # Device j receives piece j of every device k: [4 (k), 3] -> its block of the result.
    expected = np.concatenate([b[:, j] for j in range(4)])
    np.testing.assert_array_equal(np.asarray(out2), expected)


def test_ppermute_and_pshuffle(ring):
    a = np.arange(4, dtype=np.float32).reshape(4, 1)
    shift = smap(lambda b: lax.ppermute(b, "i", [(k, (k + 1) % 4) for k in range(4)]), ring, P("i"), P("i"))
    np.testing.assert_array_equal(np.asarray(shift(tnp.asarray(a))).ravel(), [3, 0, 1, 2])
    partial = smap(lambda b: lax.ppermute(b, "i", [(0, 3)]), ring, P("i"), P("i"))
    np.testing.assert_array_equal(np.asarray(partial(tnp.asarray(a))).ravel(), [0, 0, 0, 0])
    shuffle = smap(lambda b: lax.pshuffle(b, "i", [2, 3, 0, 1]), ring, P("i"), P("i"))
    np.testing.assert_array_equal(np.asarray(shuffle(tnp.asarray(a + 1))).ravel(), [3, 4, 1, 2])


def test_jit_of_shard_map_keeps_the_split(mesh):
    a = data(8, 6)
    f = smap(lambda b: b * 2, mesh, P("x", "y"), P("x", "y"))
    out = tessera.jit(f)(tnp.asarray(a))
    assert out.sharding.spec == [["x"], ["y"]]
    np.testing.assert_allclose(np.asarray(out), 2 * a)


def test_jit_with_donated_arguments(ring):
    w, x = data(3), data(8, 3, seed=1)
    step = tessera.jit(smap(lambda w, x: w - 0.1 * lax.pmean(tnp.sum(x, 0), "i"), ring, (P(), P("i")), P()),
                       donate_argnums=0)
    expected = w - 0.1 * x.sum(0) / 4
    ws = tessera.device_put(tnp.asarray(w), tessera.sharding.NamedSharding(ring, P()))
    xs = tessera.device_put(tnp.asarray(x), tessera.sharding.NamedSharding(ring, P("i")))
    new = step(ws, xs)
    assert ws.is_deleted() and not xs.is_deleted()
    np.testing.assert_allclose(np.asarray(new), expected, rtol=1e-6)
    # The step's own result donated to the next step; a one-device argument is deleted too.
    again = step(new, xs)
    assert new.is_deleted()
    np.testing.assert_allclose(np.asarray(again), expected - 0.1 * x.sum(0) / 4, rtol=1e-6)
    one = tnp.asarray(w)
    np.testing.assert_allclose(np.asarray(step(one, xs)), expected, rtol=1e-6)
    assert one.is_deleted()
    with pytest.raises(tessera.DeletedArrayError):
        step(one, xs)
    # Without donation nothing is deleted.
    kept = tnp.asarray(w)
    tessera.jit(smap(lambda w, x: w * 2, ring, (P(), P("i")), P()))(kept, xs)
    assert not kept.is_deleted()


def test_inside_jit_with_other_ops(mesh):
    a, w = data(8, 6), data(6, 4, seed=1)
    matmul = smap(lambda x, w: lax.psum(x @ w, "y"), mesh, (P("x", "y"), P("y", None)), P("x", None))

    @tessera.jit
    def f(x, w):
        return tnp.tanh(matmul(x * 2, w)) + 1

    np.testing.assert_allclose(np.asarray(f(tnp.asarray(a), tnp.asarray(w))), np.tanh(2 * a @ w) + 1, rtol=2e-5,
                               atol=2e-6)


def test_inside_a_jit_of_sharded_arguments(mesh):
    # The partitioned program runs the body on each device: x arrives split (y, x), the other way round from the
    # in_specs (resharded), w arrives whole; the closed-over scale is read whole by every device.
    a, w = data(8, 6), data(6, 4, seed=1)
    scale = tnp.asarray(np.float32(0.5))
    matmul = smap(lambda x, w: lax.psum(x @ w, "y") * scale, mesh, (P("x", "y"), P("y", None)), P("x", None))

    @tessera.jit
    def f(x, w):
        return tnp.tanh(matmul(x * 2, w)) + 1

    xs = tessera.device_put(tnp.asarray(a), tessera.sharding.NamedSharding(mesh, P("y", "x")))
    ws = tessera.device_put(tnp.asarray(w), tessera.sharding.NamedSharding(mesh, P()))
    np.testing.assert_allclose(np.asarray(f(xs, ws)), np.tanh(a @ w) + 1, rtol=2e-5, atol=2e-6)
    # A result split as out_specs say stays split when the program returns it as it is.
    out = tessera.jit(lambda x, w: matmul(x, w))(xs, ws)
    assert out.sharding.spec == [["x"], []]
    np.testing.assert_allclose(np.asarray(out), 0.5 * a @ w, rtol=2e-5, atol=2e-6)


def test_training_step_of_sharded_arguments(ring):
    # A jitted step over a batch split over the ring: the loss per device in a shard_map (psum'd), its gradient
    # through the body's vjp, the update outside it; against the analytic gradient.
    x, w, t = data(16, 3), data(3, seed=2), data(16, seed=3)
    loss = smap(lambda w, x, t: lax.psum(tnp.sum((x @ w - t) ** 2), "i") / 16.0, ring, (P(), P("i"), P("i")), P())

    @tessera.jit
    def step(w, x, t):
        value, g = tessera.value_and_grad(loss)(w, x, t)
        return w - 0.1 * g, value

    split = tessera.sharding.NamedSharding(ring, P("i"))
    xs, ts_ = tessera.device_put(tnp.asarray(x), split), tessera.device_put(tnp.asarray(t), split)
    ws = tessera.device_put(tnp.asarray(w), tessera.sharding.NamedSharding(ring, P()))
    new_w, value = step(ws, xs, ts_)
    r = x @ w - t
    np.testing.assert_allclose(float(value), np.mean(r ** 2), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(new_w), w - 0.1 * 2 / 16 * x.T @ r, rtol=1e-5, atol=1e-6)
    new_w, value = step(new_w, xs, ts_)  # again, from the step's own (sharded) result
    np.testing.assert_allclose(float(value), np.mean((x @ (w - 0.1 * 2 / 16 * x.T @ r) - t) ** 2), rtol=1e-4)


def test_traces_reuse_the_compiled_programs(ring):
    # An eager grad traces its function at every call: the shard_map inside is traced (forward and backward) and
    # compiled at the first call only. A body closing over a value of the trace is traced again each time.
    traces = []

    def body(w, x):
        traces.append(1)
        return lax.psum(tnp.sum(x * w), "i")

    f = smap(body, ring, (P(), P("i")), P())
    x, w = data(8), data(seed=1)
    for _ in range(3):
        g = tessera.grad(f)(tnp.asarray(w), tnp.asarray(x))
        np.testing.assert_allclose(float(g), x.sum(), rtol=1e-5)
    assert len(traces) == 2  # the forward program and the one of its vjp

    def outer(s):
        return smap(lambda x: lax.psum(tnp.sum(x * s), "i"), ring, P("i"), P())(tnp.asarray(x))

    closing = tessera.grad(outer)
    for s in (1.0, 2.0):
        np.testing.assert_allclose(float(closing(tnp.asarray(np.float32(s)))), x.sum(), rtol=1e-5)


def test_inside_a_jit_on_another_mesh(mesh, ring):
    f = smap(lambda b: lax.psum(b, "i"), ring, P("i"), P())
    xs = tessera.device_put(tnp.ones((8, 2)), tessera.sharding.NamedSharding(mesh, P("x")))
    with pytest.raises(Exception, match=r"runs on Mesh\('i': 4\) inside a program on Mesh\('x': 2, 'y': 2\)"):
        tessera.jit(lambda a: f(a) + 1)(xs)


def test_grad_through_shard_map(mesh):
    # y = x @ w with x split over rows (x) and columns (y), w over rows (y): each device a partial product,
    # summed over y. loss = sum(y ** 2): dx = 2 y w^T, dw = 2 x^T y.
    a, w = data(8, 6), data(6, 4, seed=1)
    matmul = smap(lambda x, w: lax.psum(x @ w, "y"), mesh, (P("x", "y"), P("y", None)), P("x", None))
    gx, gw = tessera.grad(lambda x, w: tnp.sum(matmul(x, w) ** 2), argnums=(0, 1))(tnp.asarray(a), tnp.asarray(w))
    y = a @ w
    np.testing.assert_allclose(np.asarray(gx), 2 * y @ w.T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(gw), 2 * a.T @ y, rtol=1e-4, atol=1e-5)


def test_forward_mode_and_higher_derivatives(ring):
    # L(w) = sum((x w)^3) over the rows split on the ring, w read whole by every device: dL = 3 x^T r^2,
    # H = 6 x^T diag(r) x with r = x w, and d(v^T H v)/dw = 6 x^T (x v)^2. Each order above the first is
    # compiled when it first runs.
    x, w, v = data(8, 3), data(3, seed=2), data(3, seed=3)
    loss = smap(lambda w, x: lax.psum(tnp.sum((x @ w) ** 3), "i"), ring, (P(), P("i")), P())
    xs = tnp.asarray(x)
    r = x @ w
    grad = 3 * x.T @ r ** 2
    hess = 6 * x.T @ (r[:, None] * x)
    value, tangent = tessera.jvp(lambda w: loss(w, xs), (tnp.asarray(w),), (tnp.asarray(v),))
    np.testing.assert_allclose(float(value), np.sum(r ** 3), rtol=1e-5)
    np.testing.assert_allclose(float(tangent), grad @ v, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(tessera.jacfwd(loss)(tnp.asarray(w), xs)), grad, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(tessera.hessian(loss)(tnp.asarray(w), xs)), hess, rtol=1e-4, atol=1e-4)
    hvp = tessera.grad(lambda w: tnp.sum(tessera.grad(loss)(w, xs) * tnp.asarray(v)))(tnp.asarray(w))
    np.testing.assert_allclose(np.asarray(hvp), hess @ v, rtol=1e-4, atol=1e-4)
    third = tessera.grad(lambda w: tnp.sum(tessera.jvp(lambda u: tessera.grad(loss)(u, xs), (w,),
                                                         (tnp.asarray(v),))[1] * tnp.asarray(v)))(tnp.asarray(w))
    np.testing.assert_allclose(np.asarray(third), 6 * x.T @ (x @ v) ** 2, rtol=1e-4, atol=1e-4)
    with pytest.raises(Exception, match="order 5 and above through shard_map"):
        tessera.jacfwd(tessera.hessian(loss))(tnp.asarray(w), xs)
    # Inside a jitted function of sharded arguments (the orders above the first run on every device).
    split = tessera.device_put(xs, tessera.sharding.NamedSharding(ring, P("i")))
    whole = tessera.device_put(tnp.asarray(w), tessera.sharding.NamedSharding(ring, P()))
    np.testing.assert_allclose(np.asarray(tessera.jit(tessera.hessian(loss))(whole, split)), hess, rtol=1e-4,
                               atol=1e-4)


def test_grad_of_replicated_result_and_argument(ring):
    # w is read whole by every device (P()), the loss is the same on every device (out_specs P()): its gradient
    # is the gradient of the one loss, not four times it.
    x, w, t = data(8, 3), data(3, seed=2), data(8, seed=3)

    def local_loss(x, w, t):
        return lax.psum(tnp.sum((x @ w - t) ** 2), "i") / 8.0

    loss = smap(local_loss, ring, (P("i"), P(), P("i")), P())
    value, gw = tessera.value_and_grad(lambda w: loss(tnp.asarray(x), w, tnp.asarray(t)))(tnp.asarray(w))
    r = x @ w - t
    np.testing.assert_allclose(float(value), np.mean(r ** 2), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(gw), 2 / 8 * x.T @ r, rtol=1e-4, atol=1e-6)


def test_data_parallel_step_inside_the_body(ring):
    # The usual explicit data parallelism: each device's gradient of its batch, averaged with pmean.
    x, w, t = data(16, 3), data(3, seed=2), data(16, seed=3)

    def step(w, x, t):
        g = tessera.grad(lambda w: tnp.mean((x @ w - t) ** 2))(w)
        return w - 0.1 * lax.pmean(g, "i")

    new_w = tessera.jit(smap(step, ring, (P(), P("i"), P("i")), P()))(tnp.asarray(w), tnp.asarray(x), tnp.asarray(t))
    grad = 2 / 16 * x.T @ (x @ w - t)
    np.testing.assert_allclose(np.asarray(new_w), w - 0.1 * grad, rtol=1e-5, atol=1e-6)


def test_collectives_in_a_scan_body(ring):
    a = data(4, 2)

    def body(b):
        def step(c, _):
            return lax.psum(c, "i") / 4.0 + 1.0, None
        return lax.scan(step, b, None, length=3)[0]

    out = np.asarray(smap(body, ring, P("i"), P("i"))(tnp.asarray(a)))
    mean = a.mean(0)
    expected = ((mean + 1.0) + 1.0) + 1.0  # the mean of equal values is the value
    np.testing.assert_allclose(out, np.tile(expected, (4, 1)), rtol=1e-5)


def test_vmap_of_shard_map(ring):
    a = data(3, 8)
    f = smap(lambda b: lax.psum(tnp.sum(b), "i"), ring, P("i"), P())
    out = tessera.vmap(f)(tnp.asarray(a))
    np.testing.assert_allclose(np.asarray(out), a.sum(1), rtol=1e-5)


def test_closure_and_pytrees(ring):
    scale = tnp.asarray(np.float32(3.0))
    a, b = data(8), data(8, seed=1)
    f = smap(lambda d: {"s": d["a"] * scale + d["b"]}, ring, ({"a": P("i"), "b": P("i")},), {"s": P("i")})
    out = f({"a": tnp.asarray(a), "b": tnp.asarray(b)})
    np.testing.assert_allclose(np.asarray(out["s"]), 3 * a + b, rtol=1e-6)


def test_errors(ring, mesh):
    with pytest.raises(NameError, match="unbound axis name: i"):
        lax.psum(tnp.ones(3), "i")
    with pytest.raises(NameError, match="unbound axis name: z"):
        smap(lambda b: lax.psum(b, "z"), ring, P("i"), P("i"))(tnp.ones(8))
    with pytest.raises(ValueError, match="argument 0"):
        smap(lambda b: b, ring, P("i"), P("i"))(tnp.ones(6))  # 6 rows over 4 devices
    with pytest.raises(ValueError, match="out_specs"):
        smap(lambda b: (b, b), ring, P("i"), (P("i"),))(tnp.ones(8))
    with pytest.raises(ValueError, match="split_axis"):
        smap(lambda b: lax.all_to_all(b, "i", 0, 0), ring, P("i"), P("i"))(tnp.ones((12, 2)))
    with pytest.raises(TypeError, match="mesh, in_specs and out_specs"):
        tessera.shard_map(lambda b: b, mesh=ring)

    # An error while the program runs (a callback in the body that raises) is raised, and the mesh runs again.
    def refuse(b):
        raise ValueError("no blocks today")

    failing = smap(lambda b: tessera.pure_callback(refuse, b, b), ring, P("i"), P("i"))
    with pytest.raises(Exception, match="no blocks today"):
        failing(tnp.ones(8))
    np.testing.assert_allclose(np.asarray(smap(lambda b: lax.psum(b, "i"), ring, P("i"), P())(tnp.ones(4))), [4.0])


def test_pmap():
    x = data(4, 3) + 3.0
    np.testing.assert_allclose(np.asarray(tessera.pmap(lambda v: v * 2)(tnp.asarray(x))), 2 * x)
    normalize = tessera.pmap(lambda v: v / lax.psum(v, "i"), axis_name="i")
    np.testing.assert_allclose(np.asarray(normalize(tnp.asarray(x))), x / x.sum(0), rtol=1e-6)
    # Mapped over axis 1, an unmapped scalar, a result the same on every device returned once.
    dot = tessera.pmap(lambda v, w: lax.psum(v * w, "i"), axis_name="i", in_axes=(1, None), out_axes=None)
    np.testing.assert_allclose(np.asarray(dot(tnp.asarray(x.T), tnp.asarray(np.float32(3)))), 3 * x.sum(0),
                               rtol=1e-6)
    # d/dv_k sum((v / S)^2), S the column sums: (2 / S) (y_k - sum_j y_j^2) with y = v / S.
    g = tessera.grad(lambda v: tnp.sum(normalize(v) ** 2))(tnp.asarray(x))
    s = x.sum(0)
    y = x / s
    np.testing.assert_allclose(np.asarray(g), 2 / s * (y - (y ** 2).sum(0)), rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="devices"):
        tessera.pmap(lambda v: v)(tnp.ones((9, 2)))  # 9 > the 8 devices
    # A static argument reaches fun as a Python value (a power here), each value its own program.
    power = tessera.pmap(lambda v, p: v ** p, axis_name="i", static_broadcasted_argnums=1)
    np.testing.assert_allclose(np.asarray(power(tnp.asarray(x), 3)), x ** 3, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(power(tnp.asarray(x), 2)), x ** 2, rtol=1e-6)


def test_debug_print_in_the_body_prints_each_devices_block(ring, capfd):
    f = smap(lambda b: (tessera.debug.print("block {}", b), b + 1)[1], ring, P("i"), P("i"))
    np.testing.assert_array_equal(np.asarray(f(tnp.arange(4.0))), [1, 2, 3, 4])
    assert sorted(capfd.readouterr().out.splitlines()) == [f"block [{k}.]" for k in range(4)]


def test_axis_index_groups(ring):
    # Device k of the ring holds row k; each collective runs within the index groups, as pmap's do in JAX.
    a = data(4, 3)
    pairs, strided = [[0, 1], [2, 3]], [[0, 2], [1, 3]]
    f = smap(lambda b: (lax.psum(b, "i", axis_index_groups=pairs), lax.pmean(b, "i", axis_index_groups=strided),
                        lax.pmax(b, "i", axis_index_groups=strided), lax.psum(1, "i", axis_index_groups=pairs),
                        lax.all_gather(b[0], "i", axis_index_groups=strided)),
             ring, P("i"), (P("i"), P("i"), P("i"), P(), P("i")))
    s, mean, mx, count, gathered = f(tnp.asarray(a))
    partner = [1, 0, 3, 2]  # within the pairs
    other = [2, 3, 0, 1]    # within the strided groups
    np.testing.assert_allclose(np.asarray(s), a + a[partner], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(mean), (a + a[other]) / 2, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(mx), np.maximum(a, a[other]))
    assert int(count) == 2
    # Device k gathers its group's rows in group order: [a[0], a[2]] on devices 0 and 2, [a[1], a[3]] on 1 and 3.
    expected = np.stack([a[[k % 2, k % 2 + 2]] for k in range(4)])
    np.testing.assert_allclose(np.asarray(gathered), expected.reshape(8, 3), rtol=1e-6)
    # The same through pmap, against JAX's result for psum over pairs of arange(8).reshape(4, 2).
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    out = tessera.pmap(lambda v: lax.psum(v, "i", axis_index_groups=pairs), axis_name="i")(tnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(out), [[2, 4], [2, 4], [10, 12], [10, 12]])
    with pytest.raises(ValueError, match="axis_index_groups"):
        smap(lambda b: lax.psum(b, "i", axis_index_groups=[[0, 1], [2]]), ring, P("i"), P("i"))(tnp.asarray(a))
    with pytest.raises(ValueError, match="axis_index_groups"):
        smap(lambda b: lax.psum(b, "i", axis_index_groups=[[0, 1], [1, 2]]), ring, P("i"), P("i"))(tnp.asarray(a))


def test_pswapaxes_pbroadcast_pcast(ring):
    # Device k holds a[k] (4 x 2 blocks of a 4 x 4 x 2 array, one row of 4 each): pswapaxes over axis 0 gives
    # device k the k-th rows of every device's block, a transpose of the first two axes.
    a = data(4, 4, 2)
    swapped = smap(lambda b: lax.pswapaxes(b[0], "i", 0)[None], ring, P("i"), P("i"))(tnp.asarray(a))
    np.testing.assert_array_equal(np.asarray(swapped), a.transpose(1, 0, 2))
    out = smap(lambda b: lax.pbroadcast(b, "i", 2), ring, P("i"), P("i"))(tnp.asarray(a))
    np.testing.assert_array_equal(np.asarray(out), np.repeat(a[2:3], 4, axis=0))
    same = smap(lambda b: lax.pcast(b, "i", to="varying") * 2, ring, P("i"), P("i"))(tnp.asarray(a))
    np.testing.assert_array_equal(np.asarray(same), 2 * a)
    with pytest.raises(ValueError, match="source 4"):
        smap(lambda b: lax.pbroadcast(b, "i", 4), ring, P("i"), P("i"))(tnp.asarray(a))
    with pytest.raises(ValueError, match="`to`"):
        smap(lambda b: lax.pcast(b, "i", to="nothing"), ring, P("i"), P("i"))(tnp.asarray(a))


def test_data_and_tensor_parallel_training_inside_jit(mesh):
    # An MLP whose first layer is split by columns and second by rows over 'y' (Megatron's pattern, the partial
    # products summed with psum) and whose batch is split over 'x', trained with Adam by a jitted step of the
    # split parameters: the losses and parameters follow the same model on one device, step after step, and the
    # parameters stay split as they came.
    from tessera import optim

    w1, w2, x, y = data(16, 32) * 0.2, data(32, 4, seed=1) * 0.2, data(8, 16, seed=2), data(8, 4, seed=3)

    def body(w1, w2, x, y):
        out = lax.psum(tnp.tanh(x @ w1) @ w2, "y")
        return lax.pmean(tnp.mean((out - y) ** 2), "x")

    split = smap(body, mesh, (P(None, "y"), P("y", None), P("x"), P("x")), P())

    def whole(w1, w2, x, y):
        return tnp.mean((tnp.tanh(x @ w1) @ w2 - y) ** 2)

    opt = optim.adam(1e-2)

    def make_step(loss):
        @tessera.jit
        def step(params, state, x, y):
            value, g = tessera.value_and_grad(lambda p: loss(p[0], p[1], x, y))(params)
            updates, state = opt.update(g, state, params)
            return optim.apply_updates(params, updates), state, value
        return step

    def put(a, spec):
        return tessera.device_put(tnp.asarray(a), tessera.sharding.NamedSharding(mesh, spec))

    params = (put(w1, P(None, "y")), put(w2, P("y", None)))
    ref = (tnp.asarray(w1), tnp.asarray(w2))
    state, ref_state = opt.init(params), opt.init(ref)
    step, ref_step = make_step(split), make_step(whole)
    xs, ys = put(x, P("x")), put(y, P("x"))
    for _ in range(4):
        params, state, value = step(params, state, xs, ys)
        ref, ref_state, ref_value = ref_step(ref, ref_state, tnp.asarray(x), tnp.asarray(y))
        np.testing.assert_allclose(float(value), float(ref_value), rtol=1e-5)
        for got, want in zip(params, ref):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
    assert params[0].sharding.spec == [[], ["y"]] and params[1].sharding.spec == [["y"], []]


def test_auto_axes(mesh):
    # Manual over 'x' only: the body sees rows split over x and whole along y, where every device computes the
    # same; JAX's result for this psum of arange(16) as a 4 x 4.
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    f = tessera.shard_map(lambda b: lax.psum(b, "x"), mesh=mesh, in_specs=P("x"), out_specs=P(), axis_names={"x"})
    expected = [[8, 10, 12, 14], [16, 18, 20, 22]]
    np.testing.assert_array_equal(np.asarray(f(tnp.asarray(a))), expected)
    np.testing.assert_array_equal(np.asarray(tessera.jit(f)(tnp.asarray(a))), expected)
    same = tessera.shard_map(lambda b: lax.psum(b, "x"), mesh=mesh, in_specs=P("x"), out_specs=P(), auto={"y"})
    np.testing.assert_array_equal(np.asarray(same(tnp.asarray(a))), expected)
    # The gradient: sum(psum(b, x)^2) over the 2 x 4 result, d/da = 2 * (the row's partner sum) for each row.
    g = tessera.grad(lambda v: tnp.sum(f(v) ** 2))(tnp.asarray(a))
    s = a[:2] + a[2:]
    np.testing.assert_allclose(np.asarray(g), 2 * np.concatenate([s, s]), rtol=1e-6)
    # Inside a jitted function of arguments split over the whole mesh.
    split = tessera.device_put(tnp.asarray(a), tessera.sharding.NamedSharding(mesh, P("x", "y")))
    np.testing.assert_array_equal(np.asarray(tessera.jit(lambda v: f(v) + 0)(split)), expected)
    with pytest.raises(ValueError, match="must refer to an axis marked as manual"):
        tessera.shard_map(lambda b: b, mesh=mesh, in_specs=P("y"), out_specs=P(), axis_names={"x"})
    with pytest.raises(NameError, match="unbound axis name: y .*auto axis"):
        tessera.shard_map(lambda b: lax.psum(b, "y"), mesh=mesh, in_specs=P("x"), out_specs=P(),
                          axis_names={"x"})(tnp.asarray(a))
