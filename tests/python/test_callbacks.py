"""Host callbacks from Python: tessera.debug.print/callback, pure_callback and io_callback, eagerly, under jit,
vmap, grad and inside loops, against values computed with numpy and the calls the functions record."""

import threading

import numpy as np
import pytest

import tessera as ts
import tessera.lax as lax
import tessera.numpy as tnp


def test_pure_callback_eager_and_jit():
    calls = []

    def host(v):
        calls.append(v.copy())
        assert isinstance(v, np.ndarray)
        return np.sinh(v)  # numpy's float32 sinh: the values the test expects

    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    f = lambda v: ts.pure_callback(host, ts.ShapeDtypeStruct(v.shape, v.dtype), v * 2.0) + 1.0  # noqa: E731
    np.testing.assert_allclose(np.asarray(f(x)), np.sinh(2 * x) + 1, rtol=1e-6)
    jf = ts.jit(f)
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(jf(x)), np.sinh(2 * x) + 1, rtol=1e-6)
    assert len(calls) == 3  # once eagerly, once per jitted call, none while tracing
    np.testing.assert_array_equal(calls[-1], 2 * x)


def test_pure_callback_trees_kwargs_and_dtype_conversion():
    def host(a, b, *, scale):
        return {"sum": (a + b) * scale, "count": np.array(a.size)}  # int64 and float64 results, converted

    spec = {"sum": ts.ShapeDtypeStruct((3,), tnp.float32), "count": ts.ShapeDtypeStruct((), tnp.int32)}
    a, b = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
    out = ts.jit(lambda a, b: ts.pure_callback(host, spec, a, b, scale=np.float32(0.5)))(a, b)
    assert out["sum"].dtype == np.float32 and out["count"].dtype == np.int32
    np.testing.assert_array_equal(np.asarray(out["sum"]), (a + b) * 0.5)
    assert int(out["count"]) == 3


def test_unused_pure_callback_is_dropped_unused_io_callback_runs():
    pure_calls, io_calls = [], []

    def f(x):
        ts.pure_callback(lambda v: pure_calls.append(1) or v, ts.ShapeDtypeStruct(x.shape, x.dtype), x)
        ts.io_callback(lambda v: io_calls.append(float(v.sum())) or v, ts.ShapeDtypeStruct(x.shape, x.dtype), x)
        return x + 1

    ts.jit(f)(np.ones(4, np.float32))
    assert pure_calls == [] and io_calls == [4.0]


def test_debug_print_under_jit_prints_each_call(capfd):
    @ts.jit
    def step(x):
        ts.debug.print("x = {}, total = {t}", x, t=x.sum())
        return x * 2

    step(np.array([1.0, 2.0], np.float32))
    step(np.array([3.0, 4.0], np.float32))
    out = capfd.readouterr().out.splitlines()
    assert out == ["x = [1. 2.], total = 3.0", "x = [3. 4.], total = 7.0"]


def test_debug_prints_keep_program_order_inside_a_loop(capfd):
    def body(i, carry):
        ts.debug.print("step {} carry {}", i, carry)
        return carry * 2

    out = ts.jit(lambda c: lax.fori_loop(0, 3, body, c))(np.float32(1.5))
    assert float(out) == 12.0
    assert capfd.readouterr().out.splitlines() == ["step 0 carry 1.5", "step 1 carry 3.0", "step 2 carry 6.0"]


def test_debug_callback_under_vmap_runs_per_example():
    seen = []
    xs = np.arange(6, dtype=np.float32).reshape(3, 2)
    ts.vmap(lambda x: ts.debug.callback(lambda v: seen.append(v.tolist()), x))(xs)
    assert seen == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]


