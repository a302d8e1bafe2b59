#!/usr/bin/env bash
# Configures and builds Loom into build/ (Release, Ninja, -j2 by default; LOOM_JOBS overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${LOOM_BUILD_DIR:-build}
JOBS=${LOOM_JOBS:-2}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C "$BUILD" -j"$JOBS"
