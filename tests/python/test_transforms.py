"""grad, value_and_grad, vjp, jit and trace through the Python API. Gradients are checked against central
finite differences of the same function written in float64 numpy (an independent reference)."""
import math

import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from finite_differences import finite_difference


def close(actual, expected, rtol=1e-3, atol=1e-4):
    actual = np.asarray(actual)
    assert actual.shape == np.shape(expected)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def test_grad_of_elementwise_and_reductions(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    f = lambda x: tnp.sum(tnp.tanh(x) * tnp.exp(x * 0.5) + tnp.sin(x) ** 2)
    ref = lambda x: np.sum(np.tanh(x) * np.exp(x * 0.5) + np.sin(x) ** 2)
    close(tessera.grad(f)(tnp.asarray(x)), finite_difference(ref, x))


def test_grad_of_matmul_mlp_with_argnums(rng):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4,)).astype(np.float32)

    def f(w, x, b):
        h = tnp.maximum(x @ w + b, 0.1 * (x @ w + b))
        return tnp.mean(h * h)

    def ref_w(w_):
        h = x.astype(np.float64) @ w_ + b
        return np.mean(np.maximum(h, 0.1 * h) ** 2)

    def ref_b(b_):
        h = x.astype(np.float64) @ w + b_
        return np.mean(np.maximum(h, 0.1 * h) ** 2)

    gw, gb = tessera.grad(f, argnums=(0, 2))(tnp.asarray(w), tnp.asarray(x), tnp.asarray(b))
    close(gw, finite_difference(ref_w, w))
    close(gb, finite_difference(ref_b, b))


def test_value_and_grad_of_a_pytree_with_aux(rng):
    params = {"w": rng.standard_normal((3, 2)).astype(np.float32), "b": np.zeros(2, np.float32)}
    x = rng.standard_normal((4, 3)).astype(np.float32)
    y = rng.standard_normal((4, 2)).astype(np.float32)

    def loss(p, x, y):
        pred = x @ p["w"] + p["b"]
        return tnp.mean((pred - y) ** 2), {"pred": pred, "n": tnp.asarray(4)}

    (value, aux), g = tessera.value_and_grad(loss, has_aux=True)(
        {k: tnp.asarray(v) for k, v in params.items()}, tnp.asarray(x), tnp.asarray(y))
    pred = x @ params["w"] + params["b"]
    close(value, np.mean((pred - y) ** 2), rtol=1e-5)
    close(aux["pred"], pred, rtol=1e-5)
    assert int(aux["n"]) == 4
    assert set(g) == {"w", "b"}
    ref_w = lambda w: np.mean((x @ w + params["b"] - y) ** 2)
    ref_b = lambda b: np.mean((x @ params["w"] + b - y) ** 2)
    close(g["w"], finite_difference(ref_w, params["w"]))
    close(g["b"], finite_difference(ref_b, params["b"]))


def test_grad_with_has_aux_returns_the_aux():
    g, aux = tessera.grad(lambda x: (tnp.sum(x * x), {"double": x * 2}), has_aux=True)(tnp.asarray([1.0, 2.0]))
    close(g, [2.0, 4.0])
    close(aux["double"], [2.0, 4.0])


def test_grad_of_grad_is_the_second_derivative():
    f = lambda x: tnp.sin(x) * x
    d2 = tessera.grad(tessera.grad(f))
    for v in [0.3, 1.2, -2.0]:
        close(d2(tnp.asarray(v)), 2 * np.cos(v) - v * np.sin(v), rtol=1e-4)


def test_grad_requires_a_scalar_loss():
    with pytest.raises(tessera.TesseraError, match="scalar"):
        tessera.grad(lambda x: x * 2)(tnp.ones((3,)))


