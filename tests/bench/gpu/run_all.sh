#!/usr/bin/env bash
# On a GPU machine, in one command, most important first: the CUDA backend's tests; every sample project trained
# for a few steps on the GPU; gpt2_tp's mesh on the GPUs against one GPU (ranks_check.sh); ResNet-18 (CIFAR stem, batch 256, TF32) against PyTorch; GPT-2 124M (B=16,
# T=1024, bf16, AdamW) training steps of Tessera, PyTorch (torch.compile, bf16 autocast, SDPA) and JAX side by
# side; ViT-B/16 (batch 32, TF32) against the peers;
# gpt2_mini's loss curve on the GPU against the CPU's (200 steps, f32, 1e-4 relative); a profile of a GPU step
# into a run store (for the IDE's timeline). Prints one JSON line per run and a summary with the ratios.
# Needs .gpukit/tessera-gpukit.tar.xz (scripts/gpu_kit.sh, run where the Debian dev packages are).
#
#   bash tests/bench/gpu/run_all.sh [all|tests|samples|ranks|gemm|resnet|gpt2|vit|attention|curve|autocast|profile]...
#   TESSERA_GPU_PEERS=0   Tessera's runs alone (the peers' figures from an earlier call on the same kind of GPU)
#   TESSERA_GPU_GEMM_AB=1  GPT-2 and ViT also with cuBLASLt's heuristic algorithms (TESSERA_GEMM_AUTOTUNE=0) as
#                          peer "tessera_heuristic": what GEMM autotuning gains, on the same machine
#   TESSERA_GPU_ATTENTION_AB=1  GPT-2 also with attention unfused (TESSERA_FUSED_ATTENTION=off) as peer
#                          "tessera_unfused": what flash attention gains, on the same machine
#   TESSERA_GPU_RECOMPUTE_AB=1  GPT-2 and ViT also without the recompute pass (TESSERA_RECOMPUTE=off) as peer
#                          "tessera_norecompute": what recomputing cheap values in their readers gains
#   TESSERA_GPU_FLASH_AB=1  GPT-2 also on the first flash attention kernels (TESSERA_FLASH_KERNELS=v1) as peer
#                          "tessera_flash_v1"
#   TESSERA_GPU_GRAPHS_AB=1  GPT-2 also run kernel by kernel (TESSERA_CUDA_GRAPHS=off, peer "tessera_nographs") and
#                          with every loop launched alone (TESSERA_CUDA_LOOP_GROUPS=off, peer "tessera_nogroups"), and
#                          gpt2_mini (f32, launch-bound) with graphs on and off: what CUDA graphs and grouped AdamW gain
#   TESSERA_GPU_CURVE_CPU1=0  leave out the one-thread CPU curve (how far summation order alone moves it)
#   TESSERA_GPU_BUDGET=S   stop starting work S seconds after the start (each step's limit is cut to fit), so that
#                          the packing at the end still runs inside a lease
# Output (under $OUT when set, else /tmp/tessera-gpu-results): results.jsonl, summary.json, gpu_profile.db and
# logs.tar.gz with every step's log; few files, as a lease brings back only a handful.
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
what=" ${*:-all} "
want() { [[ $what == *" all "* || $what == *" $1 "* ]]; }
peers() { [[ ${TESSERA_GPU_PEERS:-1} != 0 ]]; }
out=${OUT:-/tmp/tessera-gpu-results}
budget=${TESSERA_GPU_BUDGET:-0}
mkdir -p "$out"
work=/tmp/tessera-gpukit
logs=$work/logs
rm -rf "$work" && mkdir -p "$work" "$logs"
if [[ ! -f $root/.gpukit/tessera-gpukit.tar.xz ]]; then
  echo "no .gpukit/tessera-gpukit.tar.xz: run scripts/gpu_kit.sh where the toolkit and dev packages are" >&2
  exit 2
fi
# Python's tarfile reads xz without the xz tool (which a bare image may lack).
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
  "$root/.gpukit/tessera-gpukit.tar.xz" "$work" 2>/dev/null || tar -C "$work" -xJf "$root/.gpukit/tessera-gpukit.tar.xz"

