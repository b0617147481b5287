#!/usr/bin/env bash
#SBATCH --job-name=bitcheck-sweep
#SBATCH --array=0-7
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --time=04:00:00
#SBATCH --output=bitcheck-sweep-%A_%a.log
# A bitcheck sweep as a Slurm job array: one cost-balanced shard per array task, then a merge step
# that combines the shard reports into one and renders the status matrix.
#
#   scripts/slurm-sweep.sh --submit TASKS BITCHECK OUT [sweep arguments]
#       on the login node: submits the array (TASKS tasks) and a merge job that starts after every
#       task has ended (sbatch --dependency=afterany:JOBID); prints both job ids.
#   sbatch --array=0-7 scripts/slurm-sweep.sh BITCHECK OUT [sweep arguments]
#       shard mode (what each array task runs): bitcheck sweep --shard ID/COUNT [sweep arguments]
#       writing OUT/shard-ID-of-COUNT.json (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT and
#       SLURM_ARRAY_TASK_MIN come from Slurm; the index is ID - MIN). The sweep arguments must not
#       set --out, --report-name or --shard.
#   scripts/slurm-sweep.sh --merge BITCHECK OUT
#       merge mode: checks that every shard of the array wrote its report, merges them into
#       OUT/report.json and renders OUT/matrix.md, OUT/matrix.html and OUT/junit.xml.
#   scripts/slurm-sweep.sh --submit-ranks NODES GPUS_PER_NODE BITCHECK OUT [sweep arguments]
#       on the login node: submits one job of NODES nodes x GPUS_PER_NODE tasks (one per GPU) that
#       runs the ranks mode below; prints the job id.
#   scripts/slurm-sweep.sh --ranks BITCHECK OUT [sweep arguments]
#       ranks mode, tensor parallelism across nodes (what that job runs, on its first node):
#       bitcheck sweep --devices <the node's GPUs> --rank-launcher srun. The cases at tp > 1 run
#       in one srun step of SLURM_NTASKS tasks, a rank per GPU of every node, NCCL's unique ids
#       exchanged through files under OUT; the other cases in shards on the first node's GPUs.
#       Writes OUT/report.json, OUT/matrix.md, OUT/matrix.html and OUT/junit.xml. NVLink SHARP
#       and multicast stay off in every task (NCCL_NVLS_ENABLE=0, NCCL_COLLNET_ENABLE=0).
# BITCHECK and OUT must be visible from every node (a shared file system). Exit codes: those of
# bitcheck sweep / merge (0 pass, 1 findings, 2 bad usage, 3 error); merge mode exits 3 when a
# shard report is missing.
set -uo pipefail

usage() {
  sed -n '2,/^set -uo/p' "$0" | grep '^#   \|^#       ' >&2
  exit 2
}

submit() {
  local tasks=${1:?tasks} bitcheck=${2:?bitcheck binary} out=${3:?output dir}
  shift 3
  [[ "$tasks" =~ ^[1-9][0-9]*$ ]] || { echo "slurm-sweep: TASKS must be a positive integer, got $tasks" >&2; exit 2; }
  local script array_job merge_job
  script=$(realpath "$0")
  bitcheck=$(realpath "$bitcheck")
  mkdir -p "$out"
  out=$(realpath "$out")
  array_job=$(sbatch --parsable --array="0-$((tasks - 1))" --output="$out/shard-%a.log" \
    "$script" "$bitcheck" "$out" "$@") || exit 3
  array_job=${array_job%%;*}
  # --wrap: the merge job does not read this file's #SBATCH header (no array, no GPU).
  merge_job=$(sbatch --parsable --dependency="afterany:$array_job" --job-name=bitcheck-merge \
    --output="$out/merge.log" --wrap "$(printf '%q ' "$script" --merge "$bitcheck" "$out")") || exit 3
  echo "submitted: shards job $array_job ($tasks tasks), merge job ${merge_job%%;*} -> $out/report.json"
}

