#!/usr/bin/env bash
# Runs on the GPU machine, from a bundle made by scripts/gpu-bundle.sh: impls from outside bitcheck
# on the CUDA backend, in one call. The GPU tests of plugins and Python impls, the example plugin's
# CUDA matmuls (sweeps/plugin-gpu.json), PyTorch's defaults and the Triton matmul
# (sweeps/python-gpu.json, Python worker over CUDA IPC) and the bench of the Triton matmul against
# ours (sweeps/bench-python-gpu.json); writes to OUT_DIR what is committed under
# reports/gpu/python-<device>/:
#   summary.md                          what ran, exit codes, what each impl did (read this first)
#   plugin-status-matrix.md, plugin-summary.json, python-status-matrix.md, python-summary.json
#                                       status matrix (with the library defaults observed) and the
#                                       compact report (scripts/compact-report.py) of each sweep
#   bench.md, bench.json                the bench (cost of invariance, Python impls timed with CUDA
#                                       events in the worker)
#   gpu-tests.log, device.txt, python.txt, *.log
# and the full reports under OUT_DIR/full/ (several MB: regenerate rather than commit them).
#   scripts/gpu-python-report.sh BUNDLE_DIR OUT_DIR [--jobs N] [--deadline S] [--skip-tests]
#       [--skip-bench] [--provenance]
# --jobs N: sweep shards in parallel on the GPUs present (default 8; each shard starts its own
# Python worker, with its own CUDA context). --deadline S: each sweep gets SIGTERM after S seconds
# and keeps the cases it checked, the tests and the bench are stopped after S too (default 150:
# the whole run stays under 10 minutes). BITCHECK_PYTHON picks the worker's python3 (it needs
# torch; triton for the Triton matmul; cupy or the CUDA driver library for IPC).
# --provenance: the sweeps record the kernels every call launched (CUPTI in bitcheck, torch.profiler
# in the worker), so each drift of a library default names the kernels on both sides.
# Exit code: 0 when every sweep, the bench and the tests exit 0; else 1 (findings) or 3 (errors).
set -uo pipefail
bundle=$(cd "${1:?bundle dir}" && pwd)
out=${2:?output dir}
shift 2
jobs=8 deadline=150 tests=1 bench=1 provenance=()
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) jobs=$2; shift 2 ;;
    --deadline) deadline=$2; shift 2 ;;
    --skip-tests) tests=0; shift ;;
    --skip-bench) bench=0; shift ;;
    --provenance) provenance=(--provenance); shift ;;
    *) echo "gpu-python-report: unknown argument $1" >&2; exit 2 ;;
  esac
done
scripts=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/full"
out=$(cd "$out" && pwd)
cd "$bundle"
python=${BITCHECK_PYTHON:-python3}
export BITCHECK_PYTHON=$python
export PYTHONPATH="$bundle/python/examples${PYTHONPATH:+:$PYTHONPATH}"
plugin="$bundle/plugins/libbitcheck_example_plugin.so"
status=0
note() { echo "$*" | tee -a "$out/summary.log"; }
: > "$out/summary.log"

if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  IFS=, read -r -a gpu_list <<< "$CUDA_VISIBLE_DEVICES"
else
  mapfile -t gpu_list < <(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -E '^[0-9]+$')
