#!/usr/bin/env bash
# Mutation testing of the harness itself: planted slips in lib/ (scripts/harness-mutants/
# NN-name.patch, each with a header naming the slip), each built into a CPU-only bitcheck and run
# against the tests. A mutant is killed when `ctest -L 'unit|cli'` fails; the exit code of the
# default CPU sweep is recorded beside it (a slip that turns verdicts into `pass` leaves it at 0).
#
#   scripts/harness-mutation-test.sh check
#       every patch has its header fields, changes lib/ only and applies to this tree
#       (git apply --check); ctest runs it as harness_mutation_patches
#   scripts/harness-mutation-test.sh run [--only 01,02,...] [--in-place] [--out FILE]
#       a copy of HEAD (git archive) in build-harness-mutants/src (BITCHECK_HARNESS_MUTANTS_WORKDIR
#       for another folder), one CPU-only build in it (Release, ccache when present); the unmutated
#       tree first (its tests must pass), then per patch: apply, incremental build, `ctest -L
#       'unit|cli'` (but harness_mutation_patches), the default CPU sweep (`bitcheck sweep --op all --backend cpu`), revert. The
#       score goes to FILE (default reports/harness-mutation.md), each run's logs to the folder's
#       results/. --in-place applies the patches to this tree instead (lib/ must have no
#       uncommitted change; each patch is reverted after its run, and on any failure) and builds
#       in build-harness-mutants itself: ccache then finds every object of an earlier build of
#       this tree, where a copy recompiles the tests (the source path is compiled into them).
#       --unit-only runs `ctest -L unit` alone, stopping at a mutant's first failing test, and no
#       sweep (a fraction of the time: the standard is that a broken comparison, layout or
#       reduction fails a unit test).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
patches="$root/scripts/harness-mutants"
workdir=${BITCHECK_HARNESS_MUTANTS_WORKDIR:-$root/build-harness-mutants}
header_fields=(file slip why)

die() { echo "harness-mutation-test: $*" >&2; exit 2; }

mutant_names() {  # ONLY (comma-separated NN or names, empty for all)
  local patch name
  for patch in "$patches"/[0-9][0-9]-*.patch; do
    [ -e "$patch" ] || continue
    name=$(basename "$patch" .patch)
    if [ -z "$1" ] || [[ ",$1," == *",${name%%-*},"* ]] || [[ ",$1," == *",$name,"* ]]; then
      echo "$name"
    fi
  done
}

header_value() {  # PATCH FIELD: the field's first line
  sed -n "s/^# $2: //p" "$1" | head -1
}

# ---- check ---------------------------------------------------------------------------------------

