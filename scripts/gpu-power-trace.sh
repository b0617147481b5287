#!/usr/bin/env bash
# Runs on the GPU machine, from a bundle (scripts/gpu-bundle.sh): the SM clock, power draw and
# throttle reasons (nvidia-smi, every 50 ms) while bitcheck's head-dim-128 attention forward and
# PyTorch SDPA's run, for L = 4096 and 8192 (batch 4, 32 heads, 8 KV heads, causal, bf16): ours as
# `bitcheck bench --repeats 30` and `--repeats N` (1000 at 4096, 300 at 8192), SDPA as a loop of
# its forward for 4 s, 10 launches per CUDA-event pair. Shows whether a short bench run measures the
# card below its power limit, and for which side. Writes OUT/smi.csv, OUT/marks.txt (phase start and
# end), OUT/ours-L.txt, OUT/sdpa-L.txt and OUT/power-trace.md (per phase, scripts/power-phases.py:
# samples above 250 W, their median clock and power, the share with the software power cap active,
# the throttle reasons seen; the times).
#   scripts/gpu-power-trace.sh BUNDLE_DIR OUT_DIR
set -uo pipefail
bundle=$(cd "${1:?bundle dir}" && pwd)
out=$(mkdir -p "${2:?output dir}" && cd "$2" && pwd)
scripts=$(cd "$(dirname "$0")" && pwd)
cd "$bundle"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > "$out/device.txt" || exit 3
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -lms 50 > "$out/smi.csv" &
smi=$!
trap 'kill $smi 2>/dev/null' EXIT
mark() { echo "$(date +%Y/%m/%d\ %H:%M:%S.%3N) $1" >> "$out/marks.txt"; }
: > "$out/marks.txt"
for L in 4096 8192; do
  spec=$(mktemp --suffix=.json)
  printf '{"schema_version": 1, "description": "power trace", "defaults": {"dtypes": ["bf16"], "batches": [4], "passes": ["forward"]}, "ops": {"attention": {"layouts": ["seq_alone"], "shapes": [{"H": 32, "KVH": 8, "D": 128, "L": %d}]}}}\n' "$L" > "$spec"
  n=1000; [ "$L" = 8192 ] && n=300
  : > "$out/ours-$L.txt"
  for reps in 30 $n; do
    mark "ours-$L-$reps-start"
    bin/bitcheck bench --spec "$spec" --op attention --impl fixed-order --repeats "$reps" --out "$out/bench-$L-$reps" > /dev/null 2>&1
    mark "ours-$L-$reps-end"
    echo "repeats $reps: $(grep '^| attention' "$out/bench-$L-$reps/bench.md" | cut -d'|' -f7) ms" >> "$out/ours-$L.txt"
    rm -rf "$out/bench-$L-$reps"
  done
  rm -f "$spec"
  mark "sdpa-$L-start"
  python3 - "$L" > "$out/sdpa-$L.txt" 2>&1 <<'PY'
import sys, time, torch, torch.nn.functional as F
L = int(sys.argv[1])
q = torch.randn(4, 32, L, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(4, 8, L, 128, device="cuda", dtype=torch.bfloat16)
v = torch.randn_like(k)
attend = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
for _ in range(5):
    attend()
torch.cuda.synchronize()
start = time.time()
while time.time() - start < 4:
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(10):
        attend()
    e1.record()
    torch.cuda.synchronize()
    print("ms", e0.elapsed_time(e1) / 10)
PY
  mark "sdpa-$L-end"
done
kill $smi 2>/dev/null; wait $smi 2>/dev/null
python3 "$scripts/power-phases.py" "$out/smi.csv" "$out/marks.txt" \
  --title "# SM clock and power during the attention forward ($(cat "$out/device.txt"))" > "$out/power-trace.md"
python3 - "$out" >> "$out/power-trace.md" <<'PY'
import statistics, sys
out = sys.argv[1]
print("\nOurs (`bitcheck bench`, median of the timed launches):\n")
for L in (4096, 8192):
    for line in open(f"{out}/ours-{L}.txt"):
        print(f"- L = {L}, {line.strip()}")
print("\nSDPA's forward, ms per launch in each group of 10 (first three, median, last three):\n")
for L in (4096, 8192):
    times = [float(l.split()[1]) for l in open(f"{out}/sdpa-{L}.txt") if l.startswith("ms")]
    if times:
        print(f"- L = {L}: {', '.join(f'{t:.3f}' for t in times[:3])}; median {statistics.median(times):.3f}; "
              f"{', '.join(f'{t:.3f}' for t in times[-3:])} ({len(times)} groups)")
print("\n(throttle reasons: 0x4 is the software power cap)")
PY
cat "$out/power-trace.md"
