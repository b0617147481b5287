#!/usr/bin/env bash
# Installs what bitcheck needs on Debian/Ubuntu (only the missing packages; sudo when not root),
# then configures and builds into build/. The CUDA backend is built when nvcc is found
# (PATH or /usr/local/cuda); otherwise a CPU-only build.
#   scripts/setup.sh              install missing packages, configure, build
#   scripts/setup.sh --deps-only  install missing packages only
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BITCHECK_BUILD_DIR:-$root/build}
packages=(cmake ninja-build g++ git libcli11-dev nlohmann-json3-dev libspdlog-dev libeigen3-dev catch2 patchelf
          python3-numpy)  # python3-numpy: the CPU path of --py-impl (python/bitcheck_py) and its tests

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
[ "${1:-}" = "--deps-only" ] && exit 0

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --parallel
