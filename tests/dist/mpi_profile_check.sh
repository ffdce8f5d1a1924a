#!/bin/sh
# tessera profile across processes: a tiny tensor-parallel MLP profiled by `mpiexec -n 2` gives one profile in
# rank 0's store holding both ranks' launches. Checked from `tessera profile --json`: two devices, ranks 0 and 1;
# the ranks run on one host, whose steady clock they share, so rank 1's measured offset must be 0 within its
# error bound; every collective call has both members, the straggler waits 0 and the other member waits the
# straggler's arrival - its own. Each rank's two steps and its memory samples are stored as its own (read from
# the store with Python's sqlite3). Only rank 0 writes: one run in the store.
# Usage: mpi_profile_check.sh TESSERA MPIEXEC [MPIEXEC FLAGS...]
set -eu
tessera=$1
shift
command -v python3 >/dev/null || { echo "mpi_profile skipped: no python3"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/p"
cat >"$work/p/project.toml" <<'EOF2'
[project]
name = "mpi_profile"
[model]
family = "mlp"
sizes = [16, 32, 32, 4]
[data]
kind = "synthetic-digits"
[train]
steps = 4
batch_size = 32
optimizer = "adamw"
loss = "mse"
[mesh]
shape = [1, 2]
axes = ["data", "model"]
[sharding]
'layers\.0\.weight' = "None, model"
'layers\.0\.bias' = "model"
'layers\.1\.weight' = "model, None"
EOF2
"$@" "$tessera" profile "$work/p" --steps 2 --json --quiet >"$work/profile.json" 2>"$work/profile.err" || {
  cat "$work/profile.err" "$work/profile.json"; exit 1; }
python3 - "$work/profile.json" <<'EOF2'
import json, sys
doc = json.load(open(sys.argv[1]))
devices = {d["device"]: d for d in doc["devices"]}
assert sorted(devices) == ["cpu:0", "cpu:1"], doc["devices"]
assert devices["cpu:0"]["rank"] == 0 and devices["cpu:1"]["rank"] == 1, doc["devices"]
one = devices["cpu:1"]
assert one["error_ns"] > 0, one
assert abs(one["offset_ns"]) <= one["error_ns"], f"one host, one clock: offset {one['offset_ns']} beyond its bound {one['error_ns']}"
calls = doc["collectives"]
assert calls, "no collective calls"
for c in calls:
    assert c["complete"] and len(c["members"]) == 2, c
    arrivals = {m["device"]: m["arrival_ns"] for m in c["members"]}
    last = max(arrivals.values())
    assert arrivals[c["straggler"]] == last, c
    for m in c["members"]:
        assert m["wait_ns"] == last - m["arrival_ns"], c
seqs = sorted(c["seq"] for c in calls)
assert seqs == list(range(len(seqs))), seqs
worst = max(calls, key=lambda c: c["max_wait_ns"])
print(f"mpi_profile: {len(calls)} calls; rank 1 clock {one['offset_ns']} ns within {one['error_ns']} ns; "
      f"worst wait {worst['max_wait_ns']} ns (call {worst['seq']}, straggler {worst['straggler']})")
EOF2
python3 - "$work/p/runs.db" <<'EOF2'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
steps = dict(db.execute("SELECT rank, count(*) FROM profile_marks GROUP BY rank").fetchall())
assert steps == {0: 2, 1: 2}, f"steps by rank: {steps}"
memory = dict(db.execute("SELECT rank, count(*) FROM profile_memory GROUP BY rank").fetchall())
assert sorted(memory) == [0, 1] and min(memory.values()) > 0, f"memory samples by rank: {memory}"
print(f"mpi_profile: steps by rank {steps}, memory samples by rank {memory}")
EOF2
runs=$("$tessera" runs --db "$work/p/runs.db" list | grep -c '^ *[0-9][0-9]*  ')
[ "$runs" -eq 1 ] || { echo "mpi_profile: $runs runs in the store, expected 1 (only rank 0 writes)"; exit 1; }
echo "mpi_profile: ok"
