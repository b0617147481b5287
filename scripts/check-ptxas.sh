#!/usr/bin/env bash
# Fails when ptxas alters the wgmma pipeline of a kernel: every "Potential Performance Loss:
# wgmma.mma_async instructions are serialized ..." (info C7514, C7515, C7520: registers of a wgmma
# read or defined between its start and end, a compiler-inserted arrive on a divergent path) and
# every "warpgroup.wait is injected" (C7517: ptxas waits on a wgmma the code did not wait for).
# ptxas reports them as information, not as warnings, and the kernel still computes the same bits,
# only slower: a branch around the wgmmas of the fixed-order GEMM once cost 20 % at 128x256 on an
# H200 with nothing else to show for it.
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
  pattern='wgmma.mma_async instructions are serialized|warpgroup.wait is injected'
  serialized=$(grep -E "$pattern" "$log" | sed -E "s/.*function '([^']+)'.*/\1/" | sort -u | grep -c .)
  echo "check-ptxas: $(basename "$source"): $kernels sm_90a kernels, $serialized with a serialized wgmma pipeline"
  if [ "$serialized" -gt 0 ]; then
    grep -E "$pattern" "$log" | sed -E "s/.*\((C75[0-9]+)\).*function '([^']+)'.*/  \2 (\1)/" |
      c++filt | sort -u
    status=1
  fi
  rm -f "$log"
done
exit $status
