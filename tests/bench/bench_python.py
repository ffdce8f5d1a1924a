"""Python front end benchmarks, peers in the same run; prints one JSON document.

  step       the gpt2_6l training step with its model in Python (projects/py_gpt_6l: sample_projects/py_gpt's
             model.py) against the same model from the built-in gpt2 family (projects/gpt2_6l), both through
             `tessera bench`, alternated over --rounds; ratio = gpt2 step / py_gpt step (1: the same speed).
  trace      tracing py_gpt_6l's model.py in its child process (python3 -m tessera.project_trace) plus the engine's
             compile of the step (`tessera bench`'s compile_s), against the 1 s a save-to-graph round may take.
  eager      tnp.add on 8 floats, one op dispatched eagerly, against numpy and PyTorch's eager op (when torch is
             importable); ratio = peer / tessera (> 1: Tessera is faster).
  eager_big  tnp.exp, tnp.tanh and tnp.add on 4M floats dispatched eagerly (the loop lowerings' vector code, the
             bits jit gives), against the same function jitted and PyTorch's eager op; ratio = peer / tessera.
  jit_call   an already-jitted function of 10 small arguments called again, against jax.jit's cached call (when
             jax is importable here, else in TESSERA_JAX_PYTHON's process, e.g. a venv's python with JAX: a JAX
             that needs numpy 2 cannot share a process with Debian's numpy 1).

    PYTHONPATH=build/python python3 tests/bench/bench_python.py [--tessera build/app/cli/tessera] [--rounds 3]
"""
import argparse
import inspect
import json
import os
import subprocess
import sys
import time
import timeit

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def bench_json(tessera, project, steps, sgemm):
    cmd = [tessera, "bench", project, "--json", "--steps", str(steps), "--sgemm", str(sgemm)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-600:]}")
    return json.loads([line for line in p.stdout.splitlines() if line.strip()][-1])


def per_call(fn, min_seconds=0.5):
    """Seconds per call: the best of 5 repeats of as many calls as fill min_seconds."""
    timer = timeit.Timer(fn)
    n, _ = timer.autorange()
    n = max(n, int(n * min_seconds / 0.2))
    return min(timer.repeat(5, n)) / n


def bench_step(opts):
    py = os.path.join(HERE, "projects", "py_gpt_6l")
    cpp = os.path.join(HERE, "projects", "gpt2_6l")
    runs = {"py_gpt": [], "gpt2": []}
    for r in range(opts.rounds):
        # The SGEMM peak once, in the first round.
        runs["py_gpt"].append(bench_json(opts.tessera, py, opts.steps, 2048 if r == 0 else 0))
        runs["gpt2"].append(bench_json(opts.tessera, cpp, opts.steps, 0))
    best = {k: min(v, key=lambda x: x["median_step_s"]) for k, v in runs.items()}
    peak = runs["py_gpt"][0].get("sgemm_peak_gflops")
    out = {k: {"median_step_s": b["median_step_s"], "tokens_per_s": b["tokens_per_s"], "gflops": b["gflops"],
               "peak_fraction": b["gflops"] / peak if peak else None, "first_loss": b["first_loss"],
               "params": b["params"]} for k, b in best.items()}
    out["sgemm_peak_gflops"] = peak
    out["ratio_gpt2_over_py_gpt"] = best["gpt2"]["median_step_s"] / best["py_gpt"]["median_step_s"]
    out["same_first_loss"] = abs(best["gpt2"]["first_loss"] - best["py_gpt"]["first_loss"]) <= 1e-5 * abs(best["gpt2"]["first_loss"])
    out["compile_s"] = best["py_gpt"]["compile_s"]
    return out


def bench_trace(opts, compile_s):
    cfg = {"python": "model.py", "block_size": 256, "n_layer": 6, "n_head": 6, "n_embd": 384, "dropout": 0.0,
           "vocab_size": 4096, "seq_len": 256}
    out = os.path.join(opts.tmp, "trace.json")
    cmd = [sys.executable, "-m", "tessera.project_trace", "--model",
           os.path.join(ROOT, "sample_projects", "py_gpt", "model.py"), "--config", json.dumps(cfg),
           "--inputs", "i32[16,256]", "--targets", "i32[16,256]", "--out", out]
    times = []
    for _ in range(opts.rounds):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return {"trace_s": min(times), "compile_s": compile_s, "total_s": min(times) + compile_s, "target_s": 1.0}