# The CUDA libraries: the toolkit's, the driver's, and those of the Python wheels (nvidia-*).
libs=$work/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
  [[ -d $d ]] && libs=$libs:$d
done
pyl=$(python3 -c 'import glob, os, nvidia; print(":".join(sorted({os.path.dirname(p) for d in nvidia.__path__ for p in glob.glob(d + "/*/lib/*.so*")})))' 2>/dev/null || true)
[[ -n $pyl ]] && libs=$libs:$pyl
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TESSERA_SOURCE_DIR=$root TESSERA_KERNEL_CACHE=/tmp/tessera-kernels PYTHONUNBUFFERED=1
export TESSERA_PLUGIN_PATH=$work/plugins
bin=$work/bin
results=$out/results.jsonl
: >"$results"

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  nvcc --version | tail -1
  python3 -c 'import torch; print("torch", torch.__version__)'
  python3 -c 'import jax; print("jax", jax.__version__)'
} 2>&1 | tee "$logs/machine.log"
missing=$(ldd "$bin/tessera" "$bin/test_cuda_backend" | grep "not found" | sort -u)
[[ -n $missing ]] && echo "missing libraries: $missing" >&2

run() {  # run NAME LIMIT COMMAND...: output to logs/NAME.log, JSON lines to results.jsonl (a test: rc 77 = skipped)
  local name=$1 limit=$2
  shift 2
  if ((budget > 0)); then
    local left=$((budget - SECONDS))
    if ((left < 20)); then
      echo "== $name: skipped, the budget is spent"
      echo "{\"workload\":\"$name\",\"skipped\":\"budget\"}" >>"$results"
      return 0
    fi
    ((limit > left)) && limit=$left
  fi
  echo "== $name (limit ${limit} s)"
  local t0=$SECONDS
  timeout "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  grep -E '^\{' "$logs/$name.log" >>"$results" || true
  grep -E 'ERROR|FATAL|SKIP|MESSAGE|test cases:|assertions:|error|Error' "$logs/$name.log" | tail -25
  echo "   rc=$rc, $((SECONDS - t0)) s"
  [[ $rc -ne 0 ]] && tail -5 "$logs/$name.log"
  return 0
}

if want tests; then
  "$bin/tessera" ops --json >"$logs/ops.json" 2>&1
  python3 - "$logs/ops.json" <<'PY'
import json, sys
ops = json.load(open(sys.argv[1]))
paths = {}
for o in ops:
    paths.setdefault(o["rules"].get("cuda_path", "?"), []).append(o["name"])
print("ops on cuda:", sum(o["rules"]["cuda"] for o in ops), "of", len(ops), {k: len(v) for k, v in paths.items()})
PY
  [[ -n ${TESSERA_GPU_CODEGEN:-} ]] && run test_cuda_codegen 300 "$bin/test_cuda_codegen"
  # TESSERA_GPU_TEST_ARGS: doctest filters, e.g. -tce=conformance to leave out the op suite (over 180 s on an
  # H200 when cold, every kernel compiled by NVRTC).
  run test_cuda_backend 360 "$bin/test_cuda_backend" ${TESSERA_GPU_TEST_ARGS:-}
fi

