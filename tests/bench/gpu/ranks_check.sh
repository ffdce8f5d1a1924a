#!/usr/bin/env bash
# gpt2_tp (2-way data x 2-way tensor parallel) on GPUs against one GPU: the losses of 20 steps must equal the
# one-device run's to 1e-4 relative. What runs depends on the machine:
#   - always: the per-device programs on the GPU for 4 virtual devices of one process (TESSERA_CPU_DEVICES=4,
#     all on the GPUs of this process, collectives on the host);
#   - with mpirun and 4 GPUs or more: `mpirun -np 4 tessera train --device cuda`, one GPU per rank, collectives
#     on NCCL (NCCL_DEBUG=VERSION shows that NCCL started); with 2 or 3 GPUs the same on 2 ranks with the mesh
#     [1, 2] (tensor parallel alone);
#   - with mpirun and fewer GPUs than 4 ranks: the clear error NCCL's check gives (two ranks on one GPU), and the
#     same run with TESSERA_NCCL=off (collectives on the host through MPI, ranks sharing GPUs) against one GPU.
# Prints one JSON line per check ({"workload": "ranks_...", "ok": true|false, ...}); exits 1 if any failed.
# Usage: ranks_check.sh TESSERA [STEPS]   (MPIRUN=... names mpirun; DEVICE=cpu and GPUS=N run the same on the CPU
# as if there were N GPUs, to check the script where there is no GPU)
set -uo pipefail
tessera=$1
steps=${2:-20}
root=$(cd "$(dirname "$0")/../../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$root/sample_projects/gpt2_tp" "$root/sample_projects/gpt2_mini" "$work/"  # gpt2_tp reads gpt2_mini's corpus
mpirun=${MPIRUN:-$(command -v mpirun || true)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
gpus=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
gpus=${gpus:-0}
failed=0
common=(--device "${DEVICE:-cuda}" --steps "$steps" --set train.log_every=1 --set train.eval_every=0 --set train.checkpoint_every=0
        --quiet --sample 0)

losses() { "$tessera" runs --db "$1" export 1 --csv | awk -F, '$3 == "loss" { print $4 }'; }

train() {  # train NAME [ENV=VALUE...] -- [LAUNCHER...] -- [ARGS...]: the run's log in $work/NAME.log
  local name=$1
  shift
  local envs=() launcher=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  while [[ $1 != -- ]]; do launcher+=("$1"); shift; done
  shift
  env "${envs[@]}" "${launcher[@]}" "$tessera" train "$work/gpt2_tp" "${common[@]}" --db "$work/$name.db" "$@" \
    >"$work/$name.log" 2>&1
}

compare() {  # compare NAME: the losses of $work/NAME.db against the one-GPU run's
  local name=$1
  losses "$work/$name.db" >"$work/$name.losses" 2>/dev/null
  local verdict
  verdict=$(paste "$work/one.losses" "$work/$name.losses" | awk -v n="$steps" '
      { k++; d = $1 - $2; if (d < 0) d = -d; a = $1 < 0 ? -$1 : $1; r = a > 0 ? d / a : d; if (r > worst) worst = r
        if (r > 1e-4) bad++ }
      END { if (k != n) bad++; printf "%d %d %.3g", bad + 0, k + 0, worst }')
  read -r bad count worst <<<"$verdict"
  local ok=true
  ((bad > 0)) && ok=false && failed=1
  echo "{\"workload\":\"ranks_$name\",\"ok\":$ok,\"steps\":$count,\"max_rel_diff\":$worst,\"gpus\":$gpus}"
  if [[ $ok != true ]]; then
    echo "$name: losses differ from one GPU's (or are missing); one GPU | $name:"
    paste "$work/one.losses" "$work/$name.losses"
    tail -20 "$work/$name.log"
  fi
}

echo "GPUs: $gpus; mpirun: ${mpirun:-none}"
train one -- -- --set 'mesh.shape=[1,1]' || { cat "$work/one.log"; echo '{"workload":"ranks_one","ok":false}'; exit 1; }
losses "$work/one.db" >"$work/one.losses"
echo "one GPU: $(head -1 "$work/one.losses") at step 1, $(tail -1 "$work/one.losses") at step $steps"

train virtual TESSERA_CPU_DEVICES=4 -- -- || true
compare virtual

if [[ -z $mpirun ]]; then
  echo '{"workload":"ranks_mpirun","skipped":"no mpirun on this machine"}'
  exit $failed
fi
if ((gpus >= 2)); then
  ranks=4 mesh='[2,2]'
  ((gpus < 4)) && ranks=2 mesh='[1,2]'
  train nccl NCCL_DEBUG=VERSION -- "$mpirun" -np "$ranks" --oversubscribe -- --set "mesh.shape=$mesh" || true
  grep -m1 'NCCL version' "$work/nccl.log" || { echo "NCCL did not start:"; tail -20 "$work/nccl.log"; failed=1; }
  compare nccl
fi
if ((gpus < 4)); then
  # 4 ranks on fewer GPUs: NCCL refuses two ranks on one GPU, and says what to do.
  if train shared -- "$mpirun" -np 4 --oversubscribe -- ; then
    echo '{"workload":"ranks_shared_gpu_error","ok":false,"why":"4 ranks on fewer GPUs trained"}'
    failed=1
  elif grep -q 'both run on GPU' "$work/shared.log"; then
    echo '{"workload":"ranks_shared_gpu_error","ok":true}'
    grep -m1 'both run on GPU' "$work/shared.log"
  else
    echo '{"workload":"ranks_shared_gpu_error","ok":false,"why":"another error"}'
    tail -20 "$work/shared.log"
    failed=1
  fi
  train host TESSERA_NCCL=off -- "$mpirun" -np 4 --oversubscribe -- || true
  compare host
fi
exit $failed
