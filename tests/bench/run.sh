#!/bin/sh
# Side-by-side benchmarks (see run.py): tests/bench/run.sh [--quick] [--only NAME,...] [--out FILE]
# Uses build/ unless TESSERA_BUILD names another build folder.
here=$(cd "$(dirname "$0")" && pwd)
build=${TESSERA_BUILD:-$here/../../build}
exec python3 "$here/run.py" --tessera "$build/app/cli/tessera" --elementwise "$build/tests/bench/bench_elementwise" \
  --data "$build/tests/bench/bench_data" --metrics "$build/tests/bench/bench_metrics" "$@"