def test_pure_callback_vmap_methods():
    xs = np.arange(6, dtype=np.float32).reshape(3, 2)
    shapes = []

    def host(v):
        shapes.append(v.shape)
        return v * 10

    def f(method):
        return lambda x: ts.pure_callback(host, ts.ShapeDtypeStruct(x.shape, x.dtype), x, vmap_method=method)

    np.testing.assert_array_equal(np.asarray(ts.vmap(f("sequential"))(xs)), xs * 10)
    assert shapes == [(2,)] * 3
    shapes.clear()
    np.testing.assert_array_equal(np.asarray(ts.jit(ts.vmap(f("broadcast_all")))(xs)), xs * 10)
    assert shapes == [(3, 2)]
    with pytest.raises(Exception, match="vmap_method"):
        ts.vmap(f(None))(xs)


def test_grad_through_debug_print_and_refused_through_pure_callback(capfd):
    def loss(w):
        ts.debug.print("w {}", w)
        return (w * w).sum()

    np.testing.assert_array_equal(np.asarray(ts.grad(loss)(np.array([1.0, -2.0], np.float32))), [2.0, -4.0])
    assert capfd.readouterr().out.splitlines() == ["w [ 1. -2.]"]
    bad = lambda w: ts.pure_callback(np.sin, ts.ShapeDtypeStruct(w.shape, w.dtype), w).sum()  # noqa: E731
    with pytest.raises(Exception, match="custom_vjp"):
        ts.grad(bad)(np.ones(2, np.float32))


def test_callback_with_custom_vjp_differentiates():
    @ts.custom_vjp
    def host_sin(x):
        return ts.pure_callback(np.sin, ts.ShapeDtypeStruct(x.shape, x.dtype), x)

    host_sin.defvjp(lambda x: (host_sin(x), x),
                    lambda x, g: (g * ts.pure_callback(np.cos, ts.ShapeDtypeStruct(x.shape, x.dtype), x),))
    x = np.array([0.3, 1.2], np.float32)
    np.testing.assert_allclose(np.asarray(ts.jit(ts.grad(lambda v: host_sin(v).sum()))(x)), np.cos(x), rtol=1e-6)


def test_callback_errors_are_clear():
    def boom(v):
        raise KeyError("sensor offline")

    # the user's own exception, the program's error as a note
    with pytest.raises(KeyError, match="sensor offline") as e:
        ts.jit(lambda x: ts.pure_callback(boom, ts.ShapeDtypeStruct(x.shape, x.dtype), x))(np.ones(2, np.float32))
    notes = "\n".join(getattr(e.value, "__notes__", []))
    assert "pure_callback(test_callback_errors_are_clear.<locals>.boom) raised KeyError" in notes
    assert "test_callbacks.py" in notes and "in boom" in notes
    with pytest.raises(KeyError):
        ts.pure_callback(boom, ts.ShapeDtypeStruct((2,), tnp.float32), np.ones(2, np.float32))  # eagerly too
    with pytest.raises(Exception, match=r"result 0 has shape \(1,\), but \(2,\) was declared"):
        ts.pure_callback(lambda v: v[:1], ts.ShapeDtypeStruct((2,), tnp.float32), np.ones(2, np.float32))
    with pytest.raises(TypeError, match="structure"):
        ts.pure_callback(lambda v: (v, v), ts.ShapeDtypeStruct((2,), tnp.float32), np.ones(2, np.float32))
    with pytest.raises(TypeError, match="format must be a str"):
        ts.debug.print(3)


def test_callbacks_see_ieee_arithmetic_inside_jit():
    # jitted code flushes subnormals; the host function must not inherit that
    got = []
    ts.jit(lambda x: ts.debug.callback(lambda v: got.append(float(np.float32(v) * np.float32(1e-30))), x))(
        np.float32(1e-10))
    assert got and got[0] > 0.0


def test_bfloat16_operands_reach_python_as_float32():
    seen = []
    x = tnp.asarray([1.5, -2.0], dtype=tnp.bfloat16)
    out = ts.pure_callback(lambda v: seen.append(v.dtype) or v * 2, ts.ShapeDtypeStruct((2,), tnp.bfloat16), x)
    assert seen == [np.float32]
    np.testing.assert_array_equal(np.asarray(out, np.float32), [3.0, -4.0])


