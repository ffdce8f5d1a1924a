#!/usr/bin/env bash
# Runs one fuzz harness (tests/fuzz/fuzz_NAME.cpp) with libFuzzer:
#
#   scripts/fuzz.sh NAME SECONDS [libFuzzer options...]     e.g. scripts/fuzz.sh ir_text 600 -jobs=2
#   scripts/fuzz.sh --list
#
# Builds it in build-asan/ (scripts/asan_build.sh: clang-14, -fsanitize=fuzzer,address,undefined), seeds it
# with tests/fuzz/corpus/NAME/ (read only; what it learns goes to build-asan/fuzz/NAME/corpus), and runs it for
# SECONDS. Crashers land in build-asan/fuzz/NAME/ as crash-* files: fix the bug and copy the file into
# tests/fuzz/corpus/NAME/, where the normal build's fuzz_replay_NAME test runs it from then on.
set -euo pipefail
cd "$(dirname "$0")/.."
HARNESSES=$(sed -n 's/^set(TSR_FUZZ_HARNESSES \(.*\))$/\1/p' tests/fuzz/CMakeLists.txt)
if [[ ${1:-} == --list ]]; then echo "$HARNESSES"; exit 0; fi
if (($# < 2)); then
  echo "usage: scripts/fuzz.sh NAME SECONDS [libFuzzer options...]; NAME is one of: $HARNESSES" >&2
  exit 2
fi
NAME=$1
SECS=$2
shift 2
[[ " $HARNESSES " == *" $NAME "* ]] || { echo "fuzz.sh: no harness '$NAME' (one of: $HARNESSES)" >&2; exit 2; }
scripts/bootstrap.sh --fuzz
source scripts/asan_build.sh
configure_asan_build
cmake --build "$ASAN_BUILD_DIR" -j "$ASAN_JOBS" --target "fuzz_$NAME"
asan_environment
export ASAN_OPTIONS="detect_leaks=0:$ASAN_OPTIONS"  # a leak is not what a harness looks for
out="$ASAN_BUILD_DIR/fuzz/$NAME"
mkdir -p "$out/corpus"
exec "$ASAN_BUILD_DIR/tests/fuzz/fuzz_$NAME" -max_total_time="$SECS" -timeout=20 -rss_limit_mb=4096 \
  -print_final_stats=1 -artifact_prefix="$out/" "$@" "$out/corpus" "tests/fuzz/corpus/$NAME"
