#!/usr/bin/env bash
# The engine's and the CLI's tests under AddressSanitizer and UndefinedBehaviorSanitizer:
#
#   scripts/sanitize.sh [ctest arguments...]     e.g. scripts/sanitize.sh -R test_ir
#
# Builds build-asan/ (scripts/asan_build.sh: clang-14, ASan + UBSan, no IDE, no CUDA; JOBS=N parallel jobs,
# default 1) and runs the CTest tests labelled `sanitize` there. Any report fails its test. The suppressions,
# each with its reason, are in scripts/sanitize/. A long build: not part of the default test run or CI.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --fuzz
source scripts/asan_build.sh
configure_asan_build
cmake --build "$ASAN_BUILD_DIR" -j "$ASAN_JOBS"
asan_environment
cd "$ASAN_BUILD_DIR"
ctest -L sanitize --output-on-failure -j "$ASAN_JOBS" "$@"
