#!/usr/bin/env bash
# Builds the host code (CPU backend; no CUDA) with AddressSanitizer + UBSan into build-asan/ and
# runs the whole unit and CLI test suite under them. Any sanitizer report fails the run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BITCHECK_ASAN_BUILD_DIR:-$root/build-asan}
"$root/scripts/setup.sh" --deps-only
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBITCHECK_WITH_CUDA=OFF \
  -DBITCHECK_SANITIZE=ON -DBITCHECK_WERROR=OFF >/dev/null  # GCC warns falsely inside std::regex under -fsanitize
cmake --build "$build" --parallel
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cd "$build"
ctest --output-on-failure -L "unit|cli" -j "$(nproc)"