def test_vjp_against_the_transposed_jacobian(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    x = rng.standard_normal((4,)).astype(np.float32)
    ct = rng.standard_normal((3,)).astype(np.float32)
    out, pullback = tessera.vjp(lambda a, x: a @ x, tnp.asarray(a), tnp.asarray(x))
    close(out, a @ x, rtol=1e-5)
    ga, gx = pullback(tnp.asarray(ct))
    close(ga, np.outer(ct, x), rtol=1e-5)
    close(gx, a.T @ ct, rtol=1e-5)


def test_jit_equals_eager_and_hits_the_cache(rng):
    def f(params, x):
        h = tnp.tanh(x @ params["w"] + params["b"])
        return {"out": h, "norm": tnp.sum(h * h)}, h.shape[0]

    params = {"w": tnp.asarray(rng.standard_normal((3, 5)).astype(np.float32)), "b": tnp.zeros((5,))}
    x = tnp.asarray(rng.standard_normal((4, 3)).astype(np.float32))
    jf = tessera.jit(f)
    eager = f(params, x)
    jitted = jf(params, x)
    close(jitted[0]["out"], np.asarray(eager[0]["out"]), rtol=1e-5, atol=1e-6)
    close(jitted[0]["norm"], np.asarray(eager[0]["norm"]), rtol=1e-5)
    assert int(jitted[1]) == 4
    assert jf.cache_info()["misses"] == 1 and jf.cache_info()["hits"] == 0
    jf(params, x * 2)
    info = jf.cache_info()
    assert info["hits"] == 1 and info["misses"] == 1 and info["size"] == 1
    jf(params, tnp.ones((7, 3)))  # a new shape compiles again, and says why
    info = jf.cache_info()
    assert info["misses"] == 2 and "[4,3]" in info["last_miss_reason"] and "[7,3]" in info["last_miss_reason"]


def test_jit_static_argnums_and_argnames():
    calls = []

    def power(x, n, scale=1.0):
        calls.append(n)
        y = x
        for _ in range(n - 1):
            y = y * x
        return y * scale

    jp = tessera.jit(power, static_argnums=1)
    x = tnp.asarray([1.0, 2.0, 3.0])
    close(jp(x, 3), [1.0, 8.0, 27.0])
    close(jp(x + 1, 3), [8.0, 27.0, 64.0])
    close(jp(x, 2), [1.0, 4.0, 9.0])
    assert calls == [3, 2]  # traced once per static value
    jn = tessera.jit(power, static_argnames="n")
    close(jn(x, n=2, scale=tnp.asarray(0.5)), [0.5, 2.0, 4.5])
    with pytest.raises(TypeError, match="hashable"):
        tessera.jit(power, static_argnums=1)(x, [2])


def _address(x):
    """Where x's bytes are (the numpy view is dropped at once, so it does not keep the buffer shared)."""
    return np.asarray(x).__array_interface__["data"][0]


def test_jit_donate_argnums_updates_in_place_and_deletes(rng):
    p = {"w": tnp.asarray(rng.standard_normal((1000,)).astype(np.float32)),
         "b": tnp.asarray(rng.standard_normal((7,)).astype(np.float32))}
    g = {"w": tnp.asarray(rng.standard_normal((1000,)).astype(np.float32)),
         "b": tnp.asarray(rng.standard_normal((7,)).astype(np.float32))}
    want = {k: np.asarray(p[k]) - 0.1 * np.asarray(g[k]) for k in p}
    before = _address(p["w"])
    step = tessera.jit(lambda p, g: tessera.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g), donate_argnums=0)
    out = step(p, g)
    for k in want:
        np.testing.assert_allclose(np.asarray(out[k]), want[k], rtol=1e-6)
    assert p["w"].is_deleted() and p["b"].is_deleted()
    assert not g["w"].is_deleted()
    assert _address(out["w"]) == before  # the output took the donated buffer
    with pytest.raises(tessera.DeletedArrayError, match="donated to a jitted function and deleted"):
        np.asarray(p["w"])
    # Any use of a deleted array raises (an op, a reduction, indexing, grad, jit as an argument or closed over);
    # it never reads the buffer the output took.
    deleted = p["b"]
    for use in (lambda: deleted + 1.0, lambda: tnp.sum(deleted), lambda: deleted[0],
                lambda: tessera.grad(lambda x: tnp.sum(x * x))(deleted), lambda: tessera.jit(lambda x: x + 1.0)(deleted),
                lambda: tessera.jit(lambda x: x + deleted)(tnp.ones(7))):
        with pytest.raises(RuntimeError, match=r"\(f32\[7\]\) was donated to a jitted function and deleted"):
            use()
    assert "deleted" in repr(deleted)
    # The next step donates the previous step's outputs: the same buffer again.
    again = step(out, g)
    assert out["w"].is_deleted() and _address(again["w"]) == before