fi
[ ${#gpu_list[@]} -gt 0 ] || gpu_list=(0)
devices=()
for ((i = 0; i < jobs; i++)); do devices+=("${gpu_list[$((i % ${#gpu_list[@]}))]}"); done
device_list=$(IFS=,; echo "${devices[*]}")
{
  echo "revision: $(cat REVISION 2>/dev/null || echo unknown)"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
} | tee "$out/device.txt"
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
slug=$(echo "$gpu_name" | grep -oiE 'h100|h200|a100|b200|l40s|gh200' | head -1 | tr 'A-Z' 'a-z')
"$python" - > "$out/python.txt" 2>&1 <<'EOF'
import importlib, sys
print("python", sys.version.split()[0])
for name in ("torch", "triton", "cupy", "numpy"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"))
    except Exception as error:  # what is missing is part of the report
        print(name, "missing:", type(error).__name__, error)
EOF
cat "$out/python.txt"
has_torch=0
"$python" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && has_torch=1

if [ $tests = 1 ]; then
  echo "== GPU tests of plugins and Python impls"
  timeout -s TERM "$deadline" tests/bitcheck_gpu_tests "[plugins],[python]" --reporter compact \
    > "$out/gpu-tests.log" 2>&1
  rc=$?; tail -n 3 "$out/gpu-tests.log"
  note "gpu tests [plugins],[python]: exit $rc"
  [ $rc = 0 ] || status=1
fi

# One sweep: shards over the GPUs (cost-balanced, merged), then the matrix and the compact report.
# A case that hangs (a Python function that never returns) is an error after 120 s.
sweep() {
  local name=$1; shift
  local start limit=()
  start=$(date +%s)
  [ "$deadline" -gt 0 ] && limit=(timeout -s TERM "$deadline")
  echo "== $name sweep"
  "${limit[@]}" bin/bitcheck sweep "$@" --backend cuda --devices "$device_list" --out "$out/full/$name" \
    --pins contract/pins --no-progress --case-timeout 120 "${provenance[@]}" > "$out/$name-sweep.log" 2>&1
  local rc=$?
  tail -n 6 "$out/$name-sweep.log"
  if [ -f "$out/full/$name/report.json" ]; then
    bin/bitcheck matrix "$out/full/$name/report.json" --format md --out "$out/$name-status-matrix.md"
    "$python" "$scripts/compact-report.py" "$out/full/$name/report.json" "$out/$name-summary.json"
  fi
  note "$name sweep: exit $rc in $(( $(date +%s) - start )) s"
  [ $rc = 0 ] || status=$(( rc == 1 && status != 3 ? 1 : 3 ))
}

sweep plugin --spec sweeps/plugin-gpu.json --plugin "$plugin"
if [ $has_torch = 1 ]; then
  sweep python --spec sweeps/python-gpu.json
else
  note "python sweep: skipped, no torch with CUDA in $python (see python.txt)"
  status=3
fi

if [ $bench = 1 ] && [ $has_torch = 1 ]; then
  echo "== bench"
  start=$(date +%s)
  CUDA_VISIBLE_DEVICES=${gpu_list[0]} timeout -s TERM "$deadline" \
    bin/bitcheck bench --spec sweeps/bench-python-gpu.json --out "$out/full/bench" --pins contract/pins \
    > "$out/bench.log" 2>&1
  rc=$?
  [ -f "$out/full/bench/bench.md" ] && cp "$out/full/bench/bench.md" "$out/full/bench/bench.json" "$out/"
  tail -n 12 "$out/bench.log"
  note "bench: exit $rc in $(( $(date +%s) - start )) s"
  [ $rc = 0 ] || status=3
fi

# summary.md: what ran and what each impl did, from the reports.
"$python" - "$out" "$gpu_name" "$(cat REVISION 2>/dev/null || echo unknown)" > "$out/summary.md" <<'EOF'
import json, os, sys
out, gpu, revision = sys.argv[1:4]
print(f"# Impls from outside bitcheck on {gpu or 'the GPU'} (bitcheck {revision})\n")
with open(os.path.join(out, "python.txt")) as stream:
    print("Python worker: " + ", ".join(line.strip() for line in stream if line.strip()) + "\n")
with open(os.path.join(out, "summary.log")) as stream:
    for line in stream:
        print("- " + line.strip())
print()
for name in ("plugin", "python"):
    path = os.path.join(out, "full", name, "report.json")
    if not os.path.exists(path):
        continue
    report = json.load(open(path))
    meta = report["meta"]
    print(f"## {name} sweep: {report['summary']['cases']} cases, exit {report['summary']['exit_code']}"
          + (" (interrupted)" if meta.get("interrupted") else "") + "\n")
    print(f"`{meta.get('command_line', '')}`\n")
    print("| impl | kind | dtype | pass | verdicts | drifted at (M: tensor layout max abs diff) |")
    print("|---|---|---|---|---|---|")
    groups = {}
    for c in report["results"]:
        key = (c["impl"], c["dtype"], c["pass"])
        group = groups.setdefault(key, {"verdicts": {}, "drift": [], "kind": (
            "observation" if c.get("observation") else "control" if c.get("control")
            else "invariant")})
        group["verdicts"][c["verdict"]] = group["verdicts"].get(c["verdict"], 0) + 1
        if c["verdict"] == "drift" and c.get("drift"):
            worst = max(c["drift"], key=lambda d: d.get("max_abs_diff") or 0)
            dims = ",".join(f"{k}={v}" for k, v in sorted(c["dims"].items()))
            group["drift"].append(f"{dims} M={c['rows']}: {worst['tensor']} {worst['layout']} "
                                  f"{worst.get('max_abs_diff') or 0:.3g}")
    for (impl, dtype, pass_), group in groups.items():
        verdicts = " ".join(f"{v}={n}" for v, n in sorted(group["verdicts"].items()))
        where = "; ".join(group["drift"][:5]) + (f"; and {len(group['drift']) - 5} more"
                                                  if len(group["drift"]) > 5 else "")
        print(f"| {impl} | {group['kind']} | {dtype} | {pass_} | {verdicts} | {where} |")
    errors = [c for c in report["results"] if c["verdict"] == "error"]
    for c in errors[:5]:
        print(f"\nerror in `{c['id']}`: {c.get('reason', '')[:400]}")
    print()
bench = os.path.join(out, "bench.md")
if os.path.exists(bench):
    print("## Bench\n")
    print(open(bench).read())
EOF
note "report files in $out (commit them under reports/gpu/python-${slug:-<device>}/, without full/)"
exit $status