if want samples; then
  # Every sample project a few steps on the GPU, from the CLI (the big two are timed above). A mesh of several
  # devices becomes [1, 1] on one GPU; the Python projects need a tessera module built for this machine's python3.
  samples=$work/samples
  mkdir -p "$samples" && cp -r "$root/sample_projects/." "$samples/"
  for p in "$samples"/*/; do
    name=$(basename "$p")
    [[ $name == gpt2_124m || $name == vit_base ]] && continue
    extra=()
    grep -qE '^shape = \[[0-9]+, *[0-9]+\]' "$p/project.toml" && extra=(--set 'mesh.shape=[1,1]')
    run "sample_$name" 60 "$bin/tessera" train "$p" --device cuda --steps 10 --set train.log_every=1 \
      --set train.eval_every=0 --quiet --sample 0 --db "$p/gpu_runs.db" "${extra[@]}"
  done
fi

if want ranks; then
  # gpt2_tp's data x tensor parallel mesh on the GPUs against one GPU, 20 steps to 1e-4: 4 virtual devices of one
  # process; with mpirun, one rank per GPU on NCCL, or on fewer GPUs the shared-GPU error and TESSERA_NCCL=off.
  run ranks 300 bash "$root/tests/bench/gpu/ranks_check.sh" "$bin/tessera" 20
fi

if want gemm; then
  # cuBLASLt alone: GPT-2's vocabulary products with the odd dimension 50257 against the same padded to 8 or 64.
  run gemm_padding 90 "$bin/bench_cuda_gemm"
fi

if want resnet; then
  # ResNet-18 with the CIFAR stem (width 64, 11.2M parameters) at batch 256, TF32, SGD with momentum: the
  # convolutions and both their gradients on cuDNN (the kernel paths and cuDNN's engines in the log), against
  # PyTorch (channels-last, cudnn.benchmark, torch.compile). No JAX peer for it yet.
  run resnet_tessera 120 "$bin/bench_cuda_step" --describe --kernels --project "$root/tests/bench/projects/resnet18_cifar" \
    --batch 256 --precision tf32 --steps 10 --warmup 2
  peers && run resnet_pytorch 180 python3 "$root/tests/bench/gpu/torch_gpu_peer.py" resnet --batch 256 --precision tf32
fi

if want gpt2; then
  TESSERA_GEMM_AUTOTUNE_LOG=1 run gpt2_tessera 240 "$bin/bench_cuda_step" --describe --kernels --project "$root/sample_projects/gpt2_124m" --batch 16 --seq 1024 --precision bf16 --steps 10 --warmup 2
  # The same step under autocast ([precision] compute = "bf16"): bf16 activations, as the peers' autocast runs.
  run gpt2_tessera_autocast 240 "$bin/bench_cuda_step" --kernels --project "$root/sample_projects/gpt2_124m" --batch 16 \
    --seq 1024 --precision bf16 --compute bf16 --steps 10 --warmup 2 --peer tessera_autocast
  [[ -n ${TESSERA_GPU_GEMM_AB:-} ]] && TESSERA_GEMM_AUTOTUNE=0 run gpt2_tessera_heuristic 120 "$bin/bench_cuda_step" \
    --project "$root/sample_projects/gpt2_124m" --batch 16 --seq 1024 --precision bf16 --steps 10 --warmup 2 --peer tessera_heuristic
  [[ -n ${TESSERA_GPU_ATTENTION_AB:-} ]] && TESSERA_FUSED_ATTENTION=off run gpt2_tessera_unfused 120 "$bin/bench_cuda_step" \
    --project "$root/sample_projects/gpt2_124m" --batch 16 --seq 1024 --precision bf16 --steps 10 --warmup 2 --peer tessera_unfused
  [[ -n ${TESSERA_GPU_RECOMPUTE_AB:-} ]] && TESSERA_RECOMPUTE=off run gpt2_tessera_norecompute 120 "$bin/bench_cuda_step" \
    --project "$root/sample_projects/gpt2_124m" --batch 16 --seq 1024 --precision bf16 --steps 10 --warmup 2 --peer tessera_norecompute
  [[ -n ${TESSERA_GPU_FLASH_AB:-} ]] && TESSERA_FLASH_KERNELS=v1 run gpt2_tessera_flash_v1 120 "$bin/bench_cuda_step" \
    --project "$root/sample_projects/gpt2_124m" --batch 16 --seq 1024 --precision bf16 --steps 10 --warmup 2 --peer tessera_flash_v1
  if [[ -n ${TESSERA_GPU_GRAPHS_AB:-} ]]; then
    TESSERA_CUDA_GRAPHS=off run gpt2_tessera_nographs 120 "$bin/bench_cuda_step" \
      --project "$root/sample_projects/gpt2_124m" --batch 16 --seq 1024 --precision bf16 --steps 10 --warmup 2 --peer tessera_nographs
    TESSERA_CUDA_LOOP_GROUPS=off run gpt2_tessera_nogroups 120 "$bin/bench_cuda_step" \
      --project "$root/sample_projects/gpt2_124m" --batch 16 --seq 1024 --precision bf16 --steps 10 --warmup 2 --peer tessera_nogroups
    for g in on off; do
      TESSERA_CUDA_GRAPHS=$g run gpt2_mini_graphs_$g 60 "$bin/bench_cuda_step" --describe \
        --project "$root/sample_projects/gpt2_mini" --precision f32 --steps 50 --warmup 3 --peer tessera_graphs_$g
    done
  fi
  # Out of memory or too slow at B=16: B=8, so that there is a figure (its batch is in the JSON).
  if ! grep -q '"tokens_per_s"' "$logs/gpt2_tessera.log"; then
    run gpt2_tessera_b8 120 "$bin/bench_cuda_step" --project "$root/sample_projects/gpt2_124m" --batch 8 --seq 1024 --precision bf16 --steps 5 --warmup 1
  fi
  peers && run gpt2_pytorch 240 python3 "$root/tests/bench/gpu/torch_gpu_peer.py" gpt2 --batch 16 --seq 1024 --precision bf16
  peers && run gpt2_jax 180 python3 "$root/tests/bench/gpu/jax_gpu_peer.py" gpt2 --batch 16 --seq 1024 --precision bf16
fi

if want vit; then
  TESSERA_GEMM_AUTOTUNE_LOG=1 run vit_tessera 180 "$bin/bench_cuda_step" --kernels --project "$root/sample_projects/vit_base" --batch 32 --precision tf32 --steps 10 --warmup 2
  [[ -n ${TESSERA_GPU_GEMM_AB:-} ]] && TESSERA_GEMM_AUTOTUNE=0 run vit_tessera_heuristic 120 "$bin/bench_cuda_step" \
    --project "$root/sample_projects/vit_base" --batch 32 --precision tf32 --steps 10 --warmup 2 --peer tessera_heuristic
  [[ -n ${TESSERA_GPU_RECOMPUTE_AB:-} ]] && TESSERA_RECOMPUTE=off run vit_tessera_norecompute 120 "$bin/bench_cuda_step" \
    --project "$root/sample_projects/vit_base" --batch 32 --precision tf32 --steps 10 --warmup 2 --peer tessera_norecompute
  peers && run vit_pytorch 240 python3 "$root/tests/bench/gpu/torch_gpu_peer.py" vit --batch 32 --precision tf32
  peers && run vit_jax 180 python3 "$root/tests/bench/gpu/jax_gpu_peer.py" vit --batch 32 --precision tf32
fi

if want attention; then
  # gpt2_mini, 200 bf16 steps on the GPU with attention fused (flash attention on tensor cores) and unfused
  # (dot_general + softmax on cuBLASLt and generated kernels): both round products to bf16, differently.
  att=$work/attention
  mkdir -p "$att" && cp -r "$root/sample_projects/gpt2_mini" "$att/"
  common=(train "$att/gpt2_mini" --steps 200 --set train.log_every=1 --set train.eval_every=0
          --set train.checkpoint_every=0 --quiet --sample 0 --device cuda --matmul-precision bf16)
  TESSERA_FUSED_ATTENTION=on run attention_fused 120 "$bin/tessera" "${common[@]}" --db "$att/fused.db"
  TESSERA_FUSED_ATTENTION=off run attention_unfused 120 "$bin/tessera" "${common[@]}" --db "$att/unfused.db"
  "$bin/tessera" runs --db "$att/fused.db" export --out "$att/fused.csv" >/dev/null 2>&1
  "$bin/tessera" runs --db "$att/unfused.db" export --out "$att/unfused.csv" >/dev/null 2>&1
  PYTHONPATH="$root/tests/bench/gpu" python3 - "$att/fused.csv" "$att/unfused.csv" <<'PY' | tee -a "$results"
import json, sys
from gpu_common import losses
fused, unfused = losses(sys.argv[1]), losses(sys.argv[2])
steps = sorted(set(fused) & set(unfused))
rel = {s: abs(fused[s] - unfused[s]) / max(abs(unfused[s]), 1e-12) for s in steps}
print(json.dumps({"check": "gpt2_mini_bf16_fused_attention", "steps_compared": len(steps),
                  "max_rel_diff_first_20": max((rel[s] for s in steps if s <= 20), default=None),
                  "max_rel_diff": max(rel.values(), default=None),
                  "first": [fused.get(1), unfused.get(1)], "last": [fused.get(200), unfused.get(200)]}))
PY
fi

if want curve; then
  # The same 200 f32 steps on the CPU and on the GPU; every step's loss compared.
  curve=$work/curve
  mkdir -p "$curve" && cp -r "$root/sample_projects/gpt2_mini" "$curve/"
  common=(train "$curve/gpt2_mini" --steps 200 --set train.log_every=1 --set train.eval_every=0
          --set train.checkpoint_every=0 --quiet --sample 0)
  run curve_cpu 90 "$bin/tessera" "${common[@]}" --db "$curve/cpu.db"
  run curve_cuda 120 "$bin/tessera" "${common[@]}" --db "$curve/cuda.db" --device cuda --matmul-precision f32
  # How far summation order alone moves the curve: the CPU on one thread against the CPU on all.
  [[ ${TESSERA_GPU_CURVE_CPU1:-1} != 0 ]] &&
    TESSERA_NUM_THREADS=1 TESSERA_GEMM_THREADS=1 run curve_cpu1 120 "$bin/tessera" "${common[@]}" --db "$curve/cpu1.db"
  "$bin/tessera" runs --db "$curve/cpu1.db" export --out "$curve/cpu1.csv" >/dev/null 2>&1
  "$bin/tessera" runs --db "$curve/cpu.db" export --out "$curve/cpu.csv" >/dev/null 2>&1
  "$bin/tessera" runs --db "$curve/cuda.db" export --out "$curve/cuda.csv" >/dev/null 2>&1
  PYTHONPATH="$root/tests/bench/gpu" python3 - "$curve/cpu.csv" "$curve/cuda.csv" "$curve/cpu1.csv" <<'PY' | tee -a "$results"
import json, sys
from gpu_common import losses
cpu, gpu, cpu1 = losses(sys.argv[1]), losses(sys.argv[2]), losses(sys.argv[3])
steps = sorted(set(cpu) & set(gpu))
rel = [abs(gpu[s] - cpu[s]) / max(abs(cpu[s]), 1e-12) for s in steps]
rel1 = [abs(cpu1[s] - cpu[s]) / max(abs(cpu[s]), 1e-12) for s in sorted(set(cpu) & set(cpu1))]
worst = max(range(len(steps)), key=lambda i: rel[i]) if steps else None
print(json.dumps({"check": "gpt2_mini_loss_curve", "steps_cpu": len(cpu), "steps_cuda": len(gpu), "steps_compared": len(steps),
                  "max_rel_diff": max(rel) if rel else None, "worst_step": steps[worst] if steps else None,
                  "first": [cpu.get(1), gpu.get(1)], "last": [cpu.get(200), gpu.get(200)],
                  "cpu_1_thread_max_rel_diff": max(rel1) if rel1 else None,
                  "pass": bool(steps) and len(steps) == 200 and max(rel) <= 1e-4}))
PY
fi

if want autocast; then
  # gpt2_mini, 200 steps with [precision] compute = "bf16" (autocast) on the CPU and on the GPU, and the f32 run on
  # the CPU: bf16 rounding on both sides, so the check is how close, not equality.
  ac=$work/autocast
  mkdir -p "$ac" && cp -r "$root/sample_projects/gpt2_mini" "$ac/"
  common=(train "$ac/gpt2_mini" --steps 200 --set train.log_every=1 --set train.eval_every=0
          --set train.checkpoint_every=0 --quiet --sample 0)
  run autocast_cpu 120 "$bin/tessera" "${common[@]}" --set precision.compute=bf16 --db "$ac/cpu.db"
  run autocast_cuda 120 "$bin/tessera" "${common[@]}" --set precision.compute=bf16 --db "$ac/cuda.db" --device cuda
  run autocast_cpu_f32 90 "$bin/tessera" "${common[@]}" --db "$ac/f32.db"
  for n in cpu cuda f32; do "$bin/tessera" runs --db "$ac/$n.db" export --out "$ac/$n.csv" >/dev/null 2>&1; done
  PYTHONPATH="$root/tests/bench/gpu" python3 - "$ac/cpu.csv" "$ac/cuda.csv" "$ac/f32.csv" <<'PY' | tee -a "$results"
import json, sys
from gpu_common import losses
cpu, gpu, f32 = (losses(p) for p in sys.argv[1:4])
def worst(a, b):
    steps = sorted(set(a) & set(b))
    return max((abs(a[s] - b[s]) / max(abs(b[s]), 1e-12) for s in steps), default=None), len(steps)
gc, n = worst(gpu, cpu)
cf, _ = worst(cpu, f32)
print(json.dumps({"check": "gpt2_mini_autocast", "steps_compared": n, "max_rel_diff_cuda_vs_cpu": gc,
                  "max_rel_diff_cpu_bf16_vs_f32": cf, "last": [cpu.get(200), gpu.get(200), f32.get(200)],
                  "pass": n == 200 and gc is not None and gc <= 1e-2}))
PY
fi

if want profile; then
  # A profiled GPU step of gpt2_mini into a run store that comes back: the IDE's timeline opens it.
  prof=$work/profile
  mkdir -p "$prof" && cp -r "$root/sample_projects/gpt2_mini" "$prof/"
  TESSERA_DEVICE=cuda run profile_cuda 60 "$bin/tessera" profile "$prof/gpt2_mini" --steps 3 --warmup 1 --db "$out/gpu_profile.db" --top 25
fi

# The side-by-side table: per workload each peer's step time and tessera's throughput relative to each peer.
python3 - "$results" <<'PY' | tee "$out/summary.json"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
summary = {}
for r in rows:
    if "error" in r or "skipped" in r:
        summary.setdefault("errors", []).append(r)
        continue
    if "check" in r:
        summary[r["check"]] = r
        continue
    if "products" in r:  # bench_cuda_gemm
        summary["gemm_products"] = {p["name"]: p.get("best_ms", p.get("ms")) for p in r["products"]}
        continue
    key = "tokens_per_s" if "tokens_per_s" in r else "samples_per_s"
    w = summary.setdefault(r["workload"], {"unit": key})
    w[r["peer"]] = {"step_ms": round(r["step_ms_median"], 2), key: round(r[key], 1), "version": r.get("version")}
    for extra in ("mfu", "batch", "device", "compile_s"):
        if extra in r:
            w[r["peer"]][extra] = r[extra]
# MFU against the dense bf16 peak of an H100/H200 SXM (989 TFLOP/s, the datasheet's): GPT-2's step is
# 6 N + 12 L C T FLOPs per token (PaLM's count: parameters and attention, forward and backward).
for name, w in summary.items():
    if name == "gpt2":
        for peer, r in w.items():
            if isinstance(r, dict) and "tokens_per_s" in r:
                r["mfu_bf16"] = round(r["tokens_per_s"] * (6 * 124439808 + 12 * 12 * 768 * 1024) / 989.4e12, 4)
for name, w in summary.items():
    if name == "errors" or "tessera" not in w or not isinstance(w, dict) or "unit" not in w:
        continue
    key = w["unit"]
    for peer in ("pytorch", "jax", "tessera_heuristic", "tessera_unfused", "tessera_norecompute", "tessera_flash_v1"):
        if peer in w:
            w["tessera_vs_" + peer] = round(w["tessera"][key] / w[peer][key], 3)
print(json.dumps(summary, indent=1))
PY
tar -C "$work" -czf "$out/logs.tar.gz" logs $(cd "$work" && ls curve/*.csv 2>/dev/null)
echo "== results in $out: $(ls "$out" | tr '\n' ' ')"
