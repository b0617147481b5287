#!/usr/bin/env bash
# On a host of several GPUs: the tensor-parallel sweep, one process per GPU and rank (NCCL), and
# its tables: the status matrix per tp, where NCCL's default first drifts, NCCL's algorithm,
# protocol and channels per case, the cross-TP comparison, and the path coverage (coverage.txt).
#   scripts/gpu-tp-report.sh BUNDLE OUT [--devices 0,1,2,3] [--spec SPEC] [--deadline S] [-- SWEEP_ARGS...]
# BUNDLE is scripts/gpu-bundle.sh's output. --deadline S: the sweep alone gets SIGTERM after S
# seconds; it stops a rank group at once (its ranks killed) or lets the shards finish the cases in
# flight, and writes its partial report, from which the tables are still made. Stopping this script
# itself instead loses them. NCCL comes from BITCHECK_NCCL_LIBRARY, else the one
# PyTorch ships. NVLink multicast (NVLS) and SHARP stay off in every process.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BUNDLE OUT [--devices LIST] [--spec SPEC] [--deadline S] [-- SWEEP_ARGS...]" >&2; exit 2; }
bundle=$(cd "$1" && pwd); out=$2; shift 2
devices=""; spec="$bundle/sweeps/tp-gpu.json"; deadline=0; extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --devices) devices=$2; shift 2 ;;
    --spec) spec=$2; shift 2 ;;
    --deadline) deadline=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "gpu-tp-report: unknown argument $1" >&2; exit 2 ;;
  esac
done
export NCCL_NVLS_ENABLE=0 NCCL_COLLNET_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
if [ -z "${BITCHECK_NCCL_LIBRARY:-}" ]; then
  BITCHECK_NCCL_LIBRARY=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)
  [ -f "$BITCHECK_NCCL_LIBRARY" ] || BITCHECK_NCCL_LIBRARY=$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)
  export BITCHECK_NCCL_LIBRARY
fi
if [ -z "$devices" ]; then
  devices=$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)
fi
mkdir -p "$out"
{ nvidia-smi -L; echo "NCCL: $BITCHECK_NCCL_LIBRARY"; echo "revision: $(cat "$bundle/REVISION")"; } > "$out/device.txt"
limit=()
[ "$deadline" -gt 0 ] && limit=(timeout -s TERM "$deadline")
set +e
"${limit[@]}" "$bundle/bin/bitcheck" sweep --spec "$spec" --backend cuda --devices "$devices" --no-progress \
  --out "$out/run" "${extra[@]}" > "$out/sweep.log" 2>&1
status=$?
set -e
echo "sweep exit $status" >> "$out/sweep.log"
[ -f "$out/run/report.json" ] || { tail -40 "$out/sweep.log"; exit 3; }
"$bundle/bin/bitcheck" matrix "$out/run/report.json" --format md --out "$out/matrix.md"
python3 "$bundle/scripts/tp-summary.py" "$out/run/report.json" > "$out/tp-summary.md"
python3 "$bundle/scripts/compact-report.py" "$out/run/report.json" "$out/summary.json"
"$bundle/bin/bitcheck" coverage "$out/run/report.json" > "$out/coverage.txt" 2>&1
gzip -kf "$out/run/report.json"
tail -5 "$out/sweep.log"
exit $status
