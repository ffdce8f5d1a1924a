#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/build.sh
BUILD_DIR=${TESSERA_BUILD_DIR:-build}
TESSERA="$BUILD_DIR/app/cli/tessera"
"$TESSERA" --version
# There is no IDE build yet: on every machine the main job is a headless training run.
echo "== training sample_projects/gpt2_mini (metrics in sample_projects/gpt2_mini/runs.db) =="
"$TESSERA" train sample_projects/gpt2_mini "$@"
