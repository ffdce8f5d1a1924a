#!/usr/bin/env bash
# On a GPU machine, in one command: the CUDA backend's tests, then GPT-2 124M (B=16, T=1024, bf16, AdamW) and
# ViT-B/16 (batch 32, f32 with TF32 matmuls) training steps of Tessera, PyTorch (torch.compile, bf16 autocast,
# SDPA) and JAX side by side, printing one JSON line per run and a summary with the ratios.
# Needs .gpukit/tessera-gpukit.tar.xz (scripts/gpu_kit.sh, run where the Debian dev packages are).
#
#   bash tests/bench/gpu/run_all.sh [all|tests|gpt2|vit]      (results also under $OUT when set)
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
what=${1:-all}
out=${OUT:-/tmp/tessera-gpu-results}
mkdir -p "$out"
work=/tmp/tessera-gpukit
rm -rf "$work" && mkdir -p "$work"
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
bin=$work/bin
results=$out/results.jsonl
: >"$results"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2
missing=$(ldd "$bin/tessera" "$bin/test_cuda_backend" | grep "not found" | sort -u)
[[ -n $missing ]] && echo "missing libraries: $missing" >&2

run() {  # run NAME TIMEOUT COMMAND...: output to $out/NAME.log, JSON lines to results.jsonl (a test: rc 77 = skipped)
  local name=$1 limit=$2
  shift 2
  echo "== $name"
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  grep -E '^\{' "$out/$name.log" >>"$results" || true
  grep -E 'ERROR|FATAL|SKIP|MESSAGE|test cases:|assertions:|error|Error' "$out/$name.log" | tail -25
  echo "   rc=$rc, $((SECONDS - t0)) s"
  [[ $rc -ne 0 ]] && tail -5 "$out/$name.log"
  return 0
}

if [[ $what == all || $what == tests ]]; then
  "$bin/tessera" ops --json >"$out/ops.json" 2>&1
  python3 - "$out/ops.json" <<'PY'
import json, sys
ops = json.load(open(sys.argv[1]))
paths = {}
for o in ops:
    paths.setdefault(o["rules"].get("cuda_path", "?"), []).append(o["name"])
print("ops on cuda:", sum(o["rules"]["cuda"] for o in ops), "of", len(ops), {k: len(v) for k, v in paths.items()})
PY
  run test_cuda_codegen 300 "$bin/test_cuda_codegen"
  run test_cuda_backend 420 "$bin/test_cuda_backend"
fi
if [[ $what == all || $what == gpt2 ]]; then
  run gpt2_tessera 240 "$bin/bench_cuda_step" --project "$root/sample_projects/gpt2_124m" --batch 16 --seq 1024 --precision bf16 --steps 10 --warmup 2
  # Out of memory or too slow at B=16: B=8, so that there is a figure (its batch is in the JSON).
  if ! grep -q '"tokens_per_s"' "$out/gpt2_tessera.log"; then
    run gpt2_tessera_b8 240 "$bin/bench_cuda_step" --project "$root/sample_projects/gpt2_124m" --batch 8 --seq 1024 --precision bf16 --steps 5 --warmup 1
  fi
  run gpt2_pytorch 300 python3 "$root/tests/bench/gpu/torch_gpu_peer.py" gpt2 --batch 16 --seq 1024 --precision bf16
  run gpt2_jax 240 python3 "$root/tests/bench/gpu/jax_gpu_peer.py" gpt2 --batch 16 --seq 1024 --precision bf16
fi
if [[ $what == all || $what == vit ]]; then
  run vit_tessera 240 "$bin/bench_cuda_step" --project "$root/sample_projects/vit_base" --batch 32 --precision tf32 --steps 10 --warmup 2
  run vit_pytorch 300 python3 "$root/tests/bench/gpu/torch_gpu_peer.py" vit --batch 32 --precision tf32
  run vit_jax 240 python3 "$root/tests/bench/gpu/jax_gpu_peer.py" vit --batch 32 --precision tf32
fi

# The side-by-side table: per workload each peer's step time and tessera's throughput relative to each peer.
python3 - "$results" <<'PY' | tee "$out/summary.json"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
summary = {}
for r in rows:
    if "error" in r:
        summary.setdefault("errors", []).append(r)
        continue
    key = "tokens_per_s" if "tokens_per_s" in r else "samples_per_s"
    w = summary.setdefault(r["workload"], {"unit": key})
    w[r["peer"]] = {"step_ms": round(r["step_ms_median"], 2), key: round(r[key], 1), "version": r.get("version")}
for name, w in summary.items():
    if name == "errors" or "tessera" not in w:
        continue
    key = w["unit"]
    for peer in ("pytorch", "jax"):
        if peer in w:
            w["tessera_vs_" + peer] = round(w["tessera"][key] / w[peer][key], 3)
print(json.dumps(summary, indent=1))
PY
