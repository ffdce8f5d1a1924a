"""shard_map: a data-parallel training step written per device, against JAX's shard_map in the same run; prints one
JSON document.

The step: an MLP (784-1024-1024-10 by default, ReLU, MSE) with plain SGD; parameters replicated, the batch split
over the mesh's one axis 'data' of D virtual CPU devices. Each device takes the gradient of its part of the batch
and averages it with lax.pmean, as the shard_map tutorial's data parallelism does. Timed, each jitted:
  shard_map    jit(shard_map(step, in_specs=(P(), P('data'), P('data')), out_specs=(P(), P())))
  shard_map_in_jit  a jitted step of the split batch whose gradients come from a shard_map (each device's,
               pmean'd) and whose update is outside it (the partitioned program runs the body on each device)
  auto_spmd    the same step written for the whole batch, its batch argument split over 'data' (the partitioner
               places the collectives)
  one_device   the whole-batch step on one device
JAX runs the same four (jax.shard_map or jax.experimental.shard_map, XLA_FLAGS
--xla_force_host_platform_device_count=D) in the interpreter TESSERA_JAX_PYTHON names (JAX lives in a venv, apart
from Debian's numpy); ratios are JAX's time over Tessera's (above 1: Tessera is faster). Before anything is timed,
Tessera's shard_map step is checked against the step computed in float64 with numpy (gradients written out by
hand).

    PYTHONPATH=build/python TESSERA_JAX_PYTHON=/path/to/venv/bin/python python3 tests/bench/bench_shard_map.py \
        [--devices 2] [--batch 2048] [--hidden 1024] [--repeats 10]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from timing import median_seconds

HERE = os.path.dirname(os.path.abspath(__file__))


def init(sizes, seed=0):
    rng = np.random.default_rng(seed)
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        params.append((rng.standard_normal((n_in, n_out)).astype(np.float32) / np.sqrt(n_in),
                       np.zeros(n_out, np.float32)))
    return params


def batch(n, n_in, n_out, seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, n_in)).astype(np.float32), rng.standard_normal((n, n_out)).astype(np.float32)


def numpy_step(params, x, y, lr):
    """One SGD step in float64, backpropagation written out."""
    ps = [(w.astype(np.float64), b.astype(np.float64)) for w, b in params]
    acts, h = [x.astype(np.float64)], x.astype(np.float64)
    for i, (w, b) in enumerate(ps):
        h = h @ w + b
        if i < len(ps) - 1:
            h = np.maximum(h, 0)
        acts.append(h)
    loss = np.mean((h - y) ** 2)
    d = 2 * (h - y) / h.size
    new = [None] * len(ps)
    for i in reversed(range(len(ps))):
        w, b = ps[i]
        gw, gb = acts[i].T @ d, d.sum(0)
        new[i] = (w - lr * gw, b - lr * gb)
        if i:
            d = (d @ w.T) * (acts[i] > 0)
    return new, loss


JAX_SCRIPT = r"""
import json, os, sys, time, statistics
cfg = json.loads(sys.argv[1])
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={cfg['devices']}"
import numpy as np
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
try:
    from jax import shard_map
except ImportError:
    from jax.experimental.shard_map import shard_map
data = np.load(cfg["data"])
params = [(jnp.asarray(data[f"w{i}"]), jnp.asarray(data[f"b{i}"])) for i in range(cfg["layers"])]
x, y, lr = jnp.asarray(data["x"]), jnp.asarray(data["y"]), cfg["lr"]

def loss_fn(params, x, y):
    h = x
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        if i < len(params) - 1:
            h = jax.nn.relu(h)
    return jnp.mean((h - y) ** 2)

def step(params, x, y):
    loss, g = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, g), loss

def local_step(params, x, y):
    loss, g = jax.value_and_grad(loss_fn)(params, x, y)
    g, loss = jax.lax.pmean((g, loss), "data")
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, g), loss

