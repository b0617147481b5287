#!/usr/bin/env bash
# Runs on the GPU machine, from a bundle made by scripts/gpu-bundle.sh: the GPU tests, the GPU
# sweep (sweeps/gpu.json or --spec, CUDA backend) and the benchmark, writing reports and logs to OUT_DIR.
#   scripts/gpu-check.sh BUNDLE_DIR OUT_DIR [--spec FILE] [--ops a,b] [--dtype d] [--batch m,..] [--pass p]
#       [--impl a,b] [--deadline S] [--jobs N] [--skip-bench] [--skip-tests] [--skip-sweep]
# The sweep's shards are spread round-robin over the GPUs present (CUDA_VISIBLE_DEVICES).
# The GPU machine needs only the CUDA driver and cuBLASLt (no package registry there); from a
# development machine, through the device tool:
#   scripts/gpu-bundle.sh .gpu-bundle && run "scripts/gpu-check.sh .gpu-bundle \$OUT" (carry .gpu-bundle)
# Where the working tree and the bundle together exceed what a call may carry, carry the bundle packed
# (tar czf .gpu-bundle-z/bundle.tgz .gpu-bundle: about a quarter of the size) and unpack it first.
set -uo pipefail
bundle=$(cd "${1:?bundle dir}" && pwd)
out=${2:?output dir}
shift 2
ops=all bench=1 tests=1 sweep=1 jobs=4 dtypes="" deadline=0 spec=sweeps/gpu.json
while [ $# -gt 0 ]; do
  case "$1" in
    --ops) ops=$2; shift 2 ;;
    --spec) spec=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --dtype) dtypes="$dtypes --dtype $2"; shift 2 ;;
    --batch) dtypes="$dtypes --batch $2"; shift 2 ;;
    --pass) dtypes="$dtypes --pass $2"; shift 2 ;;
    --impl) dtypes="$dtypes --impl $2"; shift 2 ;;
    --deadline) deadline=$2; shift 2 ;;
    --skip-bench) bench=0; shift ;;
    --skip-tests) tests=0; shift ;;
    --skip-sweep) sweep=0; shift ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
cd "$bundle"
status=0
# The GPUs to use: CUDA_VISIBLE_DEVICES when set, else every GPU present.
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  IFS=, read -r -a gpu_list <<< "$CUDA_VISIBLE_DEVICES"
else
  mapfile -t gpu_list < <(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -E '^[0-9]+$')
fi
[ ${#gpu_list[@]} -gt 0 ] || gpu_list=(0)
gpus=${#gpu_list[@]}
{
  echo "revision: $(cat REVISION)"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
} | tee "$out/device.txt"

if [ $tests = 1 ] && [ -x tests/bitcheck_gpu_tests ]; then
  echo "== GPU tests"
  tests/bitcheck_gpu_tests --reporter compact > "$out/gpu-tests.log" 2>&1
  rc=$?; tail -n 3 "$out/gpu-tests.log"; [ $rc = 0 ] || status=1
fi
if [ $sweep = 1 ]; then
  # Host-side checking (layouts, bitwise comparison, references) dominates GPU-sized cases, so
  # the sweep runs as $jobs interleaved shards on the one GPU, then merges into report.json.
  echo "== GPU sweep $spec ($jobs shards over $gpus GPUs)"
  start=$(date +%s)
  for ((i = 0; i < jobs; i++)); do
    # --deadline S: each shard gets SIGTERM after S seconds and writes a partial report marked
    # interrupted, so a run that would outlast its slot still returns what it checked.
    limit=(); [ "$deadline" -gt 0 ] && limit=(timeout -s TERM "$deadline")
    CUDA_VISIBLE_DEVICES=${gpu_list[$((i % gpus))]} "${limit[@]}" bin/bitcheck sweep --spec "$spec" --backend cuda --op "$ops" $dtypes --out "$out" \
      --report-name "shard$i.json" --shard "$i/$jobs" --pins contract/pins \
      > "$out/sweep-shard$i.log" 2>&1 &
  done
  wait
  shards=()
  for ((i = 0; i < jobs; i++)); do [ -f "$out/shard$i.json" ] && shards+=("$out/shard$i.json"); done
  if [ ${#shards[@]} -eq "$jobs" ]; then
    bin/bitcheck merge --out "$out/report.json" "${shards[@]}" > "$out/sweep.log" 2>&1
    rc=$?
    rm -f "${shards[@]}"
  else
    echo "a shard wrote no report; see sweep-shard*.log" > "$out/sweep.log"; rc=3
  fi
  cat "$out/sweep.log"; echo "sweep: exit $rc in $(( $(date +%s) - start )) s"
  [ $rc = 0 ] || status=1
fi
if [ $bench = 1 ]; then
  echo "== bench"
  bin/bitcheck bench --spec sweeps/gpu.json --op "$ops" --dtype bf16 --out "$out" \
    --pins contract/pins > "$out/bench.log" 2>&1
  rc=$?; tail -n 5 "$out/bench.log"; [ $rc = 0 ] || status=1
fi
exit $status
