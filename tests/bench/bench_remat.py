"""Rematerialisation ([train] remat): what recomputing each block saves and costs, peers in the same run; prints one
JSON document.

For each policy (none, blocks, dots_saveable) on GPT-2 124M (sample_projects/gpt2_124m) at batch 4, T 256, AdamW:
  memory   `tessera memory --json`: the planned peak of the step and the activations live at that peak
  step     `tessera bench --json`: the median step time (native kernels, after warm-up)
Ratios against none: peak_ratio (the whole step: parameters, gradients and AdamW state included),
activation_ratio (the most activation bytes live at any point: what remat acts on), step_made_ratio (the most
bytes the step itself makes: activations, temporaries, gradients), arena_ratio (the intermediates' arena),
step_ratio (the recomputation's cost).
Peers, when importable: PyTorch with torch.utils.checkpoint per block (peak RSS of its process) and JAX with
jax.checkpoint per block (XLA's temp bytes), each remat against none, so their trade can be set beside ours.

    python3 tests/bench/bench_remat.py [--tessera build/app/cli/tessera] [--steps 3] [--batch 4] [--seq 256]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
POLICIES = ["none", "blocks", "dots_saveable"]


def run_json(cmd, timeout=3600):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-600:]}")
    return json.loads([line for line in p.stdout.splitlines() if line.strip()][-1])


def tessera_policy(opts, policy, sgemm):
    sets = ["--set", f"train.remat={policy}", "--set", f"train.batch_size={opts.batch}",
            "--set", f"train.seq_len={opts.seq}"]
    mem = run_json([opts.tessera, "memory", opts.project, "--json", "--top", "0"] + sets)
    kinds = mem["kinds"]
    at_peak = dict(zip(kinds, mem["live"][mem["peak"]["kernel"]]))
    # The most activation bytes live while any kernel runs (what remat acts on), and the most of everything the
    # step makes (activations, temporaries and gradients: the peak less the state the step is given).
    act = kinds.index("activations")
    made = [kinds.index(k) for k in ("activations", "temporaries", "gradients") if k in kinds]
    activations_max = max(row[act] for row in mem["live"])
    made_max = max(sum(row[k] for k in made) for row in mem["live"])
    bench = run_json([opts.tessera, "bench", opts.project, "--json", "--steps", str(opts.steps),
                      "--sgemm", str(sgemm)] + sets)
    out = {"peak_bytes": mem["peak"]["bytes"], "at_peak": at_peak, "activations_max_bytes": activations_max,
           "step_made_max_bytes": made_max, "arena_bytes": mem["arena"]["bytes"],
           "median_step_s": bench.get("median_step_s", bench.get("step_s")), "bench": bench}
    return out


def peer(script, python, opts, remat):
    cmd = [python, os.path.join(HERE, "peers", script), "gpt2", "--batch", str(opts.batch), "--seq", str(opts.seq),
           "--steps", str(opts.steps), "--remat", remat, "--threads", str(opts.threads)]
    try:
        return run_json(cmd)
    except Exception as e:  # the peer is not installed, or failed: say so
        return {"skipped": str(e)[-300:]}


def peer_pair(script, python, opts, check_import):
    if subprocess.run([python, "-c", f"import {check_import}"], capture_output=True).returncode != 0:
        return {"skipped": f"{check_import} is not importable by {python}"}
    none, blocks = peer(script, python, opts, "none"), peer(script, python, opts, "blocks")
    out = {"none": none, "blocks": blocks}
    if "median_step_s" in none and "median_step_s" in blocks:
        out["step_ratio"] = blocks["median_step_s"] / none["median_step_s"]
    for key in ("peak_rss_bytes", "temp_bytes"):
        if key in none and key in blocks and none[key]:
            out[key.replace("_bytes", "_ratio")] = blocks[key] / none[key]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "app", "cli", "tessera"))
    ap.add_argument("--project", default=os.path.join(ROOT, "sample_projects", "gpt2_124m"))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--no-peers", action="store_true")
    opts = ap.parse_args()

    result = {"workload": f"gpt2_124m B{opts.batch} T{opts.seq} AdamW", "tessera": {}}
    for i, policy in enumerate(POLICIES):
        print(f"tessera remat={policy} ...", file=sys.stderr)
        result["tessera"][policy] = tessera_policy(opts, policy, 2048 if i == 0 else 0)
    base = result["tessera"]["none"]
    for policy in POLICIES[1:]:
        r = result["tessera"][policy]
        r["peak_ratio"] = r["peak_bytes"] / base["peak_bytes"]
        r["activation_ratio"] = r["activations_max_bytes"] / max(base["activations_max_bytes"], 1)
        r["step_made_ratio"] = r["step_made_max_bytes"] / max(base["step_made_max_bytes"], 1)
        r["arena_ratio"] = r["arena_bytes"] / max(base["arena_bytes"], 1)
        if r["median_step_s"] and base["median_step_s"]:
            r["step_ratio"] = r["median_step_s"] / base["median_step_s"]
    if not opts.no_peers:
        print("peers ...", file=sys.stderr)
        result["torch"] = peer_pair("torch_peer.py", "/usr/bin/python3", opts, "torch")
        result["jax"] = peer_pair("jax_peer.py", sys.executable, opts, "jax")
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
