#!/usr/bin/env bash
# Installs what bitcheck needs on Debian/Ubuntu (only the missing packages; sudo when not root),
# then configures and builds into build/. The CUDA backend is built when nvcc is found
# (PATH or /usr/local/cuda); otherwise a CPU-only build.
#   scripts/setup.sh              install missing packages, configure, build
#   scripts/setup.sh --deps-only  install missing packages only
#   scripts/setup.sh --browser    also Chromium and Python 3, for the browser tests (ctest -L browser);
#                                 BITCHECK_BROWSER=1 in the environment does the same
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BITCHECK_BUILD_DIR:-$root/build}
packages=(cmake ninja-build g++ git libcli11-dev nlohmann-json3-dev libspdlog-dev libeigen3-dev catch2 patchelf clang-format
          python3-numpy)  # python3-numpy: the CPU path of --py-impl (python/bitcheck_py) and its tests
deps_only=0
browser=${BITCHECK_BROWSER:-0}
for argument in "$@"; do
  case "$argument" in
    --deps-only) deps_only=1 ;;
    --browser) browser=1 ;;
    *) echo "setup: unknown argument $argument" >&2; exit 2 ;;
  esac
done
[ "$browser" = 1 ] && packages+=(chromium python3)

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ "$deps_only" = 1 ] && exit 0

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --parallel
