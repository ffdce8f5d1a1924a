"""The linalg ops (LAPACK on the CPU) against PyTorch's torch.linalg and JAX's jax.numpy.linalg, in the same run;
prints one JSON document.

For each of cholesky, solve, eigh, svd (reduced), qr and the gradient of sum(eigvalsh(a) * c) and of
sum(svdvals(a) * c): Tessera under jit, PyTorch (TESSERA_NUM_THREADS threads, default the cores, as Tessera) and
JAX on the CPU (plain jax.jit, in the interpreter TESSERA_JAX_PYTHON names: JAX lives in a venv, apart from
Debian's numpy and PyTorch; skipped when unset). Shapes: a batch of --batch matrices of --n x --n and one of
--big x --big. Each figure is the median of --repeats calls after one untimed call; ratios are the peer's time /
Tessera's (> 1: Tessera is faster). Tessera's results are checked against numpy.linalg in float64 before anything
is timed (eigenvalues and singular values; reconstructions for the factors).

    PYTHONPATH=build/python /usr/bin/python3 tests/bench/bench_linalg.py [--batch 16] [--n 128] [--big 512]
        [--repeats 5]
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

import tessera
import tessera.numpy as tnp
from timing import median_seconds, torch_peer

OPS = ("cholesky", "solve", "eigh", "svd", "qr", "eigvalsh_grad", "svdvals_grad")


def inputs(shape, seed):
    """An SPD matrix (cholesky, solve, eigh) and a general one, float32, and weights c [..., n]."""
    rng = np.random.default_rng(seed)
    m = rng.uniform(-1, 1, shape)
    spd = (m @ np.swapaxes(m, -1, -2) / shape[-1] + np.eye(shape[-1])).astype(np.float32)
    gen = rng.uniform(-1, 1, shape).astype(np.float32)
    c = rng.uniform(-1, 1, shape[:-1]).astype(np.float32)
    b = rng.uniform(-1, 1, shape[:-1] + (4,)).astype(np.float32)
    return spd, gen, b, c


def tessera_fns():
    la = tnp.linalg
    return {
        "cholesky": tessera.jit(lambda s, g, b, c: la.cholesky(s)),
        "solve": tessera.jit(lambda s, g, b, c: la.solve(s, b)),
        "eigh": tessera.jit(lambda s, g, b, c: la.eigh(s)),
        "svd": tessera.jit(lambda s, g, b, c: la.svd(g, full_matrices=False)),
        "qr": tessera.jit(lambda s, g, b, c: la.qr(g)),
        "eigvalsh_grad": tessera.jit(tessera.grad(lambda s, g, b, c: tnp.sum(la.eigvalsh(s) * c))),
        "svdvals_grad": tessera.jit(tessera.grad(lambda s, g, b, c: tnp.sum(la.svdvals(g) * c), argnums=1)),
    }


def check(s, g, b, fns, args):
    """Tessera's results against numpy in float64."""
    s64, g64 = s.astype(np.float64), g.astype(np.float64)
    tol = 2e-3 * max(1.0, float(np.abs(np.linalg.eigvalsh(s64)).max()))
    l = np.asarray(fns["cholesky"](*args), np.float64)
    assert np.abs(l @ np.swapaxes(l, -1, -2) - s64).max() < tol, "cholesky"
    assert np.abs(np.asarray(fns["solve"](*args)) - np.linalg.solve(s64, b)).max() < tol, "solve"
    w, _ = fns["eigh"](*args)
    assert np.abs(np.asarray(w) - np.linalg.eigvalsh(s64)).max() < tol, "eigh"
    _, sv, _ = fns["svd"](*args)
    assert np.abs(np.asarray(sv) - np.linalg.svd(g64, compute_uv=False)).max() < tol, "svd"
    q, r = fns["qr"](*args)
    assert np.abs(np.asarray(q, np.float64) @ np.asarray(r, np.float64) - g64).max() < tol, "qr"


def torch_fns(torch):
    la = torch.linalg

    def eig_grad(s, g, b, c):
        s = s.detach().requires_grad_(True)
        return torch.autograd.grad((la.eigvalsh(s) * c).sum(), s)[0]

    def svd_grad(s, g, b, c):
        g = g.detach().requires_grad_(True)
        return torch.autograd.grad((la.svdvals(g) * c).sum(), g)[0]

    return {
        "cholesky": lambda s, g, b, c: la.cholesky(s),
        "solve": lambda s, g, b, c: la.solve(s, b),
        "eigh": lambda s, g, b, c: la.eigh(s),
        "svd": lambda s, g, b, c: la.svd(g, full_matrices=False),
        "qr": lambda s, g, b, c: la.qr(g),
        "eigvalsh_grad": eig_grad,
        "svdvals_grad": svd_grad,
    }