check_phase() {
  local names status=0 name patch field
  mapfile -t names < <(mutant_names "")
  [ ${#names[@]} -ge 8 ] || die "check: ${#names[@]} harness mutants in $patches, expected 8 or more"
  for name in "${names[@]}"; do
    patch="$patches/$name.patch"
    grep -qx "# bitcheck harness mutant: $name" "$patch" ||
      { echo "$name: the first line must be '# bitcheck harness mutant: $name'"; status=1; }
    for field in "${header_fields[@]}"; do
      [ -n "$(header_value "$patch" "$field")" ] || { echo "$name: no '# $field:' line"; status=1; }
    done
    if grep -E '^\+\+\+ b/' "$patch" | grep -qv '^+++ b/lib/'; then
      echo "$name: changes a file outside lib/"
      status=1
    fi
    (cd "$root" && git apply --check "$patch") ||
      { echo "$name: does not apply to this tree: refresh it"; status=1; }
  done
  [ $status = 0 ] && echo "harness-mutation-test: ${#names[@]} mutants, headers complete, all apply"
  return $status
}

# ---- run -----------------------------------------------------------------------------------------

# The failing tests of a ctest log, comma-separated.
failed_tests() {
  sed -n '/The following tests FAILED:/,$p' "$1" | sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (.*)$/\1/p' |
    paste -sd, -
}

# ctest, then the default CPU sweep, in BUILD; results into DIR (ctest.log, sweep.log, ctest.rc,
# sweep.rc). harness_mutation_patches is left out: with a patch applied, that patch no longer
# applies, which says nothing about the harness.
test_build() {  # BUILD DIR
  # --unit-only stops at the first failing test: a mutant is killed by one.
  local stop=()
  [ "$labels" = unit ] && [ "$(basename "$2")" != baseline ] && stop=(--stop-on-failure)
  (cd "$1" && ctest -L "$labels" -E '^harness_mutation_patches$' -j "$(nproc)" "${stop[@]}" \
    --output-on-failure > "$2/ctest.log" 2>&1)
  echo $? > "$2/ctest.rc"
  if [ "$labels" = unit ]; then echo - > "$2/sweep.rc"; return; fi
  rm -rf "$2/sweep"
  "$1/apps/bitcheck" sweep --op all --backend cpu --no-progress --out "$2/sweep" > "$2/sweep.log" 2>&1
  echo $? > "$2/sweep.rc"
  rm -rf "$2/sweep"
}

run_phase() {
  local only="" in_place=0 out="$root/reports/harness-mutation.md"
  labels='unit|cli'
  local command_line="scripts/harness-mutation-test.sh run $*"
  while [ $# -gt 0 ]; do
    case "$1" in
      --only) only=$2; shift 2 ;;
      --in-place) in_place=1; shift ;;
      --unit-only) labels=unit; shift ;;
      --out) out=$(realpath -m "$2"); shift 2 ;;
      *) die "run: unknown argument $1" ;;
    esac
  done
  command -v ninja >/dev/null || die "run: ninja not found (scripts/setup.sh installs it)"
  local names
  mapfile -t names < <(mutant_names "$only")
  [ ${#names[@]} -gt 0 ] || die "run: no mutant selected"
  local src="$workdir/src" build="$workdir/src/build" results="$workdir/results"
  local revision; revision=$(git -C "$root" rev-parse --short=12 HEAD) || die "run: $root is not a git checkout"
  rm -rf "$results"
  mkdir -p "$results/baseline"
  if [ $in_place = 1 ]; then
    git -C "$root" diff --quiet HEAD -- lib/ || die "run --in-place: lib/ has uncommitted changes"
    src=$root
    build=$workdir  # beside build-cpu/: the same relative paths, so ccache hits
  else
    rm -rf "$src"
    mkdir -p "$src"
    git -C "$root" archive HEAD | tar -x -C "$src" || die "run: git archive of HEAD failed"
  fi
  local name
  for name in "${names[@]}"; do
    (cd "$src" && git apply --check "$patches/$name.patch") ||
      die "run: mutant $name does not apply to HEAD ($revision); refresh it"
  done
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBITCHECK_WITH_CUDA=OFF \
    "${launcher[@]}" > "$results/configure.log" 2>&1 ||
    { tail -20 "$results/configure.log"; die "run: cmake configure failed"; }
  local t0; t0=$(date +%s)
  ninja -C "$build" > "$results/baseline/ninja.log" 2>&1 ||
    { tail -30 "$results/baseline/ninja.log"; die "run: the unmutated tree does not build"; }
  test_build "$build" "$results/baseline"
  [ "$(cat "$results/baseline/ctest.rc")" = 0 ] ||
    die "run: the unmutated tree fails its tests ($(failed_tests "$results/baseline/ctest.log")): see $results/baseline/ctest.log"
  echo "baseline: tests pass, default CPU sweep exit $(cat "$results/baseline/sweep.rc"), $(( $(date +%s) - t0 )) s"

  local patch target
  for name in "${names[@]}"; do
    patch="$patches/$name.patch"
    target="$results/$name"
    mkdir -p "$target"
    t0=$(date +%s)
    (cd "$src" && git apply "$patch") || die "run: mutant $name does not apply"
    trap '(cd "'"$src"'" && git apply -R "'"$patch"'")' EXIT
    if ninja -C "$build" > "$target/ninja.log" 2>&1; then
      test_build "$build" "$target"
    else
      echo build > "$target/ctest.rc"
      echo build > "$target/sweep.rc"
    fi
    (cd "$src" && git apply -R "$patch") || die "run: mutant $name does not revert"
    trap - EXIT
    echo "$name: ctest exit $(cat "$target/ctest.rc"), failed: $(failed_tests "$target/ctest.log" 2>/dev/null); sweep exit $(cat "$target/sweep.rc"); $(( $(date +%s) - t0 )) s"
  done
  # The unmutated tree again, so the patches left nothing behind.
  ninja -C "$build" > "$results/baseline/ninja-after.log" 2>&1 || die "run: the reverted tree does not build"
  write_report "$out" "$revision" "$command_line" "$results" "${names[@]}"
  echo "report: $out"
}

first_of() {  # LIST N: the first N names of a comma-separated list, and how many more
  local listed rest
  listed=$(echo "$1" | tr ',' '\n' | head -"$2" | paste -sd, - | sed 's/,/, /g')
  rest=$(( $(echo "$1" | tr ',' '\n' | grep -c .) - $2 ))
  [ $rest -gt 0 ] && listed+=" and $rest more"
  echo "$listed"
}

write_report() {  # OUT REVISION COMMAND RESULTS NAMES...
  local out=$1 revision=$2 command_line=$3 results=$4
  shift 4
  local killed=0 total=$# rows="" name patch rc failed count baseline_sweep
  baseline_sweep=$(cat "$results/baseline/sweep.rc")
  for name in "$@"; do
    patch="$patches/$name.patch"
    rc=$(cat "$results/$name/ctest.rc")
    failed=$(failed_tests "$results/$name/ctest.log" 2>/dev/null)
    count=$(echo "$failed" | tr ',' '\n' | grep -c . || true)
    [ "$rc" != 0 ] && [ "$rc" != build ] && [ "$count" -gt 0 ] && killed=$((killed + 1))
    rows+="| $name | \`$(header_value "$patch" file)\` | $(header_value "$patch" slip) | "
    if [ "$rc" = build ]; then rows+="does not build | - |"
    elif [ "$count" -gt 0 ]; then rows+="**fails** ($count) | $(first_of "$failed" 4) |"
    else rows+="passes | - |"
    fi
    rows+=" $(cat "$results/$name/sweep.rc") |"$'\n'
  done
  mkdir -p "$(dirname "$out")"
  cat > "$out" <<EOF
# Harness mutation score

Planted slips in the harness (\`lib/\`), one per patch in \`scripts/harness-mutants/\` (each header
says the slip and why it is realistic), each built into a CPU-only bitcheck and run against
\`ctest -L '$labels'\`$( [ "$labels" = unit ] || echo " and the default CPU sweep"). A mutant is killed when at least one test fails.

**Mutation score: $killed/$total** harness mutants fail at least one test.

- Command: \`$command_line\` (git $revision, $(date -u +%Y-%m-%d), $(nproc) cores, no GPU; Release,
  \`-DBITCHECK_WITH_CUDA=OFF\`).
- Tests: \`ctest -L '$labels' -E '^harness_mutation_patches$'\` (that test checks that each patch
  applies, which an applied patch no longer does).
- Baseline (the unmutated tree): every \`$labels\` test passes; the default CPU sweep
  (\`bitcheck sweep --op all --backend cpu\`) exits $baseline_sweep.
- Sweep exit: the default CPU sweep's exit code with the mutant. Where it stays $baseline_sweep
  the slip hides from a plain run, and only the tests show it.

| mutant | file | slip | \`ctest -L '${labels/|/\\|}'\` | failing tests | sweep exit |
|---|---|---|---|---|---|
$rows
EOF
}

case "${1:-}" in
  check) shift; check_phase "$@" ;;
  run) shift; run_phase "$@" ;;
  *) die "usage: $0 check | run [--only 01,02,...] [--out FILE]" ;;
esac
