#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test that this machine can
# run under ctest (unit and CLI tests everywhere; GPU tests too when a CUDA device is present).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BITCHECK_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
labels="unit|cli"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then labels="unit|cli|gpu"; fi
cd "$build"
ctest --output-on-failure -L "$labels" -j "$(nproc)"
