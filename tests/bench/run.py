"""Side-by-side benchmarks: each workload through `tessera bench` (or bench_elementwise) and its peers, PyTorch and
JAX on CPU, in one run. Prints one JSON document: per workload the step times, tokens or samples per second,
GFLOP/s, the fraction of the SGEMM peak measured in the same run (the best of the run's measurements), and ratios
peer_time / tessera_time (> 1: Tessera is faster).

    tests/bench/run.sh [--quick] [--only gpt2_124m,mlp] [--steps N] [--rounds R] [--out FILE]

Without --quick, `data` (bench_data: BPE training, encoding against GPT-2's encoder.py, the batch loader) is
added at the end; encode speed ratio = ours / encoder.py's. So is `metrics` (bench_metrics: the Metrics panel's
frame time with a million points per metric against every point given to Qt Charts, and the run store's write
cost per training step as a fraction of gpt2_mini's step, which it times with the same tessera).

The peers' FLOPs are Tessera's model FLOPs for the same workload (the same model, the same formula). A peer whose
Python or package is missing is reported as {"skipped": why}. --check (the CTest) also fails when a peer's
parameter count differs from Tessera's, a loss is not finite, or the elementwise results are wrong; it exits 77
(skipped) when torch is not importable.
"""
import argparse
import datetime
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SKIP = 77

# name: project (or None), batch, seq, timed steps, warm-up steps; elementwise: n floats.
FULL = {
    "gpt2_124m": {"project": "sample_projects/gpt2_124m", "batch": 4, "seq": 64, "steps": 3, "warmup": 1},
    "gpt2_6l": {"project": "tests/bench/projects/gpt2_6l", "batch": 16, "seq": 256, "steps": 3, "warmup": 1},
    # the same step under bf16 autocast (--set precision.compute=bf16; the peers' --autocast)
    "gpt2_6l_bf16": {"project": "tests/bench/projects/gpt2_6l", "batch": 16, "seq": 256, "steps": 3, "warmup": 1,
                     "compute": "bf16"},
    "mlp": {"project": "sample_projects/mlp_sharding", "batch": 8192, "steps": 5, "warmup": 1},
    "resnet18": {"project": "tests/bench/projects/resnet18_cifar", "batch": 64, "steps": 3, "warmup": 1},
    # ViT-B/16 at 224x224 (the seed ViT comparison's model and optimizer) at a CPU's batch
    "vit_b16": {"project": "sample_projects/vit_base", "batch": 8, "steps": 3, "warmup": 1},
    "elementwise": {"n": 64 * 1024 * 1024, "steps": 5},
}
QUICK = {
    "gpt2_tiny": {"project": "tests/bench/projects/gpt2_tiny", "batch": 2, "seq": 16, "steps": 2, "warmup": 1},
    "gpt2_tiny_bf16": {"project": "tests/bench/projects/gpt2_tiny", "batch": 2, "seq": 16, "steps": 2, "warmup": 1,
                       "compute": "bf16"},
    "mlp": {"project": "sample_projects/mlp_sharding", "batch": 64, "steps": 2, "warmup": 1},
    "resnet_tiny": {"project": "tests/bench/projects/resnet_tiny", "batch": 2, "steps": 2, "warmup": 1},
    "vit_tiny": {"project": "tests/bench/projects/vit_tiny", "batch": 2, "steps": 2, "warmup": 1},
    "elementwise": {"n": 1024 * 1024, "steps": 3},
}


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


def run_json(cmd, timeout, env=None):
    """Runs cmd and returns the last stdout line parsed as JSON, or raises RuntimeError with stderr's tail."""
    log("  $", " ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {p.stderr.strip()[-600:]}")
    lines = [line for line in p.stdout.splitlines() if line.strip()]
    if not lines:
        raise RuntimeError("no output")
    return json.loads(lines[-1])


def find_python(module, candidates):
    """The first interpreter that imports `module`, or None."""
    for py in candidates:
        exe = shutil.which(py) if not os.path.isabs(py) else (py if os.path.exists(py) else None)
        if not exe:
            continue
        if subprocess.run([exe, "-c", f"import {module}"], capture_output=True).returncode == 0:
            return exe
    return None


