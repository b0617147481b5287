#!/usr/bin/env bash
# Runs on the GPU machine, from a bundle made by scripts/gpu-bundle.sh: bitcheck's CUDA kernels
# under compute-sanitizer (memcheck with leak check, racecheck, initcheck, synccheck) over the small
# sweep sweeps/sanitize.json (every op, every CUDA impl and layout, forward and backward), one run
# per tool, and writes OUT_DIR/sanitizer-summary.md (device, date, commands, and per tool: errors
# found, cases run, wall time) beside the logs.
#   scripts/gpu-sanitize.sh BUNDLE_DIR OUT_DIR [--tools memcheck,racecheck,initcheck,synccheck]
#       [--kernels ours|all] [--ops a,b] [--timeout S] [--shards N] [--parallel]
# --kernels ours (default) checks only bitcheck's kernels (all live in namespace bitcheck::cuda:
#   compute-sanitizer --kernel-name kns=bitcheck); cuBLASLt's kernels still run, unchecked, so a
#   report names our code. --kernels all checks every kernel, cuBLASLt's included.
# --shards N splits each tool's sweep into N cost-balanced shards (`sweep --shard i/N`), each under
#   its own compute-sanitizer process, run side by side and merged; --parallel runs the tools side by
#   side too. Processes are spread round-robin over the GPUs present (CUDA_VISIBLE_DEVICES).
# Before a tool's sweep counts, its control must fail: bin/sanitizer_probe runs a kernel with that
# tool's defect (out-of-bounds store, shared-memory race, uninitialized load, divergent barrier)
# under the same options and the tool must report it; a defect-free probe kernel must stay clean.
# A tool whose control is not detected is reported as BLIND and the script fails.
# Exit: 0 every tool clean with its control detected; 1 errors found, a blind tool, or a sweep that
# failed to run (timeout, error); 2 bad usage; 3 compute-sanitizer or the bundle missing. bitcheck's
# own findings in the sweep (exit 1: drift, a control that does not drift on these tiny shapes)
# are recorded in the summary but are not sanitizer errors.
set -uo pipefail
usage() { sed -n '7,8p' "$0" >&2; exit 2; }
[ $# -ge 2 ] || usage
bundle=$(cd "$1" 2>/dev/null && pwd) || { echo "gpu-sanitize: no bundle directory $1" >&2; exit 3; }
mkdir -p "$2" && out=$(cd "$2" && pwd)
shift 2
tools=memcheck,racecheck,initcheck,synccheck kernels=ours ops=all timeout_s=0 shards=1 parallel=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tools) tools=$2; shift 2 ;;
    --kernels) kernels=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --parallel) parallel=1; shift ;;
    *) echo "gpu-sanitize: unknown argument $1" >&2; usage ;;
  esac
done
for tool in ${tools//,/ }; do
  case "$tool" in memcheck | racecheck | initcheck | synccheck) ;; *) echo "gpu-sanitize: unknown tool $tool" >&2; exit 2 ;; esac
done
case "$kernels" in
  ours) filter=(--kernel-name kns=bitcheck)
        filter_text="\`--kernel-name kns=bitcheck\`: only bitcheck's kernels (namespace \`bitcheck::cuda\`) are checked; cuBLASLt's kernels run unchecked" ;;
  all) filter=(); filter_text="none: every kernel is checked, cuBLASLt's included" ;;
  *) echo "gpu-sanitize: --kernels ours|all, got $kernels" >&2; exit 2 ;;
esac
[[ "$timeout_s" =~ ^[0-9]+$ ]] || { echo "gpu-sanitize: --timeout takes seconds, got $timeout_s" >&2; exit 2; }
[[ "$shards" =~ ^[1-9][0-9]*$ ]] || { echo "gpu-sanitize: --shards takes a positive count, got $shards" >&2; exit 2; }
# Every device buffer a cudaMalloc of its own (no cached blocks), so initcheck sees each allocation
# fresh and memcheck's leak check sees every buffer freed.
export BITCHECK_DEVICE_CACHE_MB=0
# The GPUs to use: CUDA_VISIBLE_DEVICES when set (say, to leave a GPU free for a benchmark), else
# every GPU present.
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  IFS=, read -r -a gpu_list <<< "$CUDA_VISIBLE_DEVICES"
else
  mapfile -t gpu_list < <(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -E '^[0-9]+$')
