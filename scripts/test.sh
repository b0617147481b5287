#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test that this machine can
# run under ctest (unit and CLI tests everywhere; GPU tests too when a CUDA device is present).
#   scripts/test.sh             unit and CLI tests (and GPU tests on a GPU machine)
#   scripts/test.sh --browser   also the nightly page's tests in headless Chromium, which setup.sh
#                               installs (BITCHECK_BROWSER=1 does the same); no Chromium fails them
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BITCHECK_BUILD_DIR:-$root/build}
browser=${BITCHECK_BROWSER:-0}
[ "${1:-}" = "--browser" ] && browser=1
if [ "$browser" = 1 ]; then "$root/scripts/setup.sh" --browser; else "$root/scripts/setup.sh"; fi
labels="unit|cli"
[ "$browser" = 1 ] && labels="$labels|browser"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then labels="$labels|gpu"; fi
cd "$build"
ctest --output-on-failure -L "$labels" -j "$(nproc)"