def cpu_description():
    model, flags = platform.processor() or "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and not model:
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    simd = [f for f in ("avx2", "fma", "avx512f") if f in flags]
    # Other work on the machine slows every engine alike, but not evenly: keep the load with the figures.
    return {"cpu": model, "cores": os.cpu_count(), "simd": simd, "load_average": os.getloadavg()[0]}


def peer_args(spec, project):
    """The peer command-line arguments describing the same model and optimiser as the project."""
    if project is None:
        return ["elementwise", "--n", str(spec["n"])]
    m, d, t = project["model"], project.get("data", {}), project.get("train", {})
    args = ["--batch", str(spec["batch"]), "--lr", str(t.get("lr", 3e-4))]
    if m["family"] == "gpt2":
        vocab = 50257 if d.get("tokenizer") == "gpt2" else d.get("vocab_size", 512)
        return ["gpt2", *args, "--seq", str(spec["seq"]), "--vocab", str(vocab), "--block", str(m["block_size"]),
                "--layers", str(m["n_layer"]), "--heads", str(m["n_head"]), "--embd", str(m["n_embd"]),
                "--beta1", str(t.get("beta1", 0.9)), "--beta2", str(t.get("beta2", 0.95)),
                "--weight-decay", str(t.get("weight_decay", 0.1)), "--grad-clip", str(t.get("grad_clip", 1.0))]
    if m["family"] == "mlp":
        return ["mlp", *args, "--sizes", ",".join(str(s) for s in m["sizes"])]
    if m["family"] == "resnet" and m.get("stem") == "cifar" and t.get("optimizer") == "sgd":
        return ["resnet", *args, "--depth", str(m["depth"]), "--width", str(m.get("width", 64)),
                "--classes", str(m["num_classes"]), "--image", str(m["image_size"]),
                "--momentum", str(t.get("momentum", 0.0))]
    if m["family"] == "vit" and t.get("optimizer") == "sgd" and not t.get("grad_clip"):
        return ["vit", *args, "--image", str(m["image_size"]), "--patch", str(m["patch_size"]),
                "--embd", str(m["hidden"]), "--layers", str(m["layers"]), "--heads", str(m["heads"]),
                "--mlp", str(m["mlp"]), "--classes", str(m["num_classes"]), "--momentum", str(t.get("momentum", 0.0))]
    raise ValueError(f"no peer for family {m['family']}")


def same_blas_kernels(tessera_result):
    """The peers' environment: OpenBLAS's kernels as Tessera ran them. On a CPU newer than Debian's OpenBLAS knows, it
    takes its generic kernels (5-9x slower products) unless OPENBLAS_CORETYPE names others; `tessera` sets it for
    itself and reports the kernels it got (sgemm_kernels), and PyTorch (Debian's, on the same OpenBLAS) gets them too."""
    kernels = tessera_result.get("sgemm_kernels")
    if "OPENBLAS_CORETYPE" in os.environ or not kernels:
        return dict(os.environ)
    return dict(os.environ, OPENBLAS_CORETYPE=kernels)


def summarise_step(result, flops, peak, items, item_name):
    """The common fields of one engine's figures for a training-step workload."""
    median = result["median_step_s"]
    gflops = flops / median / 1e9
    out = {"median_step_s": median, "min_step_s": result["min_step_s"], "step_times_s": result["step_times_s"],
           f"{item_name}_per_s": items / median, "gflops": gflops}
    if peak:
        out["peak_fraction"] = gflops / peak
    for key in ("params", "first_step_s", "compile_s", "first_loss", "last_loss", "graph_flops_per_step", "version"):
        if key in result:
            out[key] = result[key]
    return out


