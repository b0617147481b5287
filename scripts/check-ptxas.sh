#!/usr/bin/env bash
# Fails when ptxas serializes the wgmma pipeline of a kernel (info C7515: "wgmma.mma_async
# instructions are serialized ..."). ptxas reports it as information, not as a warning, and the
# kernel still computes the same bits, only slower: a branch around the wgmmas of the fixed-order
# GEMM once cost 20 % at 128x256 on an H200 with nothing else to show for it.
#   scripts/check-ptxas.sh NVCC SOURCE...   (run by ctest as ptxas_wgmma_pipeline)
set -uo pipefail
nvcc=$1; shift
root=$(cd "$(dirname "$0")/.." && pwd)
status=0
for source in "$@"; do
  log=$(mktemp)
  if ! "$nvcc" -std=c++17 --expt-relaxed-constexpr -I"$root/kernels" -I"$root/lib" \
      --generate-code=arch=compute_90a,code=sm_90a -Xptxas=-v -c "$source" -o /dev/null > "$log" 2>&1; then
    cat "$log"; echo "check-ptxas: $source does not compile"; status=1; rm -f "$log"; continue
  fi
  kernels=$(grep -c "Compiling entry function" "$log")
  serialized=$(grep -c "C7515" "$log")
  echo "check-ptxas: $(basename "$source"): $kernels sm_90a kernels, $serialized with a serialized wgmma pipeline"
  if [ "$serialized" -gt 0 ]; then
    grep "C7515" "$log" | sed -E "s/.*function '([^']+)'.*/  \1/" | c++filt | sort -u
    status=1
  fi
  rm -f "$log"
done
exit $status