def test_jit_donation_is_asked_for_and_safe():
    x = tnp.ones((64,))
    y = tessera.jit(lambda x: x * 2.0)(x)  # not donated: x stays
    assert not x.is_deleted() and not y.is_deleted()
    np.testing.assert_allclose(np.asarray(x), np.ones(64))
    # A numpy view shares the buffer (zero-copy): it is not taken, and both stay readable and unchanged.
    view = np.asarray(x)
    z = tessera.jit(lambda x: x + 1.0, donate_argnums=(0,))(x)
    np.testing.assert_allclose(np.asarray(z), 2 * np.ones(64))
    assert not x.is_deleted()
    np.testing.assert_allclose(view, np.ones(64))
    # donate_argnames, with a static argument beside it.
    f = tessera.jit(lambda x, *, scale, k: x * scale + k, static_argnames="k", donate_argnames="scale")
    s = tnp.full((64,), 3.0)
    np.testing.assert_allclose(np.asarray(f(tnp.ones((64,)), scale=s, k=1)), 4 * np.ones(64))
    assert s.is_deleted()
    with pytest.raises(ValueError, match="both static and donated"):
        tessera.jit(lambda x: x, static_argnums=0, donate_argnums=0)


def test_jit_of_grad_equals_grad(rng):
    x = tnp.asarray(rng.standard_normal((6,)).astype(np.float32))
    f = lambda x: tnp.sum(tnp.exp(x) * tnp.cos(x))
    close(tessera.jit(tessera.grad(f))(x), np.asarray(tessera.grad(f)(x)), rtol=1e-5, atol=1e-6)


def test_grad_inside_jit_of_a_training_step(rng):
    w = tnp.asarray(rng.standard_normal((3,)).astype(np.float32))
    x = tnp.asarray(rng.standard_normal((8, 3)).astype(np.float32))
    y = x @ tnp.asarray([1.0, -2.0, 0.5])
    loss = lambda w: tnp.mean((x @ w - y) ** 2)

    @tessera.jit
    def step(w):
        return w - 0.1 * tessera.grad(loss)(w)

    first = float(loss(w))
    for _ in range(50):
        w = step(w)
    assert float(loss(w)) < first * 1e-2
    assert step.cache_info()["misses"] == 1


def test_trace_prints_the_ir():
    def f(x, w):
        return tnp.sum(tnp.exp(x @ w))

    text = tessera.trace(f)(tnp.ones((2, 3)), tessera.ShapeDtypeStruct((3, 4), tnp.float32))
    assert text.startswith("func @f(%0: f32[2,3], %1: f32[3,4]) -> (f32[])")
    assert "= dot_general(%0, %1)" in text and "= exp(" in text
    assert "test_transforms.py" in text  # each op points at the user's line
    assert text.rstrip().splitlines()[-1].startswith("// 1 dot_general, ")


def test_traced_ops_are_grouped_by_the_functions_that_made_them():
    def attention(x):
        return tnp.tanh(x)

    def block(x):
        return attention(x).transpose((1, 0)) * 2.0

    text = tessera.trace(block)(tnp.ones((2, 3)))
    line = attention.__code__.co_firstlineno + 1
    # The user's functions, outermost first, are the op's module path; pytest's frames are not.
    assert f'tanh(%0) : f32[2,3] loc("block.attention", "{__file__}":{line})' in text
    assert 'transpose(%1) {perm=[1, 0]} : f32[3,2] loc("block", ' in text


def test_trace_of_grad_contains_the_backward_ops():
    text = tessera.trace(tessera.grad(lambda x: tnp.sum(tnp.sin(x))))(tnp.ones((4,)))
    assert "cos" in text


def test_vmap_against_a_python_loop(rng):
    w = rng.standard_normal((3, 4)).astype(np.float32)
    xs = rng.standard_normal((5, 3)).astype(np.float32)
    f = lambda x, w: tnp.tanh(x @ w)
    loop = np.stack([np.asarray(f(tnp.asarray(x), tnp.asarray(w))) for x in xs])
    close(tessera.vmap(f, in_axes=(0, None))(tnp.asarray(xs), tnp.asarray(w)), loop, rtol=1e-5)
    # Batched along the last axis, out_axes moved to 1, nested, and under jit.
    close(tessera.vmap(f, in_axes=(-1, None))(tnp.asarray(xs.T), tnp.asarray(w)), loop, rtol=1e-5)
    close(tessera.vmap(f, in_axes=(0, None), out_axes=1)(tnp.asarray(xs), tnp.asarray(w)), loop.T, rtol=1e-5)
    outer = tessera.vmap(tessera.vmap(lambda a, b: a * b, in_axes=(0, None)), in_axes=(None, 0))
    a, b = rng.standard_normal(4).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    close(outer(tnp.asarray(a), tnp.asarray(b)), np.outer(b, a), rtol=1e-6)
    per_example_grads = tessera.jit(tessera.vmap(tessera.grad(lambda x, w: tnp.sum(f(x, w))), in_axes=(0, None)))
    expected = np.stack([np.asarray(tessera.grad(lambda x: tnp.sum(f(x, tnp.asarray(w))))(tnp.asarray(x))) for x in xs])
    close(per_example_grads(tnp.asarray(xs), tnp.asarray(w)), expected, rtol=1e-5)
    # Pytrees as arguments and results.
    out = tessera.vmap(lambda d: {"s": d["a"] + d["b"]})({"a": tnp.asarray(xs), "b": tnp.asarray(xs)})
    close(out["s"], 2 * xs)


