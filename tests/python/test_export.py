"""tessera.export (jax.export): a function exported for its arguments' shapes, serialized, read back (in this
process and in another one) and called, differentiated, vmapped and jitted, against numpy; its errors."""

import collections
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tessera
from tessera import export
from tessera import numpy as tnp


def data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def mlp(params, x):
    h = tnp.tanh(x @ params["w1"] + params["b"])
    return {"out": h @ params["w2"], "stats": (tnp.sum(h), None)}


def mlp_numpy(params, x):
    h = np.tanh(x @ params["w1"] + params["b"])
    return h @ params["w2"], h.sum()


PARAMS = {"w1": data(4, 8), "b": data(8, seed=1), "w2": data(8, 2, seed=2)}
X = data(5, 4, seed=3)


def exported():
    spec = tessera.ShapeDtypeStruct((5, 4), np.float32)
    return export.export(tessera.jit(mlp))(PARAMS, spec)


def test_round_trip_in_this_process():
    exp = exported()
    assert exp.fun_name == "mlp"
    assert [a.shape for a in exp.in_avals] == [(8,), (4, 8), (8, 2), (5, 4)]  # dict keys sorted, as pytrees are
    assert all(a.dtype == np.float32 for a in exp.in_avals)
    assert [a.shape for a in exp.out_avals] == [(5, 2), ()]
    back = export.deserialize(exp.serialize())
    assert back.in_tree == exp.in_tree and back.out_tree == exp.out_tree
    got = back.call(PARAMS, X)
    out, total = mlp_numpy(PARAMS, X)
    np.testing.assert_allclose(np.asarray(got["out"]), out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(got["stats"][0]), total, rtol=1e-5)
    assert got["stats"][1] is None


