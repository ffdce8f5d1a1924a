"""tessera.sharding on 8 virtual CPU devices (conftest.py asks for them): device_put, SPMD jit, sharding
constraints, the device grid, and errors. Values are checked against numpy on the whole arrays."""
import threading

import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from tessera.sharding import Mesh, NamedSharding, P, make_mesh, visualize_array_sharding, with_sharding_constraint


@pytest.fixture
def mesh():
    return Mesh(np.array(tessera.devices()).reshape(4, 2), ("data", "model"))


def test_devices_and_meshes(mesh):
    assert tessera.device_count() == 8 and len(tessera.devices()) == 8
    assert repr(mesh) == "Mesh('data': 4, 'model': 2)"
    assert make_mesh((2, 4), ("a", "b")).shape == [2, 4]
    assert Mesh((8,), ("x",)).device_ids == list(range(8))
    with pytest.raises(tessera.TesseraError):
        tessera.sharding.set_cpu_devices(4)  # the devices exist already


def test_device_put_splits_and_gathers(rng, mesh):
    a = rng.standard_normal((8, 6)).astype(np.float32)
    s = NamedSharding(mesh, P("data", "model"))
    x = tessera.device_put(tnp.asarray(a), s)
    assert repr(x.sharding) == "NamedSharding(Mesh('data': 4, 'model': 2), P('data', 'model'))"
    assert s.shard_shape([8, 6]) == [2, 3]
    np.testing.assert_array_equal(np.asarray(x), a)
    assert tnp.asarray(a).sharding is None
    np.testing.assert_allclose(np.asarray(tnp.exp(x) + 1.0), np.exp(a) + 1.0, rtol=1e-6)  # eager ops on shards


def test_jit_runs_spmd_on_sharded_arguments(rng, mesh):
    a = rng.standard_normal((8, 6)).astype(np.float32)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    x = tessera.device_put(tnp.asarray(a), NamedSharding(mesh, P("data")))
    wm = tessera.device_put(tnp.asarray(w), NamedSharding(mesh, P(None, "model")))
    f = tessera.jit(lambda x, w: tnp.tanh(x @ w))
    y = f(x, wm)
    np.testing.assert_allclose(np.asarray(y), np.tanh(a @ w), rtol=1e-5, atol=1e-6)
    assert repr(y.sharding.spec) == "[['data'], ['model']]"
    g = tessera.jit(lambda x: with_sharding_constraint(x * 2, NamedSharding(mesh, P(None, "model"))))
    z = g(x)
    np.testing.assert_allclose(np.asarray(z), 2 * a)
    assert z.sharding.spec == [[], ["model"]]
    # A gradient step over sharded parameters.
    loss = lambda w, x: tnp.mean(tnp.tanh(x @ w) ** 2)
    gw = tessera.jit(tessera.grad(loss))(wm, x)
    eps, num = 1e-3, np.zeros_like(w, dtype=np.float64)
    ref = lambda w: np.mean(np.tanh(a.astype(np.float64) @ w) ** 2)
    for i in np.ndindex(w.shape):
        up, down = w.astype(np.float64), w.astype(np.float64)
        up[i] += eps
        down[i] -= eps
        num[i] = (ref(up) - ref(down)) / (2 * eps)
    np.testing.assert_allclose(np.asarray(gw), num, rtol=1e-3, atol=1e-5)


def test_visualize_array_sharding(mesh):
    x = tessera.device_put(tnp.zeros((8, 8)), NamedSharding(mesh, P("data", "model")))
    text = visualize_array_sharding(x, print_it=False)
    lines = text.strip().splitlines()
    assert [f"CPU {i}" in text for i in range(8)] == [True] * 8
    assert len(lines) == 9  # 4 rows of blocks: a border line above, between and below each
    assert "CPU 0" in lines[1] and "CPU 1" in lines[1] and "CPU 6" in lines[7] and "CPU 7" in lines[7]
    replicated = visualize_array_sharding(tessera.device_put(tnp.zeros((8, 8)), NamedSharding(mesh, P("data"))),
                                          print_it=False)
    assert "CPU 0,1" in replicated  # each row block held by the two devices of its 'model' column