def bench_eager():
    import numpy as np
    import tessera.numpy as tnp
    a, b = tnp.ones((8,)), tnp.ones((8,))
    ours = per_call(lambda: tnp.add(a, b))
    na, nb = np.ones(8, np.float32), np.ones(8, np.float32)
    out = {"tessera_s": ours, "numpy_s": per_call(lambda: np.add(na, nb))}
    try:
        import torch
        ta, tb = torch.ones(8), torch.ones(8)
        out["torch_s"] = per_call(lambda: torch.add(ta, tb))
        out["ratio_torch"] = out["torch_s"] / ours
    except ImportError as e:
        out["torch"] = {"skipped": str(e)}
    return out


def bench_eager_big():
    import numpy as np
    import tessera
    import tessera.numpy as tnp
    n = 1 << 22
    x = tnp.asarray(np.random.default_rng(0).random(n, dtype=np.float32))
    ops = {"exp": (tnp.exp, "exp"), "tanh": (tnp.tanh, "tanh"), "add": (lambda v: v + v, None)}
    out = {"elements": n}
    try:
        import torch
        t = torch.from_numpy(np.asarray(x).copy())
    except ImportError as e:
        torch, out["torch"] = None, {"skipped": str(e)}
    for name, (f, torch_name) in ops.items():
        jf = tessera.jit(f)
        jf(x).block_until_ready()
        r = {"tessera_s": per_call(lambda: f(x)), "jit_s": per_call(lambda: jf(x).block_until_ready())}
        r["same_bits_as_jit"] = bool((np.asarray(f(x)).view(np.int32) == np.asarray(jf(x)).view(np.int32)).all())
        if torch is not None:
            tf = getattr(torch, torch_name) if torch_name else (lambda v: v + v)
            r["torch_s"] = per_call(lambda: tf(t))
            r["ratio_torch"] = r["torch_s"] / r["tessera_s"]
        r["ratio_jit"] = r["jit_s"] / r["tessera_s"]
        out[name] = r
    return out


def bench_jit_call():
    import tessera
    import tessera.numpy as tnp
    args = [tnp.ones((4,)) * i for i in range(10)]
    f = tessera.jit(lambda *xs: sum(xs[1:], xs[0]))
    f(*args)
    out = {"tessera_s": per_call(lambda: f(*args))}
    try:
        out["jax_s"] = JAX_JIT_CALL()
    except ImportError as e:
        python = os.environ.get("TESSERA_JAX_PYTHON")
        if not python:
            out["jax"] = {"skipped": f"{e}; TESSERA_JAX_PYTHON names none"}
            return out
        code = f"import os, sys, timeit\n{inspect.getsource(per_call)}\n{inspect.getsource(JAX_JIT_CALL)}\n" \
               "print(JAX_JIT_CALL())"
        p = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            out["jax"] = {"failed": p.stderr.strip()[-400:]}
            return out
        out["jax_s"] = float(p.stdout.split()[-1])
        out["jax_process"] = python
    out["ratio_jax"] = out["jax_s"] / out["tessera_s"]
    return out


def JAX_JIT_CALL():
    """Seconds per call of jax.jit's cached call of the same function (raises ImportError without jax)."""
    import jax
    import jax.numpy as jnp
    jargs = [jnp.ones((4,)) * i for i in range(10)]
    g = jax.jit(lambda *xs: sum(xs[1:], xs[0]))
    g(*jargs).block_until_ready()
    return per_call(lambda: g(*jargs).block_until_ready())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "app", "cli", "tessera"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--only", default="step,trace,eager,eager_big,jit_call")
    opts = ap.parse_args()
    import tempfile
    doc = {"threads": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        opts.tmp = tmp
        only = opts.only.split(",")
        compile_s = 0.0
        if "step" in only:
            doc["step"] = bench_step(opts)
            compile_s = doc["step"]["compile_s"]
        if "trace" in only:
            doc["trace"] = bench_trace(opts, compile_s)
        if "eager" in only:
            doc["eager"] = bench_eager()
        if "eager_big" in only:
            doc["eager_big"] = bench_eager_big()
        if "jit_call" in only:
            doc["jit_call"] = bench_jit_call()
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