def test_another_process_calls_it_without_the_function(tmp_path):
    path = tmp_path / "mlp.tessera"
    path.write_bytes(exported().serialize())
    np.savez(tmp_path / "args.npz", x=X, **PARAMS)
    script = (
        "import sys, json, numpy as np, tessera\n"
        "exp = tessera.export.deserialize(open(sys.argv[1], 'rb').read())\n"
        "a = np.load(sys.argv[2])\n"
        "out = exp.call({'w1': a['w1'], 'b': a['b'], 'w2': a['w2']}, a['x'])\n"
        "print(json.dumps(np.asarray(out['out']).tolist()))\n")
    r = subprocess.run([sys.executable, "-c", script, str(path), str(tmp_path / "args.npz")], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(np.array(json.loads(r.stdout.strip().splitlines()[-1])), mlp_numpy(PARAMS, X)[0],
                               rtol=1e-5, atol=1e-6)


def test_grad_vmap_and_jit_of_the_deserialized_function():
    back = export.deserialize(exported().serialize())
    params = {k: tnp.asarray(v) for k, v in PARAMS.items()}
    # d/dw2 sum(out) = h^T 1 (the column sums of h, repeated over w2's columns).
    g = tessera.grad(lambda p: tnp.sum(back.call(p, tnp.asarray(X))["out"]))(params)
    h = np.tanh(X @ PARAMS["w1"] + PARAMS["b"])
    np.testing.assert_allclose(np.asarray(g["w2"]), np.repeat(h.sum(0)[:, None], 2, axis=1), rtol=1e-5, atol=1e-5)
    # d/db sum(out) = sum over rows of (1 - h^2) * (w2 summed over its columns).
    np.testing.assert_allclose(np.asarray(g["b"]), ((1 - h ** 2) * PARAMS["w2"].sum(1)).sum(0), rtol=1e-4,
                               atol=1e-5)
    xs = np.stack([X, 2 * X, -X])
    batched = tessera.vmap(lambda x: back.call(params, x)["out"])(tnp.asarray(xs))
    np.testing.assert_allclose(np.asarray(batched), np.stack([mlp_numpy(PARAMS, x)[0] for x in xs]), rtol=1e-5,
                               atol=1e-5)
    jitted = tessera.jit(lambda p, x: back.call(p, x)["out"] * 2)
    np.testing.assert_allclose(np.asarray(jitted(params, tnp.asarray(X))), 2 * mlp_numpy(PARAMS, X)[0], rtol=1e-5,
                               atol=1e-5)


def test_static_arguments_are_fixed_at_export():
    scale = tessera.jit(lambda x, n, *, offset: x * n + offset, static_argnums=1, static_argnames="offset")
    exp = export.export(scale)(tessera.ShapeDtypeStruct((3,), "float32"), 3.0, offset=1.0)
    assert exp.in_tree == tessera.tree_util.tree_flatten(((0,), {}))[1]
    back = export.deserialize(exp.serialize())
    np.testing.assert_array_equal(np.asarray(back.call(np.arange(3, dtype=np.float32))), [1.0, 4.0, 7.0])


def test_the_program_text_is_tesseras_ir(tmp_path):
    text = exported().mlir_module()
    assert text.startswith("func @mlp(") and "dot_general" in text
    cli = os.environ.get("TESSERA_CLI")
    if not cli:
        pytest.skip("TESSERA_CLI is not set")
    path = tmp_path / "mlp.tir"
    path.write_text(text)
    r = subprocess.run([cli, "compile", "--ir", str(path), "--quiet"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "kernels" in r.stdout


def test_errors():
    exp = exported()
    with pytest.raises(ValueError, match=r"argument leaf 3 is f32\[6,4\], but it was exported for f32\[5,4\]"):
        exp.call(PARAMS, data(6, 4))
    with pytest.raises(ValueError, match="structure"):
        exp.call(PARAMS)
    with pytest.raises(ValueError, match="calls back into Python"):
        export.export(lambda x: tessera.pure_callback(lambda a: a, x, x))(np.ones(3, np.float32))
    Pair = collections.namedtuple("Pair", "a b")
    with pytest.raises(TypeError, match="Pair cannot be serialized"):
        export.export(lambda p: p.a + p.b)(Pair(np.ones(2, np.float32), np.ones(2, np.float32))).serialize()
    with pytest.raises(ValueError, match="not a serialized Tessera program"):
        export.deserialize(b"\x00garbage")
    doc = json.loads(bytes(exp.serialize()))
    doc["version"] = 99
    with pytest.raises(ValueError, match="version 99"):
        export.deserialize(json.dumps(doc).encode())
    doc["version"] = 1
    doc["program"] = doc["program"].replace("dot_general", "dot_generale", 1)
    with pytest.raises(ValueError, match="does not parse"):
        export.deserialize(json.dumps(doc).encode())


def test_called_with_sharded_arrays_it_runs_on_their_mesh():
    from tessera.sharding import NamedSharding, P, make_mesh
    mesh = make_mesh((4,), ("i",))
    x = tessera.device_put(tnp.asarray(data(8, 4, seed=4)), NamedSharding(mesh, P("i")))
    spec = tessera.ShapeDtypeStruct((8, 4), np.float32)
    back = export.deserialize(export.export(tessera.jit(mlp))(PARAMS, spec).serialize())
    out = back.call(PARAMS, x)
    assert out["out"].sharding.spec == [["i"], []]
    np.testing.assert_allclose(np.asarray(out["out"]), mlp_numpy(PARAMS, data(8, 4, seed=4))[0], rtol=1e-5,
                               atol=1e-6)


def test_loops_branches_checkpoints_and_custom_gradients_travel():
    # scan, cond, checkpoint and a custom_vjp (a gradient clip) inside: the deserialized program's value and
    # gradient equal the function's, and the gradient is the custom one (clipped), not the plain derivative.
    from tessera import lax

    @tessera.custom_vjp
    def clip_grad(x):
        return x

    clip_grad.defvjp(lambda x: (x, None), lambda res, g: (tnp.clip(g, -0.1, 0.1),))

    def f(w, xs):
        def step(c, x):
            c = tnp.tanh(c @ w + x)
            return c, tnp.sum(c)
        c, ys = lax.scan(step, tnp.zeros(3), xs)
        c = tessera.checkpoint(lambda c: tnp.sin(c) * 2)(c)
        c = lax.cond(tnp.sum(c) > 0, lambda c: c * 2, lambda c: c - 1, c)
        return tnp.sum(clip_grad(c)) + tnp.sum(ys)

    w, xs = np.eye(3, dtype=np.float32) * 0.5, np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    back = export.deserialize(export.export(tessera.jit(f))(w, xs).serialize())
    text = back.mlir_module()
    assert all(op in text for op in ("scan", "cond", "custom_vjp"))
    np.testing.assert_allclose(float(back.call(w, xs)), float(f(tnp.asarray(w), tnp.asarray(xs))), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(tessera.grad(back.call)(tnp.asarray(w), tnp.asarray(xs))),
                               np.asarray(tessera.grad(f)(tnp.asarray(w), tnp.asarray(xs))), rtol=1e-6, atol=1e-7)
    # The custom rule itself travels: d/dx sum(5 clip_grad(x)) is the clipped 0.1, not the plain derivative 5.
    scaled = export.deserialize(export.export(lambda x: tnp.sum(clip_grad(x) * 5.0))(np.ones(3, np.float32))
                                .serialize())
    np.testing.assert_allclose(np.asarray(tessera.grad(scaled.call)(tnp.ones(3))), [0.1, 0.1, 0.1], rtol=1e-6)
