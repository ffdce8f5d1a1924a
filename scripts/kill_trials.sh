#!/usr/bin/env bash
# Fault trials for training runs: `tessera train` is killed at random steps, then the work it leaves is checked.
#
#   scripts/kill_trials.sh [--trials N] [--reads R] [--tessera BIN] [--model mlp|gpt2] [--seed S] [--keep]
#
# Each trial trains a fresh copy of a tiny project (checkpoint_every = 1), stops it at a random step, and checks:
#   - SIGKILL: the process dies by the signal; SIGINT: it checkpoints, says "stopped at step", exits 130;
#   - the checkpoint loads (`tessera eval` on it);
#   - `PRAGMA integrity_check` of runs.db is "ok";
#   - `tessera train --resume` finishes the run, and its losses, learning rates, gradient norms and validation
#     losses are bit-identical (compared as doubles by SQLite) to those of an uninterrupted run, and so is the
#     final checkpoint (byte for byte).
# N trials of each signal (default 20). Then a reader polls the store (`tessera runs list`, `runs show 1`; R reads,
# default 10 N) while a run writes: every read succeeds, none says "database is locked", and no read sees a torn
# run (a run without its hyperparameters, or a step whose metrics are only partly there).
# Needs the sqlite3 command-line shell (Debian: sqlite3). Exits non-zero at the first failed check.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

TRIALS=20
READS=
TESSERA=$ROOT/build/app/cli/tessera
MODEL=mlp
SEED=$$
KEEP=0
while (($#)); do
  case "$1" in
    --trials) TRIALS=$2; shift 2 ;;
    --reads) READS=$2; shift 2 ;;
    --tessera) TESSERA=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "kill_trials: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x "$TESSERA" ]] || { echo "kill_trials: no tessera at $TESSERA (build it, or pass --tessera)" >&2; exit 2; }
command -v sqlite3 >/dev/null || { echo "kill_trials: needs the sqlite3 shell (apt-get install sqlite3); skipped" >&2; exit 77; }
READS=${READS:-$((TRIALS * 10))}
RANDOM=$SEED
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tessera_kill_trials.XXXXXX")
cleanup() { if ((KEEP)); then echo "kill_trials: work left in $WORK"; else rm -rf "$WORK"; fi; }
trap cleanup EXIT
# Plugins play no part here; keep the search to the bundled ones.
export TESSERA_PLUGIN_PATH=
export XDG_CONFIG_HOME=$WORK/config
export TESSERA_NUM_THREADS=1

STEPS=60
fail() { echo "kill_trials: FAILED: $*" >&2; exit 1; }

# A tiny project in $1 with $2 steps.
make_project() {
  mkdir -p "$1"
  if [[ $MODEL == gpt2 ]]; then
    mkdir -p "$1/data"
    head -c 20000 "$ROOT/sample_projects/gpt2_mini/data/corpus.txt" > "$1/data/corpus.txt"
    cat > "$1/project.toml" <<EOF
[model]
family = "gpt2"
block_size = 16
n_layer = 1
n_head = 2
n_embd = 16
dropout = 0.1
[data]
kind = "text"
path = "data/corpus.txt"
vocab_size = 300
[train]
steps = $2
batch_size = 4
seq_len = 16
lr = 1e-2
warmup_steps = 3
eval_every = 10
eval_steps = 2
log_every = 1
checkpoint_every = 1
seed = 5
EOF
  else
    cat > "$1/project.toml" <<EOF
[model]
family = "mlp"
sizes = [16, 32, 4]
[data]
kind = "synthetic-digits"
[train]
steps = $2
batch_size = 8
optimizer = "adamw"
lr = 1e-2
warmup_steps = 2
eval_every = 10
eval_steps = 2
log_every = 1
checkpoint_every = 1
seed = 3
EOF
  fi
}

# The deterministic metrics of run 1 in $1/runs.db that differ from (or are missing in) $2/runs.db.
metric_differences() {
  sqlite3 "$1/runs.db" "ATTACH '$2/runs.db' AS ref;
    SELECT count(*) FROM ref.metrics b LEFT JOIN main.metrics a ON a.run = b.run AND a.key = b.key AND a.step = b.step
    WHERE b.key IN ('loss', 'lr', 'grad_norm', 'val_loss') AND (a.value IS NULL OR a.value <> b.value);"
}

check_store() {
  local check
  check=$(sqlite3 "$1/runs.db" "PRAGMA integrity_check;") || fail "$2: sqlite3 cannot read $1/runs.db"
  [[ $check == ok ]] || fail "$2: PRAGMA integrity_check of $1/runs.db: $check"
}

# Waits until the log $1 shows step $2 (or the process $3 ends).
wait_for_step() {
  local i
  for ((i = 0; i < 6000; ++i)); do
    grep -qE "^step +$2/" "$1" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.01
  done
  return 1
}

echo "kill_trials: $TRIALS trials per signal, model $MODEL, $STEPS steps, seed $SEED, in $WORK"
make_project "$WORK/ref" $STEPS
"$TESSERA" train "$WORK/ref" --sample 0 --quiet > "$WORK/ref/log" 2>&1 || { cat "$WORK/ref/log"; fail "the uninterrupted run failed"; }
losses=$(sqlite3 "$WORK/ref/runs.db" "SELECT count(*) FROM metrics WHERE key = 'loss'")
[[ $losses == "$STEPS" ]] || fail "the uninterrupted run logged $losses losses, not $STEPS"

