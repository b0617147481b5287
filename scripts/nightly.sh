#!/usr/bin/env bash
# The nightly job: sweep (`bitcheck sweep --devices`: cost-balanced shards in parallel, spread over
# the GPUs present, merged into one report), render the status matrix (markdown, HTML, JUnit) and
# diff against the previous night's report.
#   scripts/nightly.sh BITCHECK_BINARY OUT_DIR [--spec FILE] [--backend B] [--jobs N]
#                      [--previous REPORT] [--deadline S] [-- extra sweep arguments]
# --jobs N: shards in parallel (default 4); shard i runs on GPU i modulo the GPUs present, or on
# the CPU backend only sets the parallelism. --deadline S: the sweep gets SIGTERM after S seconds
# and writes the partial report (marked interrupted) that the matrix and diff then use.
# Writes OUT_DIR/{report.json, matrix.md, matrix.html, junit.xml, diff.txt, diff.json, sweep.log}.
# Exit code: the sweep's (0 pass, 1 findings, 3 error or interrupted), or 1 when the diff shows a
# regression against the previous report.
set -uo pipefail
bitcheck=$(realpath "${1:?bitcheck binary}")
out=${2:?output dir}
shift 2
spec="" backend=auto jobs=4 previous="" deadline=0 extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --spec) spec=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --previous) previous=$2; shift 2 ;;
    --deadline) deadline=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "nightly: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
spec_args=()
[ -n "$spec" ] && spec_args=(--spec "$spec")

devices=()
for ((i = 0; i < jobs; i++)); do
  if [ "$gpus" -gt 0 ]; then devices+=($((i % gpus))); else devices+=("$i"); fi
done
device_list=$(IFS=,; echo "${devices[*]}")
rm -f "$out/report.json"
limit=()
[ "$deadline" -gt 0 ] && limit=(timeout -s TERM "$deadline")
start=$(date +%s)
"${limit[@]}" "$bitcheck" sweep "${spec_args[@]}" --op all --backend "$backend" --devices "$device_list" --out "$out" \
  "${extra[@]}" > "$out/sweep.log" 2>&1
status=$?
echo "nightly: sweep exit $status in $(( $(date +%s) - start )) s on $gpus GPU(s), $jobs shards" >> "$out/sweep.log"
[ -f "$out/report.json" ] || { cat "$out/sweep.log" >&2; echo "nightly: the sweep wrote no report" >&2; exit 3; }
"$bitcheck" matrix "$out/report.json" --format md --out "$out/matrix.md"
"$bitcheck" matrix "$out/report.json" --format html --out "$out/matrix.html"
"$bitcheck" matrix "$out/report.json" --format junit --out "$out/junit.xml"
cat "$out/sweep.log"
if [ -n "$previous" ]; then
  "$bitcheck" diff "$previous" "$out/report.json" --json "$out/diff.json" > "$out/diff.txt"
  diff_status=$?
  cat "$out/diff.txt"
  [ $diff_status -eq 1 ] && [ $status -eq 0 ] && status=1
  [ $diff_status -ge 2 ] && status=$diff_status
fi
exit $status
