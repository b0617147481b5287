#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs `bitcheck sweep --op all` (the embedded
# default spec; the CUDA backend too when a GPU is present, the CPU backend always).
# Extra arguments go to `bitcheck sweep`, e.g. scripts/sweep.sh --out reports/local
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BITCHECK_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
exec "$build/apps/bitcheck" sweep --op all "$@"