def test_jit_called_from_threads(rng):
    import threading

    f = tessera.jit(lambda x, n: tnp.sum(tnp.tanh(x) * n), static_argnums=1)
    inputs = [rng.standard_normal((16, 8)).astype(np.float32) for _ in range(8)]
    results, errors = {}, []

    def work(i):
        try:
            for _ in range(20):
                results[i] = float(f(tnp.asarray(inputs[i]), i % 3 + 1))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, x in enumerate(inputs):
        np.testing.assert_allclose(results[i], np.sum(np.tanh(x)) * (i % 3 + 1), rtol=1e-4)
    assert f.cache_info()["size"] == 3


def test_a_jitted_function_is_freed_with_its_last_reference():
    import gc
    import weakref

    f = tessera.jit(lambda x: x * 2)
    f(tnp.ones((3,)))
    ref = weakref.ref(f)
    del f
    gc.collect()
    assert ref() is None


def test_each_thread_gets_its_own_exception_from_jit():
    import threading

    def f(x, tag):
        if tag % 2:
            raise ValueError(f"odd {tag}")
        return x * tag

    jf = tessera.jit(f, static_argnums=1)
    seen = {}

    def work(tag):
        for _ in range(10):
            try:
                seen[tag] = float(jf(tnp.ones(()), tag))
            except ValueError as e:
                seen[tag] = str(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {0: 0.0, 1: "odd 1", 2: 2.0, 3: "odd 3", 4: 4.0, 5: "odd 5"}


def test_jit_output_structure_that_depends_on_shapes():
    # One signature (one array argument), two traces whose outputs differ in structure: each call gets the tree its
    # own shapes traced, also when the compiled program is taken from the cache.
    f = tessera.jit(lambda x: {"loss": x.sum(), "out": x} if x.ndim == 2 else (x.sum(), x))
    for x in (tnp.ones(3), tnp.ones((2, 2)), tnp.ones(3), tnp.ones((2, 2))):
        out = f(x)
        assert isinstance(out, dict if x.ndim == 2 else tuple)
        np.testing.assert_array_equal(np.asarray(out["out"] if x.ndim == 2 else out[1]), np.ones(x.shape))
    g = tessera.jit(lambda x: [x] * x.shape[0])
    assert [len(g(tnp.ones(n))) for n in (1, 3, 1, 3)] == [1, 3, 1, 3]
    assert f.cache_info()["misses"] == 2


def test_jit_static_arguments_by_position_or_name_and_vmap_axis_errors():
    # As jax.jit: static_argnums also covers the argument passed by keyword, static_argnames by position.
    f = tessera.jit(lambda x, n: sum(x for _ in range(n)), static_argnums=1)
    np.testing.assert_array_equal(np.asarray(f(tnp.ones(2), n=3)), [3.0, 3.0])
    g = tessera.jit(lambda x, n: x * len(n), static_argnames="n")
    np.testing.assert_array_equal(np.asarray(g(tnp.ones(2), (1, 2))), [2.0, 2.0])
    # vmap over an axis the argument does not have is an error (JAX's), not a silently wrapped axis.
    with pytest.raises(ValueError, match="in_axes 2 is out of range for an argument of shape \\(2, 3\\)"):
        tessera.vmap(lambda a: a, in_axes=2)(tnp.ones((2, 3)))
    with pytest.raises(ValueError, match="out of range for an argument of shape \\(\\)"):
        tessera.vmap(lambda a: a)(tnp.array(1.0))


def test_grad_with_respect_to_an_integer_array_is_a_type_error():
    # JAX: "grad requires real- or complex-valued inputs"; integer zeros would hide the mistake.
    with pytest.raises(TypeError, match=r"grad requires floating point inputs.*i32\[2\]"):
        tessera.grad(lambda a: tnp.sum(a * 2.0))(tnp.array([1, 2]))
    with pytest.raises(TypeError, match=r"i32\[\]"):
        tessera.grad(lambda p: p["w"] * 1.0 + p["n"], argnums=0)({"w": tnp.array(1.0), "n": tnp.array(3)})
    # Closed over (not differentiated), the integer array is fine.
    n = tnp.array([1, 2])
    np.testing.assert_allclose(np.asarray(tessera.grad(lambda w: tnp.sum(w * n))(tnp.ones(2))), [1.0, 2.0])


def test_disable_jit_runs_the_python_and_the_small_helpers():
    import tessera
    calls = []

    @tessera.jit
    def f(x):
        calls.append(type(x).__name__)
        return x * 2

    x = tnp.ones(3)
    f(x)
    f(x)
    assert len(calls) == 1  # traced once, then cached
    with tessera.disable_jit():
        np.testing.assert_array_equal(np.asarray(f(x)), [2.0, 2.0, 2.0])
        f(x)
    assert len(calls) == 3  # run eagerly twice
    f(x)
    assert len(calls) == 3  # jitted again afterwards, from the cache
    tree = {"a": tnp.ones(2), "b": [tnp.zeros(1), 3]}
    assert tessera.block_until_ready(tree) is not None
    got = tessera.device_get(tree)
    assert isinstance(got["a"], np.ndarray) and got["b"][1] == 3
    assert tessera.jacobian is tessera.jacrev and tessera.local_device_count() == tessera.device_count()


def test_custom_jvp_rule_drives_grad_jvp_jit_vmap_and_second_derivatives():
    import tessera

    @tessera.custom_jvp
    def log1pexp(x):
        return tnp.log1p(tnp.exp(x))

    @log1pexp.defjvp
    def _(primals, tangents):
        x, = primals
        t, = tangents
        return log1pexp(x), t * (1 - 1 / (1 + tnp.exp(x)))  # the rule calls the function, as JAX's examples do

    x = np.array([-1.0, 0.0, 3.0, 100.0], np.float32)
    want = 1 / (1 + np.exp(-x.astype(np.float64)))  # stable where the naive derivative gives NaN at 100
    np.testing.assert_allclose(np.asarray(tessera.grad(lambda v: tnp.sum(log1pexp(v)))(x)), want, rtol=1e-6)
    out, tangent = tessera.jvp(log1pexp, (tnp.asarray(x),), (tnp.ones(4),))
    np.testing.assert_allclose(np.asarray(tangent), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(tessera.jit(tessera.grad(lambda v: tnp.sum(log1pexp(v))))(x)), want,
                               rtol=1e-6)
    np.testing.assert_allclose(np.asarray(tessera.vmap(tessera.grad(log1pexp))(x)), want, rtol=1e-6)
    second = tessera.grad(tessera.grad(log1pexp))(tnp.asarray(np.float32(0.5)))
    np.testing.assert_allclose(float(second), math.exp(0.5) / (1 + math.exp(0.5)) ** 2, rtol=1e-5)

    # defjvps: one tangent function per argument; nondiff_argnums passed through
    @tessera.custom_jvp
    def scaled_product(a, b):
        return a * b * 3.0

    scaled_product.defjvps(lambda ta, ans, a, b: ta * b * 3.0, lambda tb, ans, a, b: tb * a * 3.0)
    ga, gb = tessera.grad(lambda a, b: tnp.sum(scaled_product(a, b)), argnums=(0, 1))(x[:3], x[1:])
    np.testing.assert_allclose(np.asarray(ga), 3 * x[1:], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(gb), 3 * x[:3], rtol=1e-6)

    @tessera.custom_jvp
    def power(n, x):
        return x ** n

    power.nondiff_argnums = (0,)

    @power.defjvp
    def _(n, primals, tangents):
        x, = primals
        t, = tangents
        return x ** n, n * x ** (n - 1) * t

    np.testing.assert_allclose(float(tessera.grad(lambda v: power(3, v), argnums=0)(tnp.asarray(np.float32(2.0)))),
                               12.0, rtol=1e-6)
    with pytest.raises(TypeError, match="defjvp"):
        tessera.custom_jvp(lambda v: v)(1.0)