def test_sharding_errors(mesh):
    with pytest.raises(tessera.ShapeError, match="nope"):
        NamedSharding(mesh, P("nope"))
    with pytest.raises(tessera.ShapeError, match=r"\[3,8\]"):
        tessera.device_put(tnp.ones((3, 8)), NamedSharding(mesh, P("data")))


def test_uneven_shardings_are_errors_naming_the_dim_and_the_axis(rng, mesh):
    """As jax.device_put: a sharding that does not divide a dim is a ValueError naming the dim, the shape and the
    mesh axis with its size, never a silent replication; from device_put, with_sharding_constraint (eagerly and
    under jit) and NamedSharding.shard_shape. The same shardings on dims they divide split as asked."""
    rows = NamedSharding(mesh, P("data"))
    uneven = (r"P\('data'\) splits dim 0 of \[15,8\] into 4 shards, which does not divide 15 "
              r"\(mesh axis 'data' has size 4\); the dim must be a multiple of 4")
    with pytest.raises(ValueError, match=uneven):
        tessera.device_put(np.zeros((15, 8), np.float32), rows)
    with pytest.raises(ValueError, match=uneven):
        with_sharding_constraint(np.zeros((15, 8), np.float32), rows)  # eagerly: a device_put
    with pytest.raises(ValueError, match=uneven):
        rows.shard_shape([15, 8])
    cols = NamedSharding(mesh, P(None, "model"))
    constrained = tessera.jit(lambda x: with_sharding_constraint(x * 2, cols))
    with pytest.raises(ValueError, match=r"sharding_constraint.*splits dim 1 of \[8,7\] into 2 shards, which does "
                                         r"not divide 7 \(mesh axis 'model' has size 2\)"):
        constrained(tnp.ones((8, 7)))
    both = NamedSharding(mesh, P(("data", "model")))
    with pytest.raises(ValueError, match=r"into 8 shards, which does not divide 12 \(mesh axes 'data', 'model' "
                                         r"have sizes 4, 2\)"):
        tessera.device_put(np.zeros((12,), np.float32), both)

    a = rng.standard_normal((16, 8)).astype(np.float32)
    x = tessera.device_put(a, rows)
    assert x.sharding.spec == [["data"], []] and rows.shard_shape([16, 8]) == [4, 8]
    np.testing.assert_array_equal(np.asarray(x), a)
    assert with_sharding_constraint(a, rows).sharding.spec == [["data"], []]
    y = constrained(tnp.asarray(a))
    assert y.sharding.spec == [[], ["model"]]
    np.testing.assert_array_equal(np.asarray(y), 2 * a)
    assert tessera.device_put(np.zeros((16,), np.float32), both).sharding.spec == [["data", "model"]]


def test_sharded_calls_from_two_threads_keep_their_collectives(mesh):
    """Two host threads call sharded jitted functions at once: each call's all-reduce over 'data' meets only the
    devices of its own run, so every sum is exact (integers in float32: any order gives the same bits)."""
    rng = np.random.default_rng(5)
    data = [rng.integers(-50, 50, size=(8, 16)).astype(np.float32) for _ in range(2)]
    xs = [tessera.device_put(tnp.asarray(d), NamedSharding(mesh, P("data"))) for d in data]
    start = threading.Barrier(2)
    failures = []

    def work(i):
        try:
            f = tessera.jit(lambda x: tnp.sum(x * float(i + 1), axis=0) + float(1000 * i))
            want = (data[i] * (i + 1)).sum(axis=0) + 1000 * i
            start.wait()
            for it in range(150):
                got = np.asarray(f(xs[i]))
                if not np.array_equal(got, want):
                    failures.append(f"thread {i} call {it}: {got[:4]} instead of {want[:4]}")
                    return
        except Exception as e:  # an error in one run is a failure of the test, not of the thread
            failures.append(f"thread {i}: {e}")

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "the calls did not finish within the time limit"
    assert failures == []