try:  # newer JAX makes Explicit meshes by default; the auto_spmd variant wants the partitioner's choices
    mesh = jax.make_mesh((cfg["devices"],), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
except (AttributeError, TypeError):
    mesh = jax.make_mesh((cfg["devices"],), ("data",))
try:
    mapped = shard_map(local_step, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=(P(), P()))
except TypeError:
    mapped = shard_map(local_step, mesh, in_specs=(P(), P("data"), P("data")), out_specs=(P(), P()))
def local_grads(params, x, y):
    return jax.lax.pmean(jax.value_and_grad(loss_fn)(params, x, y), "data")

try:
    grads_map = shard_map(local_grads, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=(P(), P()))
except TypeError:
    grads_map = shard_map(local_grads, mesh, in_specs=(P(), P("data"), P("data")), out_specs=(P(), P()))

def in_jit(params, x, y):
    loss, g = grads_map(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, g), loss

split = NamedSharding(mesh, P("data"))
xs, ys = jax.device_put(x, split), jax.device_put(y, split)
variants = {"shard_map": (jax.jit(mapped), (params, xs, ys)), "shard_map_in_jit": (jax.jit(in_jit), (params, xs, ys)),
            "auto_spmd": (jax.jit(step), (params, xs, ys)),
            "one_device": (jax.jit(step), (params, x, y))}
out = {"jax_version": jax.__version__, "devices": len(jax.devices())}
for name, (f, args) in variants.items():
    run = lambda: jax.block_until_ready(f(*args))
    run()
    times = []
    for _ in range(cfg["repeats"]):
        t0 = time.perf_counter(); run(); times.append(time.perf_counter() - t0)
    out[name] = statistics.median(times)
new, loss = variants["shard_map"][0](*variants["shard_map"][1])
out["loss"] = float(loss)
print(json.dumps(out))
"""


def jax_peer(cfg, tmp):
    python = os.environ.get("TESSERA_JAX_PYTHON")
    if not python:
        return {"skipped": "TESSERA_JAX_PYTHON is not set"}
    if not os.access(python, os.X_OK):
        return {"skipped": f"TESSERA_JAX_PYTHON={python} is not an interpreter here"}
    r = subprocess.run([python, "-c", JAX_SCRIPT, json.dumps(cfg)], capture_output=True, text=True, timeout=1800,
                       cwd=tmp)
    if r.returncode != 0:
        return {"skipped": r.stderr.strip()[-400:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--inputs", type=int, default=784)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--outputs", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--no-peers", action="store_true")
    a = ap.parse_args()

    import tessera
    from tessera import lax
    from tessera import numpy as tnp
    from tessera.sharding import NamedSharding, P, make_mesh

    tessera.sharding.set_cpu_devices(a.devices)
    lr = 0.05
    sizes = [a.inputs, a.hidden, a.hidden, a.outputs]
    params_np = init(sizes)
    x_np, y_np = batch(a.batch, a.inputs, a.outputs)

    def loss_fn(params, x, y):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < len(params) - 1:
                h = tessera.nn.relu(h)
        return tnp.mean((h - y) ** 2)

    def step(params, x, y):
        loss, g = tessera.value_and_grad(loss_fn)(params, x, y)
        return tessera.tree_util.tree_map(lambda p, g: p - lr * g, params, g), loss

    def local_step(params, x, y):
        loss, g = tessera.value_and_grad(loss_fn)(params, x, y)
        g, loss = lax.pmean((g, loss), "data")
        return tessera.tree_util.tree_map(lambda p, g: p - lr * g, params, g), loss

    mesh = make_mesh((a.devices,), ("data",))
    mapped = tessera.jit(tessera.shard_map(local_step, mesh=mesh, in_specs=(P(), P("data"), P("data")),
                                           out_specs=(P(), P())))
    params = [(tnp.asarray(w), tnp.asarray(b)) for w, b in params_np]
    x, y = tnp.asarray(x_np), tnp.asarray(y_np)
    split = NamedSharding(mesh, P("data"))
    xs, ys = tessera.device_put(x, split), tessera.device_put(y, split)

    # The shard_map step against float64 numpy, before any timing.
    (new, loss) = mapped(params, xs, ys)
    ref, ref_loss = numpy_step(params_np, x_np, y_np, lr)
    worst = max(float(np.max(np.abs(np.asarray(p) - r))) for got, want in zip(new, ref) for p, r in zip(got, want))
    if worst > 1e-4 or abs(float(loss) - ref_loss) > 1e-4 * max(1.0, abs(ref_loss)):
        print(json.dumps({"error": f"shard_map step differs from numpy: max |dparam| {worst}, loss {float(loss)} "
                                   f"vs {ref_loss}"}))
        sys.exit(1)

    def local_grads(params, x, y):
        return lax.pmean(tessera.value_and_grad(loss_fn)(params, x, y), "data")

    grads_map = tessera.shard_map(local_grads, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=(P(), P()))

    @tessera.jit
    def in_jit(params, x, y):
        loss, g = grads_map(params, x, y)
        return tessera.tree_util.tree_map(lambda p, g: p - lr * g, params, g), loss

    (new, loss_in_jit) = in_jit(params, xs, ys)
    worst_in_jit = max(float(np.max(np.abs(np.asarray(p) - r))) for got, want in zip(new, ref)
                       for p, r in zip(got, want))
    if worst_in_jit > 1e-4:
        print(json.dumps({"error": f"shard_map inside jit differs from numpy: max |dparam| {worst_in_jit}"}))
        sys.exit(1)

    auto = tessera.jit(step)
    variants = {"shard_map": lambda: mapped(params, xs, ys), "shard_map_in_jit": lambda: in_jit(params, xs, ys),
                "auto_spmd": lambda: auto(params, xs, ys),
                "one_device": lambda: auto(params, x, y)}

    def ready(out):
        np.asarray(out[1])  # the loss is the last value each step computes
        return out

    doc = {"workload": f"MLP {'-'.join(map(str, sizes))}, MSE, SGD, batch {a.batch} over {a.devices} devices",
           "check": {"max_abs_param_diff": worst, "max_abs_param_diff_in_jit": worst_in_jit, "loss": float(loss),
                     "numpy_loss": ref_loss},
           "tessera": {name: median_seconds(lambda f=f: ready(f()), a.repeats) for name, f in variants.items()}}
    # The step's products: forward, the gradients of the weights, and of the activations below the first layer.
    pairs = list(zip(sizes[:-1], sizes[1:]))
    flops = 2 * a.batch * (2 * sum(i * o for i, o in pairs) + sum(i * o for i, o in pairs[1:]))
    m = np.ones((2048, 2048), np.float32)
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        m @ m
        best.append(time.perf_counter() - t0)
    peak = 2 * 2048 ** 3 / min(best) / 1e9  # the best of five: the machine's rate, not its noise
    doc["step_gflop"] = flops / 1e9
    doc["sgemm_peak_gflops"] = peak
    doc["fraction_of_sgemm_peak"] = {k: flops / t / 1e9 / peak for k, t in doc["tessera"].items()}
    if not a.no_peers:
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "data.npz")
            arrays = {"x": x_np, "y": y_np}
            for i, (w, b) in enumerate(params_np):
                arrays[f"w{i}"], arrays[f"b{i}"] = w, b
            np.savez(path, **arrays)
            cfg = {"devices": a.devices, "data": path, "layers": len(params_np), "lr": lr, "repeats": a.repeats}
            doc["jax"] = jax_peer(cfg, tmp)
        if "shard_map" in doc["jax"]:
            doc["jax_over_tessera"] = {k: doc["jax"][k] / doc["tessera"][k] for k in variants}
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