shard() {
  local bitcheck=${1:?bitcheck binary} out=${2:?output dir}
  shift 2
  local id=${SLURM_ARRAY_TASK_ID:?shard mode runs as a Slurm array task (SLURM_ARRAY_TASK_ID)}
  local count=${SLURM_ARRAY_TASK_COUNT:?SLURM_ARRAY_TASK_COUNT}
  local index=$((id - ${SLURM_ARRAY_TASK_MIN:-0}))
  mkdir -p "$out"
  # Recorded for the merge step: how many shards the array has.
  echo "$count" > "$out/shards.count"
  exec "$bitcheck" sweep --no-progress --shard "$index/$count" --out "$out" \
    --report-name "shard-$index-of-$count.json" "$@"
}

merge() {
  local bitcheck=${1:?bitcheck binary} out=${2:?output dir}
  [ -f "$out/shards.count" ] || { echo "slurm-sweep: no shard ran ($out/shards.count is missing)" >&2; exit 3; }
  local count shards=() missing=0 status
  count=$(cat "$out/shards.count")
  for ((i = 0; i < count; i++)); do
    local report="$out/shard-$i-of-$count.json"
    if [ -f "$report" ]; then shards+=("$report"); else echo "slurm-sweep: shard $i/$count wrote no report" >&2; missing=1; fi
  done
  [ "$missing" -eq 0 ] || exit 3
  "$bitcheck" merge --out "$out/report.json" "${shards[@]}"
  status=$?
  render "$bitcheck" "$out" "$status"
}

submit_ranks() {
  local nodes=${1:?nodes} gpus=${2:?GPUs per node} bitcheck=${3:?bitcheck binary} out=${4:?output dir}
  shift 4
  for count in "$nodes" "$gpus"; do
    [[ "$count" =~ ^[1-9][0-9]*$ ]] || { echo "slurm-sweep: NODES and GPUS_PER_NODE must be positive integers, got $count" >&2; exit 2; }
  done
  local script job
  script=$(realpath "$0")
  bitcheck=$(realpath "$bitcheck")
  mkdir -p "$out"
  out=$(realpath "$out")
  job=$(sbatch --parsable --nodes="$nodes" --ntasks-per-node="$gpus" --gpus-per-node="$gpus" \
    --job-name=bitcheck-ranks --output="$out/ranks.log" \
    --wrap "$(printf '%q ' "$script" --ranks "$bitcheck" "$out" "$@")") || exit 3
  echo "submitted: ranks job ${job%%;*} ($nodes nodes x $gpus GPUs) -> $out/report.json"
}

ranks() {
  local bitcheck=${1:?bitcheck binary} out=${2:?output dir}
  shift 2
  [ -n "${SLURM_NTASKS:-}" ] || { echo "slurm-sweep: --ranks runs inside a Slurm allocation (SLURM_NTASKS)" >&2; exit 2; }
  export NCCL_NVLS_ENABLE=0 NCCL_COLLNET_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
  local gpus=${SLURM_GPUS_ON_NODE:-${SLURM_NTASKS_PER_NODE:-1}} status
  mkdir -p "$out"
  "$bitcheck" sweep --no-progress --devices "$(seq -s, 0 $((gpus - 1)))" --rank-launcher srun \
    --out "$out" "$@"
  status=$?
  render "$bitcheck" "$out" "$status"
}

render() {  # BITCHECK OUT STATUS: the matrices of OUT/report.json; exits with STATUS
  local bitcheck=$1 out=$2 status=$3
  [ -f "$out/report.json" ] || exit "$status"
  for format in md html junit; do
    local file="$out/matrix.$format"
    [ "$format" = junit ] && file="$out/junit.xml"
    "$bitcheck" matrix "$out/report.json" --format "$format" --out "$file" || exit 3
  done
  exit "$status"
}

case "${1:-}" in
  --submit) shift; submit "$@" ;;
  --merge) shift; merge "$@" ;;
  --submit-ranks) shift; submit_ranks "$@" ;;
  --ranks) shift; ranks "$@" ;;
  ""|-h|--help) usage ;;
  *) shard "$@" ;;
esac