fi
[ ${#gpu_list[@]} -gt 0 ] || gpu_list=(0)
gpus=${#gpu_list[@]}

sanitizer=$(command -v compute-sanitizer || true)
if [ -z "$sanitizer" ]; then
  for candidate in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer; do
    if [ -x "$candidate" ]; then sanitizer=$candidate; break; fi
  done
fi
[ -n "$sanitizer" ] || { echo "gpu-sanitize: compute-sanitizer not found (PATH, /usr/local/cuda/bin, /usr/local/cuda-*/bin)" >&2; exit 3; }
for needed in bin/bitcheck bin/sanitizer_probe sweeps/sanitize.json contract/pins; do
  [ -e "$bundle/$needed" ] || { echo "gpu-sanitize: the bundle lacks $needed (rebuild it with scripts/gpu-bundle.sh)" >&2; exit 3; }
done
cd "$bundle" || exit 3

# Errors a compute-sanitizer log reports: the ERROR SUMMARY line, or racecheck's summary
# ("RACECHECK SUMMARY: H hazards displayed (E errors, W warnings)").
errors_in() {
  local log=$1 count
  count=$(grep -Eo 'ERROR SUMMARY: [0-9]+ error' "$log" 2>/dev/null | tail -n 1 | grep -Eo '[0-9]+')
  [ -n "$count" ] || count=$(grep -E 'RACECHECK SUMMARY' "$log" 2>/dev/null | tail -n 1 | grep -Eo '\([0-9]+ error' | grep -Eo '[0-9]+')
  echo "${count:-unknown}"
}
# Distinct from every bitcheck exit code (0-3): the sanitizer found errors.
sanitizer_exit=86
options_for() {
  local tool=$1
  local options=(--tool "$tool" --error-exitcode "$sanitizer_exit" "${filter[@]}")
  [ "$tool" = memcheck ] && options+=(--leak-check full)
  printf '%s\n' "${options[@]}"
}

date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)
device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
sanitizer_version=$("$sanitizer" --version 2>/dev/null | grep -Ei 'version|release' | tail -n 1)
revision=$(cat REVISION 2>/dev/null || echo unknown)
status=0
rows=()
commands=()
# One tool: its control, then its sweep as $shards shards side by side. Writes the tool's table row
# to $out/.row-TOOL, its command to $out/.command-TOOL and its status (0/1) to $out/.status-TOOL.
run_tool() {
  local tool=$1 slot=$2 tool_status=0 options control_rc clean_rc control_errors control
  mapfile -t options < <(options_for "$tool")
  export CUDA_VISIBLE_DEVICES=${gpu_list[$((slot % gpus))]}
  # The control: the tool must report the probe's defect under exactly these options.
  "$sanitizer" "${options[@]}" --log-file "$out/$tool-control.log" bin/sanitizer_probe "$tool" > /dev/null 2>&1
  control_rc=$?
  control_errors=$(errors_in "$out/$tool-control.log")
  "$sanitizer" "${options[@]}" --log-file "$out/$tool-clean.log" bin/sanitizer_probe clean > /dev/null 2>&1
  clean_rc=$?
  if [ $control_rc = $sanitizer_exit ] && [ $clean_rc = 0 ]; then
    control="detected ($control_errors errors); clean probe: 0"
  else
    control="BLIND: defect probe exit $control_rc ($control_errors errors), clean probe exit $clean_rc"
    tool_status=1
  fi
  if [ "$tool" = initcheck ]; then
    # Whether initcheck records writes made by TMA stores (the fixed-order GEMM's only way of
    # writing its output on sm_90): a never-written buffer filled by the GEMM, then downloaded.
    local tma_rc tma_errors
    "$sanitizer" "${options[@]}" --log-file "$out/initcheck-tma-store.log" bin/sanitizer_probe tma-store > "$out/initcheck-tma-store.out" 2>&1
    tma_rc=$?
    tma_errors=$(errors_in "$out/initcheck-tma-store.log")
    if grep -q ' 0 of .* values wrong' "$out/initcheck-tma-store.out" && ! grep -q '[1-9][0-9]* of .* values wrong' "$out/initcheck-tma-store.out"; then
      if [ "$tma_errors" = 0 ]; then
        control="$control; TMA-store writes: seen (a TMA-written buffer downloads clean)"
      else
        control="$control; TMA-store writes: NOT seen ($tma_errors errors downloading a TMA-written buffer whose values are all right, [initcheck-tma-store.log](initcheck-tma-store.log))"
      fi
    else
      control="$control; TMA-store question not answered (probe exit $tma_rc, see initcheck-tma-store.out)"
    fi
    # The harness's own proof of the writes initcheck cannot see: with BITCHECK_SENTINEL_WRITES=1
    # the GEMM fills Y with a sentinel (cudaMemset, which initcheck records) and checks every
    # element after the launch. Its probe must download clean, with the right values, and its check
    # must count exactly the one row no launch wrote; otherwise the sweep below proves nothing
    # about TMA-written outputs and the tool is BLIND.
    local sentinel_rc sentinel_errors
    BITCHECK_SENTINEL_WRITES=1 "$sanitizer" "${options[@]}" --log-file "$out/initcheck-sentinel.log" bin/sanitizer_probe sentinel > "$out/initcheck-sentinel.out" 2>&1
    sentinel_rc=$?
    sentinel_errors=$(errors_in "$out/initcheck-sentinel.log")
    if grep -q 'sm_90' "$out/initcheck-sentinel.out" && ! grep -q 'values wrong' "$out/initcheck-sentinel.out"; then
      control="$control; sentinel: no TMA stores on this GPU"
    elif [ $sentinel_rc = 0 ] && [ "$sentinel_errors" = 0 ]; then
      control="$control; sentinel proof of TMA-store writes: downloads clean and its check finds the unwritten row ([initcheck-sentinel.out](initcheck-sentinel.out))"
    else
      control="$control; sentinel proof BLIND or failing: probe exit $sentinel_rc, $sentinel_errors initcheck errors ([initcheck-sentinel.out](initcheck-sentinel.out))"
      tool_status=1
    fi
  fi

  local limit=()
  [ "$timeout_s" -gt 0 ] && limit=(timeout -s TERM "$timeout_s")
  local command=(bin/bitcheck sweep --spec sweeps/sanitize.json --backend cuda --op "$ops" --no-progress
                 --pins contract/pins --out "$out/$tool")
  # Two tools cannot cover the cases of cuBLASLt impls, seen on an H200 (compute-sanitizer 2025.3.1):
  # racecheck ended every such case in "Internal Sanitizer Error: The Sanitizer failed to handle a
  # hardware exception", counted as errors although --kernel-name excludes those kernels; and
  # initcheck, whose filter leaves cuBLASLt's kernels uninstrumented, does not see them write their
  # outputs, so every later read of a GEMM result (a download, the logprob kernel reading the LM
  # head's logits) was reported as uninitialized. Neither checks any of cuBLASLt's code under the
  # filter, so both sweep every other CUDA impl (with --kernels all, initcheck runs them all);
  # memcheck and synccheck run every impl.
  if [ "$tool" = racecheck ] || { [ "$tool" = initcheck ] && [ "$kernels" = ours ]; }; then
    local impls
    impls=$(bin/bitcheck list 2>/dev/null | grep '\[cuda\]' | sed -E 's/^ *[*~]? *//; s/ .*//; s|^[^/]*/||' | grep -v cublaslt | sort -u | paste -sd, -)
    [ -n "$impls" ] && command+=(--impl "$impls")
  fi
  local shown=("${command[@]/#"$out/"/OUT/}")  # the output directory as OUT, for the summary's reader
  local shard_text=""
  [ "$shards" -gt 1 ] && shard_text=" --shard i/$shards (i = 0..$((shards - 1)), merged)"
  local env_text=""
  [ "$tool" = initcheck ] && env_text="BITCHECK_SENTINEL_WRITES=1 "
  echo "$env_text$(basename "$sanitizer") ${options[*]} --log-file OUT/$tool.log ${shown[*]} --report-name report.json$shard_text" > "$out/.command-$tool"
  local start=$(date +%s) i pids=() rcs=()
  mkdir -p "$out/$tool"
  for ((i = 0; i < shards; i++)); do
    local shard_args=(--report-name report.json) log="$out/$tool.log" sweep_log="$out/$tool-sweep.log"
    if [ "$shards" -gt 1 ]; then
      shard_args=(--report-name "shard$i.json" --shard "$i/$shards")
      log="$out/$tool-shard$i.log" sweep_log="$out/$tool-sweep-shard$i.log"
      export CUDA_VISIBLE_DEVICES=${gpu_list[$(((slot * shards + i) % gpus))]}
    fi
    sentinel_env=()
    [ "$tool" = initcheck ] && sentinel_env=(env BITCHECK_SENTINEL_WRITES=1)
    "${limit[@]}" "${sentinel_env[@]}" "$sanitizer" "${options[@]}" --log-file "$log" "${command[@]}" "${shard_args[@]}" > "$sweep_log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; rcs+=($?); done
  local wall=$(($(date +%s) - start)) rc=0 errors=0 e
  if [ "$shards" -gt 1 ]; then
    # One log and one sweep log per tool, as for an unsharded run: shard logs concatenated in order.
    : > "$out/$tool.log"; : > "$out/$tool-sweep.log"
    for ((i = 0; i < shards; i++)); do
      e=$(errors_in "$out/$tool-shard$i.log")
      if [ "$e" = unknown ] || [ "$errors" = unknown ]; then errors=unknown; else errors=$((errors + e)); fi
      { echo "==== shard $i/$shards"; cat "$out/$tool-shard$i.log"; } >> "$out/$tool.log"
      { echo "==== shard $i/$shards"; cat "$out/$tool-sweep-shard$i.log"; } >> "$out/$tool-sweep.log"
      rm -f "$out/$tool-shard$i.log" "$out/$tool-sweep-shard$i.log"
    done
    local reports=()
    for ((i = 0; i < shards; i++)); do [ -f "$out/$tool/shard$i.json" ] && reports+=("$out/$tool/shard$i.json"); done
    [ ${#reports[@]} -gt 0 ] && bin/bitcheck merge --out "$out/$tool/report.json" "${reports[@]}" >> "$out/$tool-sweep.log" 2>&1
    rm -f "${reports[@]}"
  else
    errors=$(errors_in "$out/$tool.log")
  fi
  # The worst shard outcome is the tool's: sanitizer errors, then a timeout or another failure, then
  # bitcheck findings.
  for e in "${rcs[@]}"; do
    case $e in
      "$sanitizer_exit") rc=$e ;;
      0) ;;
      1) [ $rc = 0 ] && rc=1 ;;
      *) [ $rc != "$sanitizer_exit" ] && rc=$e ;;
    esac
  done
  local cases verdicts outcome
  cases=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['summary']['cases'], 'cases')" "$out/$tool/report.json" 2>/dev/null \
          || grep -Eo '\([0-9]+ of [0-9]+ cases' "$out/$tool-sweep.log" | tail -n 1 | tr -d '(')
  verdicts=$(grep -E '^verdicts:' "$out/$tool-sweep.log" | tail -n 1 | sed 's/^verdicts: *//')
  case $rc in
    0) outcome="sweep passed" ;;
    # Findings of the sweep itself (a control that does not drift on these tiny shapes, say) are
    # not the sanitizer's verdict: recorded, not failed on. sweeps/gpu.json is where they count.
    1) outcome="sweep exit 1: bitcheck findings, not sanitizer errors (see $tool-sweep.log)" ;;
    124 | 143) outcome="stopped by --timeout $timeout_s s (partial report)"; tool_status=1 ;;
    "$sanitizer_exit") outcome="compute-sanitizer reported errors"; tool_status=1 ;;
    *) outcome="exit $rc (see $tool-sweep.log)"; tool_status=1 ;;
  esac
  [ "$errors" = 0 ] || tool_status=1
  echo "$tool: $errors errors, ${cases:-no cases}, $wall s, $outcome; control: $control"
  echo "| $tool | $errors | ${cases:-none} | ${verdicts:-none} | $wall s | $outcome | $control | [$tool.log]($tool.log) |" > "$out/.row-$tool"
  echo $tool_status > "$out/.status-$tool"
}