def test_debug_print_of_a_sharded_program_prints_once(capfd):
    from tessera.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(ts.devices()[:4], ("d",))
    x = ts.device_put(np.arange(8, dtype=np.float32), NamedSharding(mesh, P("d")))

    @ts.jit
    def f(v):
        ts.debug.print("total {}", v.sum())
        return v * 2

    np.testing.assert_array_equal(np.asarray(f(x)), np.arange(8) * 2)
    assert capfd.readouterr().out.splitlines() == ["total 28.0"]


def test_io_callback_of_a_sharded_program_runs_once_and_every_device_gets_its_results():
    from tessera.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(ts.devices()[:2], ("d",))
    x = ts.device_put(np.arange(8, dtype=np.float32), NamedSharding(mesh, P("d")))
    reads = []

    def read(total):  # a sensor: each read gives the next level
        reads.append(float(total))
        return np.float32(10 * len(reads)), np.array([True, False])

    spec = (ts.ShapeDtypeStruct((), tnp.float32), ts.ShapeDtypeStruct((2,), tnp.bool_))

    @ts.jit
    def f(v):
        level, flags = ts.io_callback(read, spec, v.sum())
        return v * level, flags  # each device scales its own half by the level it got

    for call in (1, 2):
        y, flags = f(x)
        assert reads == [28.0] * call  # once per run, not once per device
        np.testing.assert_array_equal(np.asarray(y), np.arange(8) * 10 * call)
        np.testing.assert_array_equal(np.asarray(flags), [True, False])


def test_a_failed_sharded_run_leaves_the_devices_usable():
    from tessera.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(ts.devices()[:2], ("d",))
    x = ts.device_put(np.arange(8, dtype=np.float32), NamedSharding(mesh, P("d")))
    state = {"fail": True}

    def scale(total):
        if state["fail"]:
            raise KeyError("sensor offline")
        return np.float32(2)

    @ts.jit
    def f(v):
        return v * ts.pure_callback(scale, ts.ShapeDtypeStruct((), tnp.float32), v.sum())

    with pytest.raises(KeyError, match="sensor offline"):
        f(x)
    state["fail"] = False  # the next runs (this program's, and others with collectives) go through
    np.testing.assert_array_equal(np.asarray(f(x)), np.arange(8) * 2)
    np.testing.assert_array_equal(np.asarray(ts.jit(lambda v: v - v.sum())(x)), np.arange(8) - 28)


def test_a_callback_runs_a_sharded_function_on_the_devices_of_its_run():
    """An io_callback of a sharded program calls another sharded function on the same devices while the outer
    run's other devices wait for its results: the inner run's sums meet only its own devices' calls."""
    from tessera.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(ts.devices()[:4], ("d",))
    x = ts.device_put(np.arange(8, dtype=np.float32), NamedSharding(mesh, P("d")))
    inner = ts.jit(lambda v: v.sum() * 3)

    def level(total):
        return np.float32(float(np.asarray(inner(x))) + float(total))

    @ts.jit
    def f(v):
        return v * ts.io_callback(level, ts.ShapeDtypeStruct((), tnp.float32), v.sum()) + v.sum()

    results, errors = [], []

    def run():
        try:
            results.extend(np.asarray(f(x)) for _ in range(3))
        except Exception as e:
            errors.append(str(e))

    # On a thread of its own, so that runs waiting for calls that never come fail the test instead of hanging it.
    runs = threading.Thread(target=run, daemon=True)
    runs.start()
    runs.join(timeout=120)
    assert not runs.is_alive(), "the runs did not finish within the time limit"
    assert errors == [] and len(results) == 3
    for y in results:
        np.testing.assert_array_equal(y, np.arange(8) * (3 * 28 + 28) + 28)
