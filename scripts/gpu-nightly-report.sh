#!/usr/bin/env bash
# Runs on the GPU machine, from a bundle (scripts/gpu-bundle.sh): the nightly sweep with path
# coverage required, and the small files reports/gpu/nightly-<device>/ keeps of it: matrix.md, the
# page index.html, summary.json (scripts/compact-report.py), coverage.txt (`bitcheck coverage`),
# times.txt (where the case seconds go) and sweep.log. The full report stays in OUT/run. Kernel
# provenance is on (--provenance: about 8% of the wall time, docs/provenance.md); SWEEP_ARGS go to
# the sweep (e.g. --device-slots 8).
#   scripts/gpu-nightly-report.sh BUNDLE_DIR OUT_DIR [--jobs N] [--previous REPORT] [-- SWEEP_ARGS...]
set -uo pipefail
bundle=$(cd "${1:?bundle dir}" && pwd)
out=$(mkdir -p "${2:?output dir}" && cd "$2" && pwd)
shift 2
jobs=16 previous=() extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) jobs=$2; shift 2 ;;
    --previous) previous=(--previous "$2"); shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "gpu-nightly-report: unknown argument $1" >&2; exit 2 ;;
  esac
done
scripts=$(cd "$(dirname "$0")" && pwd)
cd "$bundle"
"$scripts/nightly.sh" bin/bitcheck "$out/run" --spec sweeps/nightly-gpu.json --backend cuda \
  --jobs "$jobs" "${previous[@]}" --provenance -- --require-coverage "${extra[@]}" > "$out/sweep.log" 2>&1
status=$?
echo "nightly exit $status" >> "$out/sweep.log"
[ -f "$out/run/report.json" ] || { echo "gpu-nightly-report: no report"; exit 3; }
cp "$out/run/matrix.md" "$out/run/index.html" "$out/" 2>/dev/null
python3 "$scripts/compact-report.py" "$out/run/report.json" "$out/summary.json"
bin/bitcheck coverage "$out/run/report.json" > "$out/coverage.txt" 2>&1
python3 - "$out/run/report.json" > "$out/times.txt" <<'PY'
import collections, json, sys
report = json.load(open(sys.argv[1]))
groups = collections.defaultdict(lambda: [0.0, 0.0, 0])
for case in report["results"]:
    parts = case["id"].split("/")
    key = "/".join([parts[0]] + parts[2:5])  # op/dtype/pass/shape
    timings = case.get("timings", {})
    group = groups[key]
    group[0] += timings.get("total_seconds", 0.0)
    group[1] += timings.get("reference_seconds", 0.0)
    group[2] += 1
total = sum(g[0] for g in groups.values())
print(f"total case seconds {total:.0f}, wall {report['meta'].get('wall_seconds', 0):.1f}")
for key, (seconds, reference, cases) in sorted(groups.items(), key=lambda item: -item[1][0])[:40]:
    print(f"{seconds:8.1f} s ref {reference:7.1f} {cases:5d} cases  {key}")
PY
exit $status
