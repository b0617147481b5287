#!/usr/bin/env bash
# Runs on the GPU machine, from a bundle (scripts/gpu-bundle.sh): the attention bench of bitcheck's
# fixed-order kernels (forward, forward + backward, decode step) and of PyTorch SDPA on the same
# shapes, in one call, and the table of both (scripts/attention-vs-sdpa.py) in OUT/attention-vs-sdpa.md;
# OUT/power.md has the SM clock, power and throttle reasons during each run (scripts/power-phases.py).
#   scripts/gpu-attention-bench.sh BUNDLE_DIR OUT_DIR [--skip-backward] [--env NAME=VALUE] [--tag T]
#       [--rounds N] [--repeats N (default 300)]
# --env sets a variable for bitcheck's runs only (BITCHECK_ATTENTION_SCHEDULE=cooperative, say); with
# --tag the files are OUT/T-*.json and OUT/T-attention-vs-sdpa.md, so variants can share OUT and one
# SDPA run (kept when OUT/sdpa.json exists).
# --rounds N (N > 1) runs bitcheck's benches and SDPA's N times, taking turns, into OUT/rK-*.json
# (round K, SDPA's included, so nothing is kept from an earlier run), and the table gives each side's
# median time, the median of the rounds' ratios and their range: SDPA's time moves between calls
# and rounds by up to 15 %, far more than bitcheck's.
# --repeats N times N launches per point on both sides, after each side's warm-up launches (5);
# default 300: sustained, so that both sides run at the card's power limit, as a training or serving
# job does. --repeats 30 gives the short runs of bitcheck bench's own default (SDPA's script: 20),
# which measure the card's power state as much as the kernels: on an H200 at L = 8192 SDPA's forward
# took 3.54 ms in its first launches and 3.90 over 4 s at the 700 W cap (scripts/gpu-power-trace.sh);
# docs/results.md ("Attention") has both kinds of runs of the same kernels, and their spread.
set -uo pipefail
bundle=$(cd "${1:?bundle dir}" && pwd)
out=$(mkdir -p "${2:?output dir}" && cd "$2" && pwd)
shift 2
backward=1 tag="" environment=() rounds=1 repeats=(--repeats 300)
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-backward) backward=0; shift ;;
    --env) environment+=("$2"); shift 2 ;;
    --tag) tag="$2-"; shift 2 ;;
    --rounds)
      rounds="$2"; shift 2
      [[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "gpu-attention-bench: --rounds needs a positive count, got '$rounds'" >&2; exit 2; } ;;
    --repeats)
      [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "gpu-attention-bench: --repeats needs a positive count, got '${2:-}'" >&2; exit 2; }
      repeats=(--repeats "$2"); shift 2 ;;
    *) echo "gpu-attention-bench: unknown argument $1" >&2; exit 2 ;;
  esac
done
scripts=$(cd "$(dirname "$0")" && pwd)
cd "$bundle"
status=0
# The SM clock, power and throttle reasons every 100 ms while both sides run, and each run's start
# and end, so that OUT/TAGpower.md (scripts/power-phases.py) shows whether each side ran at the
# card's power limit.
marks="$out/${tag}power-marks.txt" smi_csv="$out/${tag}power-smi.csv"
: > "$marks"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -lms 100 > "$smi_csv" 2> /dev/null &
smi=$!
trap 'kill $smi 2> /dev/null' EXIT
mark() { echo "$(date +%Y/%m/%d\ %H:%M:%S.%3N) $1" >> "$marks"; }
bench() {  # bench NAME SPEC [bench args]
  local name=$1 spec=$2; shift 2
  mark "${tag}$name-start"
  env "${environment[@]}" bin/bitcheck bench --spec "$spec" --op attention "${repeats[@]}" --out "$out/${tag}$name" "$@" \
    > "$out/${tag}$name.log" 2>&1 || { echo "bench $name failed:"; tail -5 "$out/${tag}$name.log"; status=1; }
  mark "${tag}$name-end"
  [ -f "$out/${tag}$name/bench.json" ] && cp "$out/${tag}$name/bench.json" "$out/${tag}$name.json"
}
sdpa() {  # sdpa PREFIX: SDPA's forward and backward, and its decode step, into OUT/PREFIXsdpa*.json
  mark "$1sdpa-start"
  python3 "$scripts/bench-attention-sdpa.py" "${repeats[@]}" --json "$out/$1sdpa.json" > "$out/$1sdpa.txt" 2>&1 || status=1
  mark "$1sdpa-end"
  mark "$1sdpa-decode-start"
  python3 "$scripts/bench-attention-sdpa.py" --decode --seqs 1024,8192 --dims 128 "${repeats[@]}" \
    --json "$out/$1sdpa-decode.json" > "$out/$1sdpa-decode.txt" 2>&1 || status=1
  mark "$1sdpa-decode-end"
}
forward=() backward_files=() decode=() sdpa_files=() sdpa_decode=()
if [ "$rounds" = 1 ]; then
  bench forward sweeps/bench-attention.json
  [ $backward = 1 ] && bench backward sweeps/bench-attention-backward.json --pass backward
  bench decode sweeps/bench-attention-decode.json
  [ -f "$out/sdpa.json" ] || sdpa ""
  forward=("$out/${tag}forward.json") backward_files=("$out/${tag}backward.json")
  decode=("$out/${tag}decode.json") sdpa_files=("$out/sdpa.json") sdpa_decode=("$out/sdpa-decode.json")
else
  for ((r = 1; r <= rounds; r++)); do
    prefix="r$r-" saved_tag=$tag
    tag="$prefix$saved_tag"
    bench forward sweeps/bench-attention.json
    [ $backward = 1 ] && bench backward sweeps/bench-attention-backward.json --pass backward
    bench decode sweeps/bench-attention-decode.json
    tag=$saved_tag
    sdpa "$prefix"
    forward+=("$out/$prefix${tag}forward.json") backward_files+=("$out/$prefix${tag}backward.json")
    decode+=("$out/$prefix${tag}decode.json") sdpa_files+=("$out/${prefix}sdpa.json")
    sdpa_decode+=("$out/${prefix}sdpa-decode.json")
  done
fi
args=(--forward "${forward[@]}" --decode "${decode[@]}" --sdpa "${sdpa_files[@]}"
      --sdpa-decode "${sdpa_decode[@]}" --out "$out/${tag}attention-vs-sdpa.md")
[ $backward = 1 ] && args+=(--backward "${backward_files[@]}")
[ ${#environment[@]} -gt 0 ] && args+=(--title "Attention against PyTorch SDPA (${environment[*]})")
args+=("${repeats[@]}")
python3 "$scripts/attention-vs-sdpa.py" "${args[@]}" || status=1
kill $smi 2> /dev/null
wait $smi 2> /dev/null
if [ -s "$smi_csv" ]; then
  python3 "$scripts/power-phases.py" "$smi_csv" "$marks" --title "## SM clock and power of each run \
($(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader 2> /dev/null))" \
    > "$out/${tag}power.md" || status=1
fi
exit $status