def bench_workload(name, spec, opts, pythons):
    """Runs Tessera and the peers `opts.rounds` times, alternating, and keeps each engine's fastest round (by
    median step): other work on the machine then costs every engine alike. The SGEMM peak and the copy bandwidth
    are the best of the rounds too."""
    log(f"{name}:")
    steps = str(opts.steps or spec["steps"])
    threads = opts.threads
    taskset = ["taskset", "-c", f"0-{threads - 1}"] if shutil.which("taskset") and threads <= os.cpu_count() else []
    timeout = 120 if opts.quick else 1800
    project = None
    if "project" in spec:
        path = os.path.join(ROOT, spec["project"])
        with open(os.path.join(path, "project.toml"), "rb") as f:
            project = tomllib.load(f)
        tessera_cmd = [opts.tessera, "bench", path, "--batch", str(spec["batch"]), "--steps", steps,
                       "--warmup", str(spec["warmup"]), "--json"]
        if "seq" in spec:
            tessera_cmd += ["--seq", str(spec["seq"])]
        if "compute" in spec:
            tessera_cmd += ["--set", f"precision.compute={spec['compute']}"]
        if opts.quick:
            tessera_cmd += ["--sgemm", "512"]
    else:
        tessera_cmd = [opts.elementwise, "--n", str(spec["n"]), "--steps", steps, "--json"]
    env = dict(os.environ, TESSERA_NUM_THREADS=str(threads))

    peers = {}
    for peer in ("torch", "jax"):
        if peer in opts.peers and pythons.get(peer):
            cmd = [*taskset, pythons[peer], os.path.join(HERE, "peers", f"{peer}_peer.py"),
                   *peer_args(spec, project), "--steps", steps, "--threads", str(threads)]
            if spec.get("compute") == "bf16":
                cmd.append("--autocast")
            peers[peer] = cmd + (["--warmup", str(spec["warmup"])] if project is not None else [])
    runs = {"tessera": [], **{peer: [] for peer in peers}}
    failed = {}
    peer_env = None
    for _ in range(opts.rounds):
        runs["tessera"].append(run_json(tessera_cmd, timeout, env))
        if peer_env is None:
            peer_env = same_blas_kernels(runs["tessera"][-1])
        for peer, cmd in peers.items():
            if peer in failed:
                continue
            try:
                runs[peer].append(run_json(cmd, timeout, peer_env))
            except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
                failed[peer] = str(e)
    best = {e: min(r, key=lambda x: x["median_step_s"]) for e, r in runs.items() if r}
    tessera = best["tessera"]

    entry = {"rounds": opts.rounds}
    if project is None:
        copy = max(r["copy_gbytes_per_s"] for r in runs["tessera"])
        entry.update({"n": spec["n"], "bytes_per_step": tessera["bytes_per_step"], "copy_gbytes_per_s": copy})
        entry["tessera"] = {k: tessera[k] for k in ("median_step_s", "min_step_s", "step_times_s", "gbytes_per_s",
                                                     "first_step_s", "max_abs_err")}
        entry["tessera"]["copy_fraction"] = tessera["gbytes_per_s"] / copy
    else:
        peak = max(r.get("sgemm_peak_gflops", 0.0) for r in runs["tessera"]) or None
        item = tessera["item"]
        entry.update({"project": spec["project"], "family": tessera["family"], "batch": tessera["batch"],
                      "seq": tessera["seq"], "params": tessera["params"], "item": item,
                      "items_per_step": tessera["items_per_step"], "flops_per_step": tessera["flops_per_step"],
                      "flops_rule": tessera["flops_rule"], "sgemm_peak_gflops": peak,
                      "blas_kernels": tessera.get("sgemm_kernels")})
        entry["tessera"] = summarise_step(tessera, tessera["flops_per_step"], peak, tessera["items_per_step"], item)
    entry["ratios"] = {}
    for peer in ("torch", "jax"):
        if peer not in opts.peers:
            continue
        if peer in failed and peer not in best:
            entry[peer] = {"failed": failed[peer]}
            continue
        if peer not in best:
            entry[peer] = {"skipped": f"no Python here imports {peer}"}
            continue
        result = best[peer]
        if project is None:
            entry[peer] = {k: result[k] for k in ("median_step_s", "min_step_s", "step_times_s", "gbytes_per_s",
                                                  "copy_gbytes_per_s", "version")}
            entry[peer]["copy_fraction"] = result["gbytes_per_s"] / entry["copy_gbytes_per_s"]
        else:
            entry[peer] = summarise_step(result, entry["flops_per_step"], entry["sgemm_peak_gflops"],
                                         entry["items_per_step"], entry["item"])
        entry["ratios"][peer] = entry[peer]["median_step_s"] / entry["tessera"]["median_step_s"]
    return entry


