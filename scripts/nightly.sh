#!/usr/bin/env bash
# The nightly job: sweep (cost-balanced shards in parallel; spread over the GPUs present), merge,
# render the status matrix (markdown, HTML, JUnit) and diff against the previous night's report.
#   scripts/nightly.sh BITCHECK_BINARY OUT_DIR [--spec FILE] [--backend B] [--jobs N]
#                      [--previous REPORT] [-- extra sweep arguments]
# Writes OUT_DIR/{report.json, matrix.md, matrix.html, junit.xml, diff.txt, diff.json, *.log}.
# Exit code: the merged sweep's (0 pass, 1 findings, 3 error), or 1 when the diff shows a
# regression against the previous report.
set -uo pipefail
bitcheck=$(realpath "${1:?bitcheck binary}")
out=${2:?output dir}
shift 2
spec="" backend=auto jobs=4 previous="" extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --spec) spec=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --previous) previous=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "nightly: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
spec_args=()
[ -n "$spec" ] && spec_args=(--spec "$spec")

pids=()
for ((i = 0; i < jobs; i++)); do
  # Shard i runs on GPU i modulo the GPUs present (each process sees one device).
  if [ "$gpus" -gt 0 ]; then device=$((i % gpus)); else device=""; fi
  CUDA_VISIBLE_DEVICES=${device:-${CUDA_VISIBLE_DEVICES:-}} "$bitcheck" sweep "${spec_args[@]}" --op all \
    --backend "$backend" --shard "$i/$jobs" --out "$out" --report-name "shard$i.json" "${extra[@]}" \
    > "$out/shard$i.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
shards=()
for ((i = 0; i < jobs; i++)); do
  [ -f "$out/shard$i.json" ] || { echo "nightly: shard $i wrote no report (see $out/shard$i.log)" >&2; exit 3; }
  shards+=("$out/shard$i.json")
done
"$bitcheck" merge --out "$out/report.json" "${shards[@]}" > "$out/merge.log" 2>&1
status=$?
rm -f "${shards[@]}"
"$bitcheck" matrix "$out/report.json" --format md --out "$out/matrix.md"
"$bitcheck" matrix "$out/report.json" --format html --out "$out/matrix.html"
"$bitcheck" matrix "$out/report.json" --format junit --out "$out/junit.xml"
cat "$out/merge.log"
if [ -n "$previous" ]; then
  "$bitcheck" diff "$previous" "$out/report.json" --json "$out/diff.json" > "$out/diff.txt"
  diff_status=$?
  cat "$out/diff.txt"
  [ $diff_status -eq 1 ] && [ $status -eq 0 ] && status=1
  [ $diff_status -ge 2 ] && status=$diff_status
fi
exit $status
