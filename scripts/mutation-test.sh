#!/usr/bin/env bash
# Mutation testing: planted batch-variance bugs (scripts/mutants/NN-name.patch, each confined to one
# launch path of one kernel) built into bitcheck binaries here, swept with the nightly spec on the
# GPU machine, and scored: how many of them does the nightly flag?
#
#   scripts/mutation-test.sh check [--bitcheck BIN]
#       every patch has its header fields (and, with BIN, names registered ops and impls) and
#       applies to this tree (git apply --check); ctest runs it as mutation_patches
#   scripts/mutation-test.sh build [OUTDIR] [--only 01,02,...] [--no-pack] [--reuse-binary BIN]
#        [--in-place] [--cpu]
#       here (nvcc, no GPU): a git worktree of HEAD in build-mutants/src (BITCHECK_MUTANTS_WORKDIR),
#       one CUDA build in it (Release, sm_90a + compute_80, ccache when present); the unmutated
#       bitcheck, then for each patch: git apply --check (a patch that does not apply stops the
#       build, named), apply, incremental build, strip into OUTDIR/mutants/NAME/bitcheck, revert.
#       OUTDIR (default .mutants) also gets bin/bitcheck (unmutated), manifest.json, sweeps/,
#       contract/ and these scripts, and is packed as OUTDIR.tar.xz (one xz stream with a large
#       dictionary: the binaries differ in one object each). --reuse-binary BIN skips compiling and
#       packs BIN as every binary (tests the plumbing). --in-place builds in this tree (no git
#       needed: the GPU machine's copy of the working tree, whose 16 cores build a mutant in
#       seconds), in BITCHECK_MUTANTS_BUILD (default build-mutants/inplace), with the extra CMake
#       arguments in BITCHECK_MUTANTS_CMAKE_ARGS (say, -DCMAKE_PREFIX_PATH=... for the
#       dependencies) and the architectures in BITCHECK_MUTANTS_ARCH; each patch is reverted after
#       its build, and on any failure. --cpu accepts a build without the CUDA backend, for the
#       mutants of the CPU backend's simulations (the TP chunk tree: 36-38), which `run --backend
#       cpu --spec sweeps/tp.json` flags here.
#   scripts/mutation-test.sh run BUNDLE OUTDIR [--only baseline,01,...] [--jobs N] [--deadline S]
#        [--backend cuda|cpu] [--spec FILE|embedded] [--impls LIST] [--keep-reports]
#       on the GPU machine (BUNDLE: OUTDIR of build, or its .tar.xz): the unmutated binary once on
#       the union of the mutants' filters (baseline), then each mutant on the nightly spec
#       (sweeps/nightly-gpu.json) restricted to the ops and impls its header names, `--devices`
#       with N shards (default 16) spread over the GPUs present, each sweep stopped after S seconds
#       (default 300; a partial report still counts). Keeps per mutant result.json (verdicts, the
#       failing invariant cases and their first findings) and the sweep's log; the full report only
#       with --keep-reports (gzipped). --impls replaces every filter's impls (cpu-fixed-order for a
#       dry run with --backend cpu). Several runs (say, --only baseline,01,02 then 03,04) can be
#       reported together.
#   scripts/mutation-test.sh report [--baseline FILE] RUN_DIR [RUN_DIR ...] [OUT.md]
#       the markdown report (default reports/mutation.md): a row per mutant (path, expected op /
#       pass / tensor, flagged or not, by which case, layout and tensor), the mutation score, device,
#       date, git commit and commands. A mutant is flagged when a case of an invariant impl comes
#       out drift, nondeterministic or inaccurate and the baseline passes that same case. The
#       baseline comes from the runs' baseline/ (--only baseline), or --baseline: a result.json, a
#       report or a compact nightly summary (reports/gpu/nightly-h100/summary.json) of the same tree.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# The planted bugs: scripts/mutants/, or BITCHECK_MUTANTS_PATCHES=DIR for patches kept elsewhere (a
# reviewer's own, in the same NN-name.patch format with its header).
patches=$(realpath "${BITCHECK_MUTANTS_PATCHES:-$root/scripts/mutants}")
export BITCHECK_MUTANTS_PATCHES=$patches
helper="$root/scripts/mutation-test.py"
[ -f "$helper" ] || helper="$(cd "$(dirname "$0")" && pwd)/mutation-test.py"