slot=0
for tool in ${tools//,/ }; do
  echo "== $tool"
  if [ $parallel = 1 ]; then run_tool "$tool" $slot & else run_tool "$tool" $slot; fi
  slot=$((slot + 1))
done
wait
for tool in ${tools//,/ }; do
  rows+=("$(cat "$out/.row-$tool" 2>/dev/null || echo "| $tool | unknown | none | none | - | did not finish | - | - |")")
  commands+=("$(cat "$out/.command-$tool" 2>/dev/null)")
  [ "$(cat "$out/.status-$tool" 2>/dev/null)" = 0 ] || status=1
  rm -f "$out/.row-$tool" "$out/.command-$tool" "$out/.status-$tool"
done

{
  echo "# compute-sanitizer over sweeps/sanitize.json"
  echo
  echo "- device: ${device:-unknown}"
  echo "- date: $date_utc"
  echo "- bundle revision: $revision"
  echo "- compute-sanitizer: $sanitizer (${sanitizer_version:-version unknown})"
  echo "- kernel filter: $filter_text"
  echo "- script: \`scripts/gpu-sanitize.sh BUNDLE OUT --tools $tools --kernels $kernels --ops $ops --timeout $timeout_s --shards $shards$([ $parallel = 1 ] && echo " --parallel")\`"
  echo "- GPU indices used: ${gpu_list[*]} (processes round-robin)"
  echo
  echo "| tool | errors | cases run | verdicts | wall time | sweep | control (defect probe must be reported) | log |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "Commands (run in the bundle directory, OUT = the output directory; the sweep's output is in TOOL-sweep.log,"
  echo "its report in TOOL/report.json):"
  echo
  printf '    %s\n' "${commands[@]}"
  echo
  echo "Controls: \`bin/sanitizer_probe TOOL\` under the same options (TOOL-control.log) must make the tool report"
  echo "errors, and \`bin/sanitizer_probe clean\` (TOOL-clean.log) must not; otherwise the tool is BLIND with this"
  echo "filter and its clean sweep proves nothing."
  echo
  echo "racecheck, and initcheck under \`--kernels ours\`, sweep every CUDA impl except cuBLASLt's (cublaslt-pinned,"
  echo "cublaslt-heuristic and the chain swaps to them): racecheck stops on cuBLASLt's kernels with an internal sanitizer"
  echo "error, and initcheck cannot see the writes of the kernels its filter leaves out (see the script); memcheck and"
  echo "synccheck run every impl."
  echo
  echo "initcheck runs with BITCHECK_SENTINEL_WRITES=1. The fixed-order GEMM writes its output with TMA stores alone,"
  echo "which initcheck does not record (\`sanitizer_probe tma-store\`: a TMA-written buffer with every value right"
  echo "downloads as uninitialized). In this mode every wgmma GEMM launch first fills its output with a sentinel"
  echo "(cudaMemset, recorded by initcheck) and afterwards proves that no element still holds it, failing the case"
  echo "otherwise: the harness's own proof of full writes for those outputs, initcheck's for everything else."
  echo "\`sanitizer_probe sentinel\` is its control: a clean download, and exactly the one row no launch wrote found."
  echo
  echo "Result: $([ $status = 0 ] && echo "clean: every tool ran the sweep with 0 errors and detected its control" || echo "NOT CLEAN: see the table and the logs")"
} > "$out/sanitizer-summary.md"
echo "summary: $out/sanitizer-summary.md"
exit $status
