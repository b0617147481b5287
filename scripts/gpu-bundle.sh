#!/usr/bin/env bash
# Builds bitcheck here (a machine with nvcc, no GPU needed) for sm_90a and packs a self-sufficient
# bundle for the GPU machine, which has the CUDA driver and cuBLASLt but none of CLI11, json,
# spdlog, fmt, Eigen or Catch2: the binaries plus the non-system shared libraries they link,
# found through an $ORIGIN rpath.
#   scripts/gpu-bundle.sh [--prebuilt] [BUNDLE_DIR]   (default: .gpu-bundle, git-ignored)
# --prebuilt packs the build already in BITCHECK_GPU_BUILD_DIR (default build-gpu) without setting
# up or building: for a build made on the GPU machine itself. BITCHECK_REVISION names the revision
# where there is no git (the GPU machine's copy of the tree).
# Then on the GPU machine: BUNDLE_DIR/bin/bitcheck ..., scripts/gpu-check.sh BUNDLE_DIR OUT_DIR, or
# for plugins and Python impls scripts/gpu-python-report.sh BUNDLE_DIR OUT_DIR. The bundle carries
# python/ (bitcheck_py, found by bin/bitcheck as ../python, and python/examples) and the example
# plugin built for sm_90a (plugins/libbitcheck_example_plugin.so, CUDA runtime linked statically).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prebuilt=0
if [ "${1:-}" = --prebuilt ]; then prebuilt=1; shift; fi
bundle=${1:-$root/.gpu-bundle}
build=${BITCHECK_GPU_BUILD_DIR:-$root/build-gpu}

if [ $prebuilt = 0 ]; then
  "$root/scripts/setup.sh" --deps-only
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="90a-real;80-virtual" -DBITCHECK_WITH_CUDA=ON >/dev/null
  cmake --build "$build" --parallel
fi

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/tests" "$bundle/plugins" "$bundle/python" "$bundle/scripts"
cp "$build/apps/bitcheck" "$bundle/bin/"
# NCCL's profiler plugin that records NCCL's choices as paths: found beside the binary.
cp "$build/apps/libbitcheck-nccl-profiler.so" "$bundle/bin/"
# The GPU tests only: the unit and CLI tests run in CI, and the device tool carries at most 64 MiB.
cp "$build/tests/bitcheck_gpu_tests" "$bundle/tests/"
# Probes, among them sanitizer_probe: the per-tool controls of scripts/gpu-sanitize.sh.
for probe in "$build"/tests/probes/*_probe; do
  [ -x "$probe" ] && cp "$probe" "$bundle/bin/"
done
# Libraries the GPU machine lacks: everything resolved outside the system and CUDA directories
# except the C/C++ runtime, which the GPU machine has in a newer version.
for binary in "$bundle"/bin/* "$bundle"/tests/*; do
  { ldd "$binary" | awk '/=> \//{print $3}' | grep -E 'libfmt|libspdlog|libCatch' || true; } | while read -r lib; do
    cp -L "$lib" "$bundle/lib/"
  done
done
# CUPTI (kernel provenance): bitcheck opens it with dlopen when a run asks for --provenance, by the
# build's path and then by its soname, which the rpath finds here on a GPU machine without it.
cupti=$(sed -n 's/^BITCHECK_CUPTI_LIBRARY_PATH:FILEPATH=//p' "$build/CMakeCache.txt")
if [ -n "$cupti" ] && [ -f "$cupti" ]; then cp -L "$cupti" "$bundle/lib/libcupti.so.13"; fi
# Test binaries live one level down too: give them the same rpath target.
for binary in "$bundle"/bin/* "$bundle"/tests/*; do
  if command -v patchelf >/dev/null; then patchelf --set-rpath '$ORIGIN/../lib' "$binary"; fi
done
cp -r "$root/sweeps" "$root/contract" "$bundle/"
# Impls from outside bitcheck: the example plugin, the Python worker and its examples, the scripts
# that run and report them.
cp "$build/examples/plugin/libbitcheck_example_plugin.so" "$bundle/plugins/"
cp -r "$root/python/bitcheck_py" "$root/python/examples" "$bundle/python/"
find "$bundle/python" -name __pycache__ -prune -exec rm -rf {} +
cp "$root/scripts/gpu-python-report.sh" "$root/scripts/compact-report.py" "$root/scripts/gpu-check.sh" \
  "$root/scripts/gpu-tp-report.sh" "$root/scripts/tp-summary.py" "$root/scripts/provenance-overhead.sh" \
  "$bundle/scripts/"
# The searched cuBLASLt tables, the input of `bitcheck algos --refine apps/tuner/searched`.
mkdir -p "$bundle/apps/tuner" && cp -r "$root/apps/tuner/searched" "$bundle/apps/tuner/"
if [ -n "${BITCHECK_REVISION:-}" ]; then
  echo "$BITCHECK_REVISION" > "$bundle/REVISION"
else
  git -C "$root" rev-parse --short=12 HEAD > "$bundle/REVISION" 2>/dev/null || echo unknown > "$bundle/REVISION"
fi
du -sh "$bundle" | awk '{print "bundle: " $2 " (" $1 ")"}'
