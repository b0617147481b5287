#!/usr/bin/env bash
# The cost of kernel provenance: the same sweep without and with --provenance, alternately, and
# the wall time and impl time of each (from the reports' meta), with the ratio of the medians.
#   scripts/provenance-overhead.sh BITCHECK_BINARY OUT_DIR [--rounds N] [-- sweep arguments]
# e.g. scripts/provenance-overhead.sh bin/bitcheck /tmp/overhead -- --spec sweeps/gpu.json --backend cuda
# Writes OUT_DIR/overhead.md (the table) and keeps each run's report under OUT_DIR/{off,on}-R/.
# Exit code: 0, or the first sweep's exit code above 1 (an error: the times would mean nothing).
set -uo pipefail
bitcheck=$(realpath "${1:?bitcheck binary}")
out=${2:?output dir}
shift 2
rounds=3 sweep_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --) shift; sweep_args=("$@"); break ;;
    *) echo "provenance-overhead: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$rounds" in '' | *[!0-9]* | 0) echo "provenance-overhead: --rounds wants a positive count" >&2; exit 2 ;; esac
mkdir -p "$out"
for ((round = 1; round <= rounds; round++)); do
  for mode in off on; do
    flag=()
    [ "$mode" = on ] && flag=(--provenance)
    "$bitcheck" sweep "${sweep_args[@]}" "${flag[@]}" --no-progress --out "$out/$mode-$round" \
      > "$out/$mode-$round.log" 2>&1
    rc=$?
    if [ $rc -gt 1 ] || [ ! -f "$out/$mode-$round/report.json" ]; then
      echo "provenance-overhead: sweep ($mode, round $round) exit $rc, see $out/$mode-$round.log" >&2
      exit $(( rc > 1 ? rc : 3 ))
    fi
  done
done
python3 - "$out" "$rounds" <<'EOF' | tee "$out/overhead.md"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def times(mode):
    wall, impl, kernels = [], [], 0
    for r in range(1, rounds + 1):
        report = json.load(open(f"{out}/{mode}-{r}/report.json"))
        wall.append(report["meta"]["wall_seconds"])
        impl.append(report["meta"]["time_split"]["impl_seconds"])
        kernels = sum(1 for c in report["results"] if c.get("kernels"))
    return statistics.median(wall), statistics.median(impl), kernels
off, on = times("off"), times("on")
print("| provenance | wall s (median) | impl s (median) | cases with kernels |")
print("|---|---|---|---|")
print(f"| off | {off[0]:.2f} | {off[1]:.2f} | {off[2]} |")
print(f"| on | {on[0]:.2f} | {on[1]:.2f} | {on[2]} |")
print(f"\noverhead: wall x{on[0] / off[0]:.3f}, impl x{on[1] / max(off[1], 1e-9):.3f} "
      f"({rounds} rounds each, alternating)")
EOF