def bench_data(opts):
    """The tokenizer and data pipeline (bench_data), whose peer is GPT-2's own encoder.py run by the binary."""
    log("data:")
    log("  $", opts.data)
    p = subprocess.run([opts.data], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {p.stderr.strip()[-600:]}")
    result = json.loads(p.stdout)
    peer = result.pop("peer", None)
    entry = {"tessera": result}
    if isinstance(peer, dict) and "encode_mb_per_s" in peer:
        entry["gpt2_encoder_py"] = peer
        entry["ratios"] = {"gpt2_encoder_py": result["encode_mb_per_s"]["warm"] / peer["encode_mb_per_s"]}
    else:
        entry["gpt2_encoder_py"] = {"skipped": "python3 with regex not found"}
    return entry


def bench_conv(opts, pythons):
    """Convolutions at ResNet-18's CIFAR layer shapes (bench_conv: forward, data and filter gradients, each as
    the engine's step runs it) against PyTorch's at the same shapes; ratio = PyTorch's total time / ours."""
    log("conv:")
    env = dict(os.environ, TESSERA_NUM_THREADS=str(opts.threads))
    entry = {"tessera": run_json([opts.conv, "--json"], 1200, env)}
    if pythons.get("torch") and "torch" in opts.peers:
        cmd = [pythons["torch"], os.path.join(HERE, "peers", "torch_peer.py"), "conv", "--batch",
               str(entry["tessera"]["batch"]), "--steps", "5", "--threads", str(opts.threads)]
        try:
            entry["torch"] = run_json(cmd, 1200)
            entry["ratios"] = {"torch": entry["torch"]["median_step_s"] / entry["tessera"]["total_s"]}
        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
            entry["torch"] = {"failed": str(e)}
    else:
        entry["torch"] = {"skipped": "no Python here imports torch"}
    return entry


def bench_metrics(opts):
    """Dense metrics (bench_metrics, offscreen): frames drawn by level of detail against the naive chart in the
    same run, and the store's writes per step against a gpt2_mini step timed by `tessera bench` in the same run."""
    log("metrics:")
    cmd = [opts.metrics, "--tessera", opts.tessera]
    log("  $", " ".join(cmd))
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", TESSERA_NUM_THREADS=str(opts.threads))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {p.stderr.strip()[-600:]}")
    return json.loads(p.stdout)


def apply_run_peak(doc):
    """The SGEMM peak of the run is the best any workload measured: on a shared machine a single measurement can
    catch the cores busy, and the peak is the machine's, not the workload's. Every fraction uses it."""
    peaks = [w["sgemm_peak_gflops"] for w in doc["workloads"].values() if w.get("sgemm_peak_gflops")]
    if not peaks:
        return
    doc["sgemm_peak_gflops"] = max(peaks)
    for w in doc["workloads"].values():
        for engine in ("tessera", "torch", "jax"):
            if "gflops" in w.get(engine, {}):
                w[engine]["peak_fraction"] = w[engine]["gflops"] / doc["sgemm_peak_gflops"]


