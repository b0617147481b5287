#!/usr/bin/env bash
# Runs on the GPU machine, from a bundle (scripts/gpu-bundle.sh): the attention bench of bitcheck's
# fixed-order kernels (forward, forward + backward, decode step) and of PyTorch SDPA on the same
# shapes, in one call, and the table of both (scripts/attention-vs-sdpa.py) in OUT/attention-vs-sdpa.md.
#   scripts/gpu-attention-bench.sh BUNDLE_DIR OUT_DIR [--skip-backward] [--env NAME=VALUE] [--tag T]
# --env sets a variable for bitcheck's runs only (BITCHECK_ATTENTION_SCHEDULE=cooperative, say); with
# --tag the files are OUT/T-*.json and OUT/T-attention-vs-sdpa.md, so variants can share OUT and one
# SDPA run (kept when OUT/sdpa.json exists).
set -uo pipefail
bundle=$(cd "${1:?bundle dir}" && pwd)
out=$(mkdir -p "${2:?output dir}" && cd "$2" && pwd)
shift 2
backward=1 tag="" environment=()
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-backward) backward=0; shift ;;
    --env) environment+=("$2"); shift 2 ;;
    --tag) tag="$2-"; shift 2 ;;
    *) echo "gpu-attention-bench: unknown argument $1" >&2; exit 2 ;;
  esac
done
scripts=$(cd "$(dirname "$0")" && pwd)
cd "$bundle"
status=0
bench() {  # bench NAME SPEC [bench args]
  local name=$1 spec=$2; shift 2
  env "${environment[@]}" bin/bitcheck bench --spec "$spec" --op attention --out "$out/${tag}$name" "$@" \
    > "$out/${tag}$name.log" 2>&1 || { echo "bench $name failed:"; tail -5 "$out/${tag}$name.log"; status=1; }
  [ -f "$out/${tag}$name/bench.json" ] && cp "$out/${tag}$name/bench.json" "$out/${tag}$name.json"
}
bench forward sweeps/bench-attention.json
[ $backward = 1 ] && bench backward sweeps/bench-attention-backward.json --pass backward
bench decode sweeps/bench-attention-decode.json
if [ ! -f "$out/sdpa.json" ]; then
  python3 "$scripts/bench-attention-sdpa.py" --json "$out/sdpa.json" > "$out/sdpa.txt" 2>&1 || status=1
  python3 "$scripts/bench-attention-sdpa.py" --decode --seqs 1024,8192 --dims 128 \
    --json "$out/sdpa-decode.json" > "$out/sdpa-decode.txt" 2>&1 || status=1
fi
args=(--forward "$out/${tag}forward.json" --decode "$out/${tag}decode.json" --sdpa "$out/sdpa.json"
      --sdpa-decode "$out/sdpa-decode.json" --out "$out/${tag}attention-vs-sdpa.md")
[ $backward = 1 ] && args+=(--backward "$out/${tag}backward.json")
[ ${#environment[@]} -gt 0 ] && args+=(--title "Attention against PyTorch SDPA (${environment[*]})")
python3 "$scripts/attention-vs-sdpa.py" "${args[@]}" || status=1
exit $status
