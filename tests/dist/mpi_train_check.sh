#!/bin/sh
# tessera train across processes: a tiny MLP project trained by `mpiexec -n 2` (one device per rank, the mesh
# spanning both) logs the same losses, to 1e-5 relative, as one process with TESSERA_CPU_DEVICES=2. Two layouts:
# data parallel (each rank trains on its half of every batch) and tensor parallel (layer 1 column-parallel, layer 2
# row-parallel across the ranks). The tensor-parallel run also stops after 2 steps and resumes from its checkpoint
# (written by rank 0 from the gathered shards) to 4: the resumed losses equal the uninterrupted run's.
# Only rank 0 writes: one run in the store, one checkpoint.
# Usage: mpi_train_check.sh TESSERA MPIEXEC [MPIEXEC FLAGS...]
set -eu
tessera=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

project() {  # project DIR MESH_SHAPE MESH_AXES SHARDING_LINES
  mkdir -p "$1"
  cat >"$1/project.toml" <<EOF
[project]
name = "mpi_tiny"
[model]
family = "mlp"
sizes = [16, 32, 32, 4]
[data]
kind = "synthetic-digits"
[train]
steps = 4
batch_size = 32
optimizer = "adamw"
lr = 1e-2
loss = "mse"
warmup_steps = 0
grad_clip = 0.0
eval_every = 0
log_every = 1
seed = 3
[mesh]
shape = $2
axes = $3
[sharding]
$4
EOF
}

# The losses of run 1 in a store, one per line.
losses() { "$tessera" runs --db "$1" export 1 --csv | awk -F, '$3 == "loss" { print $4 }'; }

compare() {  # compare WHAT FILE_A FILE_B
  if ! paste "$2" "$3" | awk -v what="$1" '
      { n++; d = $1 - $2; if (d < 0) d = -d; a = $1 < 0 ? -$1 : $1
        if (d > 1e-5 * a) { printf "%s: step %d: one process %s, two ranks %s\n", what, n, $1, $2; bad = 1 } }
      END { if (n != 4) { printf "%s: %d losses, expected 4\n", what, n; bad = 1 }; exit bad }'; then
    echo "one process:"; cat "$2"; echo "two ranks:"; cat "$3"
    exit 1
  fi
  echo "$1: the losses of 2 MPI ranks equal one process's:"
  paste "$2" "$3"
}

check() {  # check NAME MESH_SHAPE MESH_AXES SHARDING_LINES
  project "$work/$1_one" "$2" "$3" "$4"
  project "$work/$1_mpi" "$2" "$3" "$4"
  TESSERA_CPU_DEVICES=2 "$tessera" train "$work/$1_one" --quiet >"$work/$1_one.log" 2>&1 || {
    cat "$work/$1_one.log"; exit 1; }
  $mpiexec "$tessera" train "$work/$1_mpi" --steps 4 --stop-at 2 --quiet >"$work/$1_mpi.log" 2>&1 || {
    cat "$work/$1_mpi.log"; exit 1; }
  $mpiexec "$tessera" train "$work/$1_mpi" --steps 4 --resume --quiet >>"$work/$1_mpi.log" 2>&1 || {
    cat "$work/$1_mpi.log"; exit 1; }
  cat "$work/$1_mpi.log"
  losses "$work/$1_one/runs.db" >"$work/$1_one.losses"
  losses "$work/$1_mpi/runs.db" >"$work/$1_mpi.losses"
  compare "$1" "$work/$1_one.losses" "$work/$1_mpi.losses"
  runs=$("$tessera" runs --db "$work/$1_mpi/runs.db" list | grep -c '^ *[0-9][0-9]*  ')
  [ "$runs" -eq 1 ] || { echo "$1: $runs runs in the store, expected 1 (only rank 0 writes)"; exit 1; }
  [ "$(ls "$work/$1_mpi/checkpoints")" = "run-1" ] && [ "$(ls "$work/$1_mpi/checkpoints/run-1" | tr '\n' ' ')" = "latest.safetensors owner.txt " ] ||
    { echo "$1: checkpoints:"; ls -R "$work/$1_mpi/checkpoints"; exit 1; }
}

mpiexec="$*"
check data_parallel "[2]" '["data"]' ''
check tensor_parallel "[1, 2]" '["data", "model"]' "'layers\\.0\\.weight' = \"None, model\"
'layers\\.0\\.bias' = \"model\"
'layers\\.1\\.weight' = \"model, None\""
echo "mpi_train: ok"
