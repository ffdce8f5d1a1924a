#!/bin/sh
# One process trains a run at a time under mpirun too. A job of 2 ranks resuming a run that another process trains
# is refused at every rank before anything is built: rank 0 is refused the run's lease and the other rank says so
# (it went on to wait for rank 0 in its first collective, and the job never ended). A job that trains a run holds
# its lease (rank 0 does): `tessera train --resume` and `runs delete` of the run are refused.
# Usage: mpi_lease_check.sh TESSERA MPIEXEC [MPIEXEC FLAGS...]
set -eu
tessera=$1
shift
mpiexec="$*"
work=$(mktemp -d)
trainer=
cleanup() {
  # mpirun ends its ranks on SIGTERM
  if [ -n "$trainer" ]; then kill -TERM "$trainer" 2>/dev/null && wait "$trainer" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

mkdir "$work/p"
cat >"$work/p/project.toml" <<EOF
[model]
family = "mlp"
sizes = [16, 32, 4]
[data]
kind = "synthetic-digits"
[train]
steps = 3
batch_size = 8
eval_every = 0
[mesh]
shape = [2]
axes = ["data"]
EOF
export TESSERA_CPU_DEVICES=2  # one process trains the [2] mesh on 2 virtual devices; under mpirun one per rank
"$tessera" train "$work/p" --quiet --steps 2 >"$work/first.log" 2>&1 || { cat "$work/first.log"; exit 1; }

until_running() {  # until_running LOG: polls runs list until run 1 is listed running
  polls=0
  until "$tessera" runs --project "$work/p" list | grep -q running; do
    polls=$((polls + 1))
    if [ "$polls" -ge 600 ]; then echo "run 1 was never listed running:"; cat "$1"; exit 1; fi
    sleep 0.2
  done
}

expect() {  # expect LOG TEXT: LOG holds TEXT
  grep -qF "$2" "$1" || { echo "expected '$2' in:"; cat "$1"; exit 1; }
}

# A process trains run 1: a job is refused at both ranks (the test's timeout catches the job that never ends).
"$tessera" train "$work/p" --quiet --resume 1 --steps 100000000 >"$work/local.log" 2>&1 &
trainer=$!
until_running "$work/local.log"
if $mpiexec "$tessera" train "$work/p" --quiet --resume 1 --steps 100000000 >"$work/second.log" 2>&1; then
  echo "a second job trained run 1:"; cat "$work/second.log"; exit 1
fi
expect "$work/second.log" "is being trained by another process (pid "
expect "$work/second.log" "rank 0 of this job was refused its lease (it says by whom); this rank stops with it"
kill -INT "$trainer"
wait "$trainer" || true
trainer=

# A job trains run 1: a process is refused it, and so is its deletion.
$mpiexec "$tessera" train "$work/p" --quiet --resume 1 --steps 100000000 >"$work/job.log" 2>&1 &
trainer=$!
until_running "$work/job.log"
if "$tessera" train "$work/p" --quiet --resume 1 --steps 100000000 >"$work/third.log" 2>&1; then
  echo "a process trained run 1 beside a job:"; cat "$work/third.log"; exit 1
fi
expect "$work/third.log" "is being trained by another process (pid "
if "$tessera" runs --project "$work/p" delete 1 --yes >"$work/delete.log" 2>&1; then
  echo "a run a job trains was deleted:"; cat "$work/delete.log"; exit 1
fi
expect "$work/delete.log" "then delete it"
echo "a second job, a process and runs delete were refused run 1 while another trained it"