JAX_SCRIPT = r"""
import json, statistics, sys, time
import numpy as np
import jax, jax.numpy as jnp
cfg = json.loads(sys.argv[1])
la = jnp.linalg
fns = {
    "cholesky": jax.jit(lambda s, g, b, c: la.cholesky(s)),
    "solve": jax.jit(lambda s, g, b, c: la.solve(s, b)),
    "eigh": jax.jit(lambda s, g, b, c: la.eigh(s)),
    "svd": jax.jit(lambda s, g, b, c: la.svd(g, full_matrices=False)),
    "qr": jax.jit(lambda s, g, b, c: la.qr(g)),
    "eigvalsh_grad": jax.jit(jax.grad(lambda s, g, b, c: jnp.sum(la.eigvalsh(s) * c))),
    "svdvals_grad": jax.jit(jax.grad(lambda s, g, b, c: jnp.sum(la.svd(g, compute_uv=False) * c), argnums=1)),
}
out = {"jax_version": jax.__version__}
for name, path in cfg["inputs"].items():
    args = [jnp.asarray(a) for a in np.load(path).values()]
    res = {}
    for op, f in fns.items():
        run = lambda: jax.block_until_ready(f(*args))
        run()
        times = []
        for _ in range(cfg["repeats"]):
            t0 = time.perf_counter(); run(); times.append(time.perf_counter() - t0)
        res[op] = statistics.median(times)
    out[name] = res
print(json.dumps(out))
"""


def jax_peer(shapes, repeats, tmp):
    """JAX's times per shape name and op, from the interpreter TESSERA_JAX_PYTHON names (None: skipped)."""
    python = os.environ.get("TESSERA_JAX_PYTHON")
    if not python:
        return None, "TESSERA_JAX_PYTHON is not set"
    if not os.access(python, os.X_OK):
        return None, f"TESSERA_JAX_PYTHON={python} is not an interpreter here"
    paths = {}
    for name, arrays in shapes.items():
        paths[name] = os.path.join(tmp, f"{name}.npz")
        np.savez(paths[name], *arrays)
    threads = os.environ.get("TESSERA_NUM_THREADS") or str(len(os.sched_getaffinity(0)))
    env = dict(os.environ, XLA_FLAGS=f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={threads}")
    r = subprocess.run([python, "-c", JAX_SCRIPT, json.dumps({"inputs": paths, "repeats": repeats})],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
    return json.loads(r.stdout.strip().splitlines()[-1]), None


def ready(x):
    """x (an Array or a tuple of them) computed."""
    for leaf in x if isinstance(x, tuple) else (x,):
        leaf.block_until_ready()
    return x


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--n", type=int, default=128)
    p.add_argument("--big", type=int, default=512)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    shapes = {f"batch{a.batch}x{a.n}": inputs((a.batch, a.n, a.n), 0), f"one{a.big}": inputs((a.big, a.big), 1)}
    doc = {"threads": os.environ.get("TESSERA_NUM_THREADS", "default"), "load_average": os.getloadavg()[0],
           "repeats": a.repeats}
    fns = tessera_fns()
    for name, arrays in shapes.items():
        args = [tnp.asarray(x) for x in arrays]
        check(*arrays[:3], fns, args)
        doc[name] = {op: {"tessera_s": median_seconds(lambda f=fns[op]: ready(f(*args)), a.repeats)}
                     for op in OPS}
    torch = torch_peer(doc)
    if torch is not None:
        doc["torch_version"] = torch.__version__
        tf = torch_fns(torch)
        for name, arrays in shapes.items():
            targs = [torch.from_numpy(x) for x in arrays]
            for op in OPS:
                doc[name][op]["torch_s"] = median_seconds(lambda f=tf[op]: f(*targs), a.repeats)
                doc[name][op]["torch_ratio"] = doc[name][op]["torch_s"] / doc[name][op]["tessera_s"]
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        jax_times, why = jax_peer(shapes, a.repeats, tmp)
    if jax_times is None:
        doc["jax"] = {"skipped": why}
    else:
        doc["jax_version"] = jax_times.pop("jax_version")
        for name in shapes:
            for op in OPS:
                doc[name][op]["jax_s"] = jax_times[name][op]
                doc[name][op]["jax_ratio"] = jax_times[name][op] / doc[name][op]["tessera_s"]
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    sys.exit(main())
