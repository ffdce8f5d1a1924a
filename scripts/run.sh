#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/build.sh
BUILD_DIR=${TESSERA_BUILD_DIR:-build}
TESSERA="$BUILD_DIR/app/cli/tessera"
"$TESSERA" --version
# The main job: the IDE on the sample project where there is a display (Run ▶ Train, F5, trains it), else a
# headless training run of it. TESSERA_HEADLESS=1 trains headless anyway.
STUDIO="$BUILD_DIR/app/studio/tessera-studio"
if [[ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" && -x "$STUDIO" && "${TESSERA_HEADLESS:-0}" != 1 ]]; then
  echo "== Tessera Studio on sample_projects/gpt2_mini (Run > Train or F5 trains it) =="
  exec "$STUDIO" sample_projects/gpt2_mini "$@"
fi
echo "== training sample_projects/gpt2_mini headless (metrics in sample_projects/gpt2_mini/runs.db) =="
"$TESSERA" train sample_projects/gpt2_mini "$@"