def check(doc):
    """Problems that make the --check run fail: the scripts must measure the same, correct computation."""
    problems = []
    for name, w in doc["workloads"].items():
        if "error" in w:
            problems.append(f"{name}: {w['error']}")
            continue
        for peer in ("tessera", "torch", "jax"):
            r = w.get(peer, {})
            if "failed" in r:
                problems.append(f"{name}: {peer} failed: {r['failed']}")
            if "params" in r and r["params"] != w["params"]:
                problems.append(f"{name}: {peer} has {r['params']} parameters, tessera {w['params']}")
            for key in ("first_loss", "last_loss"):
                if key in r and not math.isfinite(r[key]):
                    problems.append(f"{name}: {peer} {key} is {r[key]}")
        if w.get("gpt2_encoder_py", {}).get("ids_equal") is False:
            problems.append(f"{name}: our BPE's token ids differ from GPT-2's encoder.py")
        if "max_abs_err" in w.get("tessera", {}) and not w["tessera"]["max_abs_err"] < 1e-4:
            problems.append(f"{name}: tessera's results differ from the reference by {w['tessera']['max_abs_err']}")
    return problems


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny shapes: proves the scripts work, measures nothing")
    p.add_argument("--only", default="", help="comma-separated workload names")
    p.add_argument("--steps", type=int, default=0, help="timed steps (default: per workload)")
    p.add_argument("--peers", default="torch,jax")
    p.add_argument("--rounds", type=int, default=1, help="alternate the engines this many times, keep the best")
    p.add_argument("--threads", type=int, default=int(os.environ.get("TESSERA_NUM_THREADS", os.cpu_count())))
    p.add_argument("--tessera", default=os.path.join(ROOT, "build", "app", "cli", "tessera"))
    p.add_argument("--elementwise", default=os.path.join(ROOT, "build", "tests", "bench", "bench_elementwise"))
    p.add_argument("--data", default=os.path.join(ROOT, "build", "tests", "bench", "bench_data"))
    p.add_argument("--conv", default=os.path.join(ROOT, "build", "tests", "bench", "bench_conv"))
    p.add_argument("--metrics", default=os.path.join(ROOT, "build", "tests", "bench", "bench_metrics"))
    p.add_argument("--out", default="", help="also write the JSON document here")
    p.add_argument("--check", action="store_true", help="fail on wrong results (see above); 77 without torch")
    opts = p.parse_args()
    opts.peers = [x for x in opts.peers.split(",") if x]

    pythons = {
        "torch": find_python("torch", [os.environ.get("TESSERA_TORCH_PYTHON", ""), "/usr/bin/python3", "python3"]),
        "jax": find_python("jax", [os.environ.get("TESSERA_JAX_PYTHON", ""), "python3", "/usr/bin/python3"]),
    }
    workloads = QUICK if opts.quick else FULL
    only = [x for x in opts.only.split(",") if x]
    doc = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "machine": cpu_description(),
           "threads": opts.threads, "quick": opts.quick, "pythons": pythons, "workloads": {}}
    for name, spec in workloads.items():
        if only and name not in only:
            continue
        try:
            doc["workloads"][name] = bench_workload(name, spec, opts, pythons)
        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, OSError) as e:
            doc["workloads"][name] = {"error": str(e)}
    if not opts.quick and (not only or "data" in only):
        try:
            doc["workloads"]["data"] = bench_data(opts)
        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, OSError) as e:
            doc["workloads"]["data"] = {"error": str(e)}
    if not opts.quick and (not only or "conv" in only):
        try:
            doc["workloads"]["conv"] = bench_conv(opts, pythons)
        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, OSError) as e:
            doc["workloads"]["conv"] = {"error": str(e)}
    if not opts.quick and (not only or "metrics" in only):
        try:
            doc["workloads"]["metrics"] = bench_metrics(opts)
        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, OSError) as e:
            doc["workloads"]["metrics"] = {"error": str(e)}
    apply_run_peak(doc)
    text = json.dumps(doc, indent=2)
    print(text)
    if opts.out:
        with open(opts.out, "w") as f:
            f.write(text + "\n")
    if opts.check:
        problems = check(doc)
        for problem in problems:
            log("FAIL", problem)
        if problems:
            return 1
        if pythons["torch"] is None:
            log("SKIP: torch is not importable by /usr/bin/python3 or python3; the PyTorch peer was not checked")
            return SKIP
    return 0


if __name__ == "__main__":
    sys.exit(main())