# Trains a fresh project in $2 and sends signal $1 at a random step: 0 once it landed, 1 when the run
# finished first (a busy machine can let it outrun the signal).
signal_run() {
  local sig=$1 d=$2 stop pid
  rm -rf "$d"
  make_project "$d" $STEPS
  stop=$((2 + RANDOM % (STEPS / 2)))
  "$TESSERA" train "$d" --sample 0 > "$d/log" 2>&1 &
  pid=$!
  wait_for_step "$d/log" $stop $pid || { wait $pid 2>/dev/null || true; return 1; }
  # Somewhere inside the next steps: the signal lands mid-step, mid-checkpoint or mid-metrics.
  sleep "0.00$((RANDOM % 10))"
  kill -s "$sig" $pid 2>/dev/null || { wait $pid 2>/dev/null || true; return 1; }
  rc=0; wait $pid 2>/dev/null || rc=$?
  at=$(grep -oE "^step +[0-9]+" "$d/log" | tail -1 | grep -oE "[0-9]+")
  [[ $at -lt $STEPS ]] || return 1
}

trial() {  # $1: KILL or INT, $2: trial number
  local sig=$1 d="$WORK/$1_$2" tries=0
  rc=0 at=0
  until signal_run "$sig" "$d"; do
    ((++tries < 5)) || { cat "$d/log"; fail "$sig trial $2: the run finished before the signal, 5 times"; }
  done
  if [[ $sig == KILL ]]; then
    [[ $rc == 137 ]] || { cat "$d/log"; fail "$sig trial $2: exit code $rc, not 137 (killed)"; }
  else
    [[ $rc == 130 ]] || { cat "$d/log"; fail "$sig trial $2: exit code $rc, not 130"; }
    grep -q "stopped at step" "$d/log" || { cat "$d/log"; fail "$sig trial $2: no 'stopped at step' line"; }
  fi
  check_store "$d" "$sig trial $2"
  [[ -f "$d/checkpoints/run-1/latest.safetensors" ]] || fail "$sig trial $2: no checkpoint after step $at"
  "$TESSERA" eval "$d" --checkpoint "$d/checkpoints/run-1/latest.safetensors" > "$d/eval.log" 2>&1 ||
    { cat "$d/eval.log"; fail "$sig trial $2: the checkpoint does not load"; }
  local ck
  "$TESSERA" train "$d" --resume --sample 0 --quiet > "$d/resume.log" 2>&1 ||
    { cat "$d/resume.log"; fail "$sig trial $2: the resume failed"; }
  ck=$(grep -oE "resumed run 1 at step [0-9]+" "$d/resume.log" | grep -oE "[0-9]+$" || echo "?")
  check_store "$d" "$sig trial $2 (resumed)"
  local diff
  diff=$(metric_differences "$d" "$WORK/ref")
  [[ $diff == 0 ]] || fail "$sig trial $2: $diff metrics differ from the uninterrupted run's (stopped at step $at, resumed at $ck)"
  cmp -s "$d/checkpoints/run-1/latest.safetensors" "$WORK/ref/checkpoints/run-1/latest.safetensors" ||
    fail "$sig trial $2: the final checkpoint differs from the uninterrupted run's"
  local status
  status=$(sqlite3 "$d/runs.db" "SELECT status FROM runs WHERE id = 1")
  echo "  $sig trial $2: stopped at step $at, checkpoint at step $ck, resumed: $STEPS losses bit-identical, store ok ($status)"
  ((KEEP)) || rm -rf "$d"
}

for ((n = 1; n <= TRIALS; ++n)); do trial KILL $n; done
for ((n = 1; n <= TRIALS; ++n)); do trial INT $n; done

# A reader polls the store while a run writes, then the run is stopped (SIGINT).
r="$WORK/reader"
make_project "$r" 1000000
"$TESSERA" train "$r" --sample 0 --quiet > "$r/log" 2>&1 &
pid=$!
reads=0
while ((reads < READS)); do
  kill -0 $pid 2>/dev/null || { cat "$r/log"; fail "reader: the run being read ended"; }
  [[ -f "$r/runs.db" ]] || { sleep 0.01; continue; }
  out=$("$TESSERA" runs --project "$r" list 2>&1) || fail "reader: runs list failed: $out"
  [[ $out != *locked* ]] || fail "reader: runs list: $out"
  if [[ $out == *" 1  "* ]]; then
    show=$("$TESSERA" runs --project "$r" show 1 2>&1) || fail "reader: runs show 1 failed: $show"
    [[ $show != *locked* ]] || fail "reader: runs show: $show"
    # A run is created with its hyperparameters.
    params=$(awk '/^params$/ {p = 1; next} /^$/ {p = 0} p' <<< "$show" | wc -l)
    ((params > 0)) || fail "reader: run 1 without hyperparameters: $show"
    # One step's metrics are written together: the latest loss, lr and grad_norm are of one step.
    steps=$(awk '$1 == "loss" || $1 == "lr" || $1 == "grad_norm" {print $2}' <<< "$show" | sort -u | wc -l)
    ((steps <= 1)) || fail "reader: a torn step: $show"
  fi
  reads=$((reads + 1))
done
kill -s INT $pid
rc=0; wait $pid || rc=$?
[[ $rc == 130 ]] || { cat "$r/log"; fail "reader: the run being read exited with $rc, not 130"; }
check_store "$r" "reader"
echo "  reader: $reads reads (runs list, runs show) while the run wrote, none locked or torn"
echo "kill_trials: all $TRIALS SIGKILL and $TRIALS SIGINT trials passed, and the reader's"
