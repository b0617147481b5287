#!/usr/bin/env bash
# The nightly job: sweep (`bitcheck sweep --devices`: cost-balanced shards in parallel, spread over
# the GPUs present, merged into one report), render the status matrix (markdown, HTML, JUnit) and
# diff against the previous night's report; with --bench, time the invariant impls against the
# library defaults and add the cost-of-invariance table to the matrix.
#   scripts/nightly.sh BITCHECK_BINARY OUT_DIR [--spec FILE] [--backend B] [--jobs N]
#                      [--previous REPORT] [--deadline S] [--bench SPEC] [--provenance]
#                      [-- extra sweep arguments]
# --jobs N: shards in parallel (default 4); shard i runs on GPU i modulo the GPUs present, or on
# the CPU backend only sets the parallelism. --deadline S: the sweep gets SIGTERM after S seconds
# and writes the partial report (marked interrupted) that the matrix and diff then use.
# --bench SPEC (GPU only): after the sweep, `bitcheck bench --spec SPEC` on the first GPU
# (OUT_DIR/bench/bench.{json,md}); its "Cost of invariance" section is appended to matrix.md.
# --provenance: the sweep records the kernels every call launched (CUPTI; off by default, since it
# synchronizes and flushes around every call: scripts/provenance-overhead.sh measures what it
# costs), so the page's drawer names the kernels on both sides of a finding.
# --previous REPORT may be given several times, the last night's first: the diff is against it, its
# case times order and balance the sweep's work (sweep --costs), and the page's history shows every
# one.
# Writes OUT_DIR/{report.json, matrix.md, index.html, junit.xml, diff.txt, diff.json, sweep.log}:
# index.html is the page people open (`bitcheck matrix --format html`, with what changed against
# --previous and the cost-of-invariance plots of the bench).
# Exit code: the sweep's (0 pass, 1 findings, 3 error or interrupted), or 1 when the diff shows a
# regression against the previous report.
set -uo pipefail
bitcheck=$(realpath "${1:?bitcheck binary}")
out=${2:?output dir}
shift 2
spec="" backend=auto jobs=4 previous=() deadline=0 bench="" provenance=() extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --spec) spec=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --previous) previous+=("$2"); shift 2 ;;
    --deadline) deadline=$2; shift 2 ;;
    --bench) bench=$2; shift 2 ;;
    --provenance) provenance=(--provenance); shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "nightly: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
# The GPUs to use: CUDA_VISIBLE_DEVICES when set (say, to run on one GPU of several), else every
# GPU present; none: the CPU backend.
gpu_list=()
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  IFS=, read -r -a gpu_list <<< "$CUDA_VISIBLE_DEVICES"
elif command -v nvidia-smi >/dev/null 2>&1; then
  mapfile -t gpu_list < <(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -E '^[0-9]+$')
fi
gpus=${#gpu_list[@]}
spec_args=()
[ -n "$spec" ] && spec_args=(--spec "$spec")

devices=()
for ((i = 0; i < jobs; i++)); do
  if [ "$gpus" -gt 0 ]; then devices+=("${gpu_list[$((i % gpus))]}"); else devices+=("$i"); fi
done
device_list=$(IFS=,; echo "${devices[*]}")
rm -f "$out/report.json"
limit=()
[ "$deadline" -gt 0 ] && limit=(timeout -s TERM "$deadline")
# The last night's case times order and balance tonight's units of work (sweep --costs).
costs=()
[ ${#previous[@]} -gt 0 ] && costs=(--costs "${previous[0]}")
start=$(date +%s)
"${limit[@]}" "$bitcheck" sweep "${spec_args[@]}" --op all --backend "$backend" --devices "$device_list" --out "$out" \
  "${costs[@]}" "${provenance[@]}" "${extra[@]}" > "$out/sweep.log" 2>&1
status=$?
echo "nightly: sweep exit $status in $(( $(date +%s) - start )) s on $gpus GPU(s), $jobs shards" >> "$out/sweep.log"
[ -f "$out/report.json" ] || { cat "$out/sweep.log" >&2; echo "nightly: the sweep wrote no report" >&2; exit 3; }
"$bitcheck" matrix "$out/report.json" --format md --out "$out/matrix.md"
if [ -n "$bench" ]; then
  if [ "$gpus" -gt 0 ]; then
    # Pins and the like from the extra sweep arguments that bench also takes.
    bench_args=()
    for ((i = 0; i < ${#extra[@]}; i++)); do
      [ "${extra[$i]}" = --pins ] && bench_args+=(--pins "${extra[$((i + 1))]}")
    done
    if CUDA_VISIBLE_DEVICES=${gpu_list[0]} "$bitcheck" bench --spec "$bench" --out "$out/bench" "${bench_args[@]}" \
        > "$out/bench.log" 2>&1; then
      { echo; sed -n '/^## Cost of invariance/,$p' "$out/bench/bench.md"; } >> "$out/matrix.md"
    else
      echo "nightly: bench failed (see bench.log)" | tee -a "$out/sweep.log" >&2
      [ $status -eq 0 ] && status=3
    fi
  else
    echo "nightly: --bench needs a GPU; skipped" >> "$out/sweep.log"
  fi
fi
page_args=()
[ ${#previous[@]} -gt 0 ] && page_args+=(--previous "${previous[@]}")
[ -n "$bench" ] && [ -f "$out/bench/bench.json" ] && page_args+=(--bench "$out/bench/bench.json")
"$bitcheck" matrix "$out/report.json" --format html "${page_args[@]}" --out "$out/index.html"
"$bitcheck" matrix "$out/report.json" --format junit --out "$out/junit.xml"
cat "$out/sweep.log"
if [ ${#previous[@]} -gt 0 ]; then
  "$bitcheck" diff "${previous[0]}" "$out/report.json" --json "$out/diff.json" > "$out/diff.txt"
  diff_status=$?
  cat "$out/diff.txt"
  [ $diff_status -eq 1 ] && [ $status -eq 0 ] && status=1
  [ $diff_status -ge 2 ] && status=$diff_status
fi
exit $status