die() { echo "mutation-test: $*" >&2; exit 2; }

# ---- build ---------------------------------------------------------------------------------------

install_binary() {  # SOURCE TARGET RPATH: a stripped copy whose rpath finds the bundle's lib/
  mkdir -p "$(dirname "$2")"
  cp "$1" "$2" && chmod u+w "$2" && strip "$2" || return 1
  if command -v patchelf >/dev/null; then patchelf --set-rpath "$3" "$2" || return 1; fi
}

build_phase() {
  local command_line="scripts/mutation-test.sh build $*"
  local out="" only="" pack=1 reuse="" in_place=0 cpu=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --only) only=$2; shift 2 ;;
      --in-place) in_place=1; shift ;;
      --cpu) cpu=1; shift ;;
      --no-pack) pack=0; shift ;;
      --reuse-binary) reuse=$(realpath "$2"); shift 2 ;;
      -*) die "build: unknown option $1" ;;
      *) [ -z "$out" ] || die "build: one OUTDIR only"; out=$1; shift ;;
    esac
  done
  out=$(realpath -m "${out:-$root/.mutants}")
  local start; start=$(date +%s)
  local workdir=${BITCHECK_MUTANTS_WORKDIR:-$root/build-mutants}
  local src="$workdir/src" build="$workdir/src/build" head revision
  if [ $in_place = 1 ]; then
    src=$root
    build=${BITCHECK_MUTANTS_BUILD:-$root/build-mutants/inplace}
    revision=${BITCHECK_MUTANTS_REVISION:-$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
  else
    head=$(git -C "$root" rev-parse HEAD) || die "build: $root is not a git checkout"
    revision=$(git -C "$root" rev-parse --short=12 HEAD)
  fi
  # OUTDIR is replaced: only an earlier bundle or an empty or new directory.
  if [ -d "$out" ] && [ ! -f "$out/manifest.json" ] && [ -n "$(ls -A "$out")" ]; then
    die "build: $out exists and is not a mutation bundle; give another OUTDIR"
  fi
  rm -rf "$out" "$out.tar.xz"
  mkdir -p "$out/bin" "$out/lib" "$out/mutants" "$out/scripts"
  python3 "$helper" manifest --root "$root" --out "$out/manifest.json" --only "$only" \
    --revision "$revision" --command "$command_line" || exit 2
  mapfile -t names < <(python3 "$helper" select "$out/manifest.json")
  [ ${#names[@]} -gt 0 ] || die "build: no mutant selected"

  if [ -n "$reuse" ]; then
    src=$root  # nothing is compiled: the patches must still apply to this tree
  elif [ $in_place = 1 ]; then
    command -v ninja >/dev/null || die "build: ninja not found"
  else
    command -v ninja >/dev/null || die "build: ninja not found (scripts/setup.sh installs it)"
    mkdir -p "$workdir"
    git -C "$root" worktree prune
    if [ -e "$src/.git" ]; then
      git -C "$src" checkout --quiet --detach --force "$head" && git -C "$src" reset --quiet --hard &&
        git -C "$src" clean -fdq || die "build: cannot reset the worktree $src"
    else
      git -C "$root" worktree add --quiet --detach --force "$src" "$head" ||
        die "build: cannot create the worktree $src"
    fi
  fi
  # Every patch must apply before anything is built: a kernel change that breaks a mutant is named.
  local name
  for name in "${names[@]}"; do
    (cd "$src" && git apply --check "$patches/$name.patch") ||
      die "build: mutant $name does not apply to HEAD ($revision); refresh $patches/$name.patch"
  done
  local log="$out/build-log.txt"
  echo "mutation-test build at $revision, $(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$log"
  if [ -z "$reuse" ]; then
    if [ $in_place = 0 ]; then
      "$root/scripts/setup.sh" --deps-only >/dev/null || die "build: scripts/setup.sh --deps-only failed"
    fi
    local launcher=() extra=()
    read -r -a extra <<< "${BITCHECK_MUTANTS_CMAKE_ARGS:-}"
    command -v ccache >/dev/null &&
      launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
    cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES="${BITCHECK_MUTANTS_ARCH:-90a-real;80-virtual}" "${launcher[@]}" \
      "${extra[@]}" > "$out/configure.log" 2>&1 ||
      { tail -20 "$out/configure.log"; die "build: cmake configure failed"; }
    [ $cpu = 1 ] || grep -q 'CUDA backend ON' "$out/configure.log" ||
      die "build: no CUDA backend (nvcc not found): the mutants are CUDA kernels"
    [ $in_place = 1 ] || trap 'git -C "'"$src"'" reset --quiet --hard' EXIT
    local t0; t0=$(date +%s)
    ninja -C "$build" bitcheck > "$out/ninja-base.log" 2>&1 ||
      { tail -30 "$out/ninja-base.log"; die "build: the unmutated bitcheck does not build"; }
    echo "unmutated: $(( $(date +%s) - t0 )) s" | tee -a "$log"
    install_binary "$build/apps/bitcheck" "$out/bin/bitcheck" '$ORIGIN/../lib' || die "build: install"
  else
    install_binary "$reuse" "$out/bin/bitcheck" '$ORIGIN/../lib' || die "build: install"
  fi
  # Shared libraries the GPU machine lacks (as scripts/gpu-bundle.sh): fmt, spdlog when linked.
  { ldd "$out/bin/bitcheck" | awk '/=> \//{print $3}' | grep -E 'libfmt|libspdlog' || true; } |
    while read -r lib; do cp -L "$lib" "$out/lib/"; done

  for name in "${names[@]}"; do
    local patch="$patches/$name.patch" target="$out/mutants/$name"
    mkdir -p "$target"
    cp "$patch" "$target/mutant.patch"
    if [ -n "$reuse" ]; then
      install_binary "$reuse" "$target/bitcheck" '$ORIGIN/../../lib' || die "build: install $name"
      continue
    fi
    local t0; t0=$(date +%s)
    (cd "$src" && git apply "$patch") || die "build: mutant $name does not apply"
    [ $in_place = 1 ] && trap '(cd "'"$src"'" && git apply -R "'"$patch"'")' EXIT
    if ! ninja -C "$build" bitcheck > "$target/ninja.log" 2>&1; then
      (cd "$src" && git apply -R "$patch")
      trap - EXIT
      grep -E 'error|Error' "$target/ninja.log" | head -20
      die "build: mutant $name does not compile (log: $target/ninja.log)"
    fi
    install_binary "$build/apps/bitcheck" "$target/bitcheck" '$ORIGIN/../../lib' ||
      die "build: install $name"
    # A patch whose binary equals the unmutated one plants nothing (dead code, a wrong #if).
    if cmp -s "$target/bitcheck" "$out/bin/bitcheck"; then
      (cd "$src" && git apply -R "$patch")
      trap - EXIT
      die "build: mutant $name changes no bit of bitcheck"
    fi
    (cd "$src" && git apply -R "$patch") || die "build: cannot revert mutant $name"
    [ $in_place = 1 ] && trap - EXIT
    rm -f "$target/ninja.log"
    echo "$name: $(( $(date +%s) - t0 )) s, $(stat -c %s "$target/bitcheck") bytes stripped" | tee -a "$log"
  done
  if [ -z "$reuse" ]; then
    # Back to the unmutated objects, so the next build starts from them.
    ninja -C "$build" bitcheck > /dev/null 2>&1
    trap - EXIT
  fi
  cp -r "$src/sweeps" "$src/contract" "$out/"
  cp "$root/scripts/mutation-test.sh" "$root/scripts/mutation-test.py" "$out/scripts/"
  echo "$revision" > "$out/REVISION"
  local seconds=$(( $(date +%s) - start ))
  echo "build phase: ${#names[@]} mutants in $seconds s; bundle $(du -sh "$out" | cut -f1) unpacked" |
    tee -a "$log"
  if [ $pack = 1 ]; then
    # One stream, one dictionary larger than all the binaries together: each mutant costs about
    # the one object it changes.
    # BITCHECK_MUTANTS_XZ replaces the xz options (the plumbing test packs fast with -0).
    local xz_options
    read -r -a xz_options <<< "${BITCHECK_MUTANTS_XZ:--T1 --lzma2=preset=1,dict=512MiB}"
    tar -C "$(dirname "$out")" -cf - "$(basename "$out")" |
      xz "${xz_options[@]}" > "$out.tar.xz" || die "build: packing failed"
    local bytes; bytes=$(stat -c %s "$out.tar.xz")
    echo "packed: $out.tar.xz, $bytes bytes ($(( bytes / 1048576 )) MiB)" | tee -a "$log"
    [ "$bytes" -lt $((60 * 1048576)) ] ||
      echo "mutation-test: the bundle is over 60 MiB; build subsets with --only to carry it" >&2
  fi
}

# ---- run -----------------------------------------------------------------------------------------

run_phase() {
  [ $# -ge 2 ] || die "run: BUNDLE OUTDIR required"
  local bundle=$1 out=$2
  shift 2
  local only="" jobs=16 deadline=300 backend=cuda spec=sweeps/nightly-gpu.json impls="" keep=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --only) only=$2; shift 2 ;;
      --jobs) jobs=$2; shift 2 ;;
      --deadline) deadline=$2; shift 2 ;;
      --backend) backend=$2; shift 2 ;;
      --spec) spec=$2; shift 2 ;;
      --impls) impls=$2; shift 2 ;;
      --keep-reports) keep=1; shift ;;
      *) die "run: unknown argument $1" ;;
    esac
  done
  local command_line="scripts/mutation-test.sh run $bundle $out"
  [ -n "$only" ] && command_line+=" --only $only"
  command_line+=" --jobs $jobs --deadline $deadline --backend $backend --spec $spec"
  [ -n "$impls" ] && command_line+=" --impls $impls"
  out=$(realpath -m "$out")
  mkdir -p "$out"
  if [ -f "$bundle" ]; then
    local unpacked; unpacked=$(mktemp -d)
    trap 'rm -rf "'"$unpacked"'"' EXIT
    tar -xJf "$bundle" -C "$unpacked" || die "run: cannot unpack $bundle"
    bundle=$(find "$unpacked" -mindepth 2 -maxdepth 2 -name manifest.json -printf '%h\n' | head -1)
  fi
  bundle=$(realpath "$bundle")
  [ -f "$bundle/manifest.json" ] || die "run: $bundle has no manifest.json (a build OUTDIR?)"
  [ "$spec" = embedded ] || [ -f "$spec" ] || [ -f "$bundle/$spec" ] || die "run: no spec $spec"
  local spec_args=()
  if [ "$spec" != embedded ]; then
    [ -f "$spec" ] && spec=$(realpath "$spec")
    spec_args=(--spec "$spec")
  fi
  cp "$bundle/manifest.json" "$out/manifest.json"

  # Shards: one per job, round-robin over the GPUs (CUDA_VISIBLE_DEVICES, else all present).
  local gpu_list=()
  if [ "$backend" = cuda ]; then
    if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
      IFS=, read -r -a gpu_list <<< "$CUDA_VISIBLE_DEVICES"
    elif command -v nvidia-smi >/dev/null 2>&1; then
      mapfile -t gpu_list < <(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -E '^[0-9]+$')
    fi
    [ ${#gpu_list[@]} -gt 0 ] || die "run: --backend cuda but no GPU found (nvidia-smi)"
  fi
  local devices=() i
  for ((i = 0; i < jobs; i++)); do
    if [ ${#gpu_list[@]} -gt 0 ]; then devices+=("${gpu_list[$((i % ${#gpu_list[@]}))]}"); else devices+=("$i"); fi
  done
  local device_list; device_list=$(IFS=,; echo "${devices[*]}")
  local device="cpu backend (no GPU used)"
  if [ ${#gpu_list[@]} -gt 0 ]; then
    device="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader -i "${gpu_list[0]}" 2>/dev/null | head -1) x${#gpu_list[@]}"
  fi
  python3 - "$out/run.json" "$device" "$command_line" "$(cat "$bundle/REVISION" 2>/dev/null)" \
    "$jobs" "$deadline" "$backend" "$spec" <<'EOF'
import json, sys, datetime
path, device, command, revision, jobs, deadline, backend, spec = sys.argv[1:]
json.dump({"device": device, "command": command, "revision": revision, "jobs": int(jobs),
           "deadline_seconds": int(deadline), "backend": backend, "spec": spec,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")},
          open(path, "w"), indent=1)
EOF

  local names=() run_baseline=0
  if [ -z "$only" ] || [[ ",$only," == *",baseline,"* ]]; then run_baseline=1; fi
  local rest=${only//baseline/}
  rest=$(echo "$rest" | sed 's/^,*//; s/,*$//; s/,,*/,/g')
  if [ -z "$only" ] || [ -n "$rest" ]; then
    mapfile -t names < <(python3 "$helper" select "$bundle/manifest.json" --only "$rest") || exit 2
  fi
  local failures=0
  if [ $run_baseline = 1 ]; then
    local union_ops union_impls union_passes
    read -r union_ops union_impls union_passes < <(python3 "$helper" filters "$bundle/manifest.json")
    run_one baseline "$bundle/bin/bitcheck" "$union_ops" "${impls:-$union_impls}" "$union_passes" \
      "$out/baseline" || failures=$((failures + 1))
  fi
  local name
  for name in "${names[@]}"; do
    run_one "$name" "$bundle/mutants/$name/bitcheck" \
      "$(python3 "$helper" field "$bundle/manifest.json" "$name" sweep-ops)" \
      "${impls:-$(python3 "$helper" field "$bundle/manifest.json" "$name" sweep-impls)}" \
      "$(python3 "$helper" field "$bundle/manifest.json" "$name" sweep-passes)" \
      "$out/mutants/$name" || failures=$((failures + 1))
  done
  python3 "$helper" report "$out" --out "$out/mutation.md" | tail -1
  [ $failures -eq 0 ] || { echo "mutation-test: $failures sweep(s) wrote no report" >&2; return 3; }
}

run_one() {  # NAME BINARY OPS IMPLS PASSES DIR: one filtered sweep, summarized into DIR/result.json
  local name=$1 binary=$2 ops=$3 impls=$4 passes=$5 dir=$6
  rm -rf "$dir"
  mkdir -p "$dir"
  [ -x "$binary" ] || { echo "mutation-test: $name: no binary $binary" >&2; return 1; }
  local args=(sweep "${spec_args[@]}" --op "$ops" --impl "$impls" --pass "$passes" --backend "$backend"
              --devices "$device_list" --out "$dir" --pins contract/pins --no-progress)
  local start; start=$(date +%s)
  (cd "$bundle" && timeout -s TERM -k 60 "$deadline" "$binary" "${args[@]}") > "$dir/sweep.log" 2>&1
  local rc=$? seconds=$(( $(date +%s) - start )) timed=()
  [ $rc = 124 ] || [ $rc = 137 ] && timed=(--timed-out)
  python3 "$helper" summarize "$dir/report.json" --out "$dir/result.json" --name "$name" \
    --exit-code "$rc" --seconds "$seconds" "${timed[@]}" --command "bitcheck ${args[*]}"
  # The log's tail is enough to see what happened; the report itself only on request.
  tail -n 60 "$dir/sweep.log" > "$dir/sweep.tail" && mv "$dir/sweep.tail" "$dir/sweep.log"
  if [ $keep = 1 ] && [ -f "$dir/report.json" ]; then gzip -9 "$dir/report.json"; fi
  find "$dir" -maxdepth 1 -name '*.json' ! -name result.json -delete
  printf '%-48s exit %s in %4s s%s\n' "$name" "$rc" "$seconds" "${timed:+ (timed out)}"
  [ -f "$dir/report.json.gz" ] || [ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["report"])' "$dir/result.json")" = True ]
}

case "${1:-}" in
  check) shift; python3 "$helper" check --root "$root" "$@" ;;
  build) shift; build_phase "$@" ;;
  run) shift; run_phase "$@" ;;
  report)
    shift
    [ $# -ge 1 ] || die "report: RUN_DIR required"
    if [ $# -ge 2 ] && [[ "${*: -1}" == *.md ]]; then
      python3 "$helper" report "$@"
    else
      python3 "$helper" report "$@" --out "$root/reports/mutation.md"
    fi
    ;;
  *) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
