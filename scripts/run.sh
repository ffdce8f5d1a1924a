#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/build.sh
BUILD_DIR=${TESSERA_BUILD_DIR:-build}
TESSERA="$BUILD_DIR/app/cli/tessera"
"$TESSERA" --version
echo "== the ops and their rules =="
"$TESSERA" ops | tail -n 5
echo "== IR of the MLP 784-1024-1024-1024-10 forward pass, batch 8 =="
"$TESSERA" ir --example mlp --batch 8
