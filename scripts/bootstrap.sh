#!/usr/bin/env bash
# Installs the Debian packages Tessera needs that are missing on this machine.
# Safe to run again: it installs only what is absent and says what it installs.
#   scripts/bootstrap.sh           what building and testing need
#   scripts/bootstrap.sh --fuzz    and clang-14 with libFuzzer, for scripts/fuzz.sh and scripts/sanitize.sh
set -euo pipefail

PACKAGES=(
  # toolchain
  g++ cmake ninja-build pkg-config ccache
  # engine
  libopenblas-dev libsqlite3-dev libtomlplusplus-dev nlohmann-json3-dev libfmt-dev libcli11-dev libpcre2-dev
  # conv_general_dilated's CPU kernel (oneDNN)
  libdnnl-dev
  # image data: PNG and JPEG decoding
  libpng-dev libjpeg-dev
  # the engine's tests
  doctest-dev
  # plugin hashes (SHA-256)
  libssl-dev
  # the fault trials read the run store with SQLite's shell
  sqlite3
  # the Python package (app/python) and its tests
  pybind11-dev python3-dev python3-numpy python3-pytest libdlpack-dev
  # multi-process runs
  openmpi-bin libopenmpi-dev
  # IDE
  qt6-base-dev qt6-base-dev-tools libqt6opengl6-dev qt6-charts-dev libgl-dev
  libimgui-dev libgraphviz-dev fonts-dejavu-core
  # headless GUI tests; Mesa's software OpenGL for the ImGui canvases under Xvfb
  xvfb xauth libgl1-mesa-dri
)

if [[ ${1:-} == --fuzz ]]; then
  PACKAGES+=(clang-14 libfuzzer-14-dev)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "bootstrap: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "bootstrap: installing ${#missing[@]} missing packages: ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then SUDO=sudo; else
    echo "bootstrap: not root and no sudo; install these by hand: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "bootstrap: done"
