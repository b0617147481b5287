#!/usr/bin/env bash
# Fuzzes the sweep-spec and contract loaders with libFuzzer (clang, ASan + UBSan), each target for
# SECONDS (default 600), seeded from sweeps/ and contract/ and from long, deeply nested documents
# (up to 100,000 levels, 200 KB: inputs up to 256 KB, with the JSON dictionary tests/fuzz/json.dict).
# Prints executions, time and findings; a crash, hang or sanitizer report fails the run and
# leaves the reproducer in build-fuzz/.
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-600}
build=${BITCHECK_FUZZ_BUILD_DIR:-$root/build-fuzz}
command -v clang++ >/dev/null || { echo "fuzz: clang++ is needed (apt-get install clang)"; exit 2; }
"$root/scripts/setup.sh" --deps-only
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DBITCHECK_WITH_CUDA=OFF -DBITCHECK_SANITIZE=ON -DBITCHECK_FUZZ=ON -DBITCHECK_WERROR=OFF >/dev/null
cmake --build "$build" --parallel --target fuzz_spec fuzz_contract
# Nesting at the limit, one level past it, and far past it (arrays, objects, unclosed): the
# deepest 100,000 levels of arrays and 40,000 of objects, each within -max_len.
deep_seeds() {
  local depth
  for depth in 64 65 100000; do
    { printf '%*s' "$depth" '' | tr ' ' '['; printf '%*s' "$depth" '' | tr ' ' ']'; } \
      > "$1/deep-arrays-$depth.json"
  done
  for depth in 64 65 40000; do
    { printf '%*s' "$depth" '' | sed 's/ /{"a":/g'; printf '1%*s' "$depth" '' | tr ' ' '}'; } \
      > "$1/deep-objects-$depth.json"
  done
  { printf '{"ops": '; printf '%*s' 100000 '' | tr ' ' '['; } > "$1/deep-unclosed.json"
}

# Both targets run at once (one core each), for the same wall time.
for target in spec contract; do
  corpus="$build/corpus-$target"
  mkdir -p "$corpus"
  if [ "$target" = spec ]; then cp "$root"/sweeps/*.json "$root"/tests/data/*.json "$corpus/" 2>/dev/null || true;
  else cp "$root"/contract/contract.json "$corpus/"; fi
  deep_seeds "$corpus"
  (set +e; cd "$build"; "$build/tests/fuzz_$target" "$corpus" -max_total_time="$seconds" -timeout=10 \
     -rss_limit_mb=4096 -max_len=262144 -dict="$root/tests/fuzz/json.dict" -print_final_stats=1 \
     > "$build/fuzz-$target.log" 2>&1; echo $? > "$build/fuzz-$target.rc") &
done
wait
status=0
for target in spec contract; do
  log="$build/fuzz-$target.log"
  [ "$(cat "$build/fuzz-$target.rc")" = 0 ] || status=1
  execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
  echo "fuzz_$target: ${execs:-?} executions in ${seconds} s, exit $(cat "$build/fuzz-$target.rc"), $(grep -c -E '^==[0-9]+==ERROR|runtime error|deadly signal' "$log") sanitizer/crash reports (log: $log)"
done
exit $status
