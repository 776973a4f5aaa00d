#!/usr/bin/env bash
# The GPU engine's check, for a machine with one GPU (H100/H200, sm_90): configure once, build
# test_common, test_ch03, test_ch04 and bench_gpu_gpt once (one ninja call, -k 0: a chapter that does not
# build costs only the binaries that need it), then run every GPU test suite in its own
# process with its own timeout (a sticky CUDA error such as an illegal address ends that
# process only), the NCCL tests one GPU allows, and a short benchmark. Everything lands in
# "${OUT:-out}" as it happens:
#   summary.txt   one line per step: passed, FAILED, TIMED OUT, CRASHED, or not reached
#   results.tsv   the same, tab-separated: step, result, seconds, detail
#   env.txt, configure.log, build.log, <suite>.log / <suite>.xml, bench.log
# The whole run stays inside a budget (BUDGET_S, 450 s: well inside 8 minutes); each step's
# timeout is its own limit or what is left of the budget, whichever is smaller, and a step
# with too little left is recorded as not reached. Exit code 0 only when everything passed;
# on the GPU machine a skipped GPU test counts as a failure (the GPU was not used). The build
# there runs without -Werror (CI keeps it): a new warning of another compiler must not cost
# the run; the warning lines are counted in the summary.
#
#   bash scripts/gpu_check.sh                 # on the GPU machine
#   bash scripts/gpu_check.sh --dry-run       # anywhere: the same steps, with no GPU the
#                                             # suites run and skip (a skip is then a pass)
#   bash scripts/gpu_check.sh --dry-run --build-dir build --no-build
#                                             # the run steps only, on an existing build
#   bash scripts/gpu_check.sh --prepare       # build-deps/ for a machine without network
# scripts/gpu_check_selftest.sh tests this script's logic on stand-in binaries (ctest).
#
# GPU machines without the build dependencies (Eigen, GoogleTest, Google Benchmark) and
# without a network use build-deps/, prepared first on a machine that has them (Eigen's
# headers, GoogleTest's sources and a stand-in benchmark package, ~14 MB, ignored by git),
# then carried along (the device tool: carry ["build-deps"]). GoogleTest is built from source
# there, in seconds. NCCL is found in the toolkit, the system, NCCL_ROOT, or the
# nvidia-nccl-cu12/-cu13 pip wheels (see the top-level CMakeLists.txt).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
deps="$root/build-deps"

dry_run=0
do_build=1
build_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --no-build) do_build=0 ;;
    # The rule of every mixpar tool: a value that looks like a flag is taken only when
    # written --build-dir=VALUE (`--build-dir --dry-run` must not build in "--dry-run").
    --build-dir)
      case "${2:-}" in
        ""|--*) echo "gpu_check.sh: --build-dir needs a directory${2:+, but is followed by the flag '$2'}" >&2
                exit 2 ;;
      esac
      build_dir=$2; shift ;;
    --build-dir=*) build_dir=${1#--build-dir=} ;;
    --prepare) prepare=1 ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if [ "${prepare:-0}" = 1 ]; then
  set -e
  rm -rf "$deps"
  mkdir -p "$deps/prefix/include" "$deps/prefix/share/eigen3/cmake" \
           "$deps/prefix/lib/cmake/benchmark"
  cp -r /usr/include/eigen3 "$deps/prefix/include/"
  cp /usr/share/eigen3/cmake/*.cmake "$deps/prefix/share/eigen3/cmake/"
  cp -r /usr/src/googletest "$deps/googletest-src"
  cat > "$deps/prefix/lib/cmake/benchmark/benchmarkConfig.cmake" <<'EOF'
# Stand-in for Google Benchmark where it is not installed: the GPU check builds no target that
# uses it (bench_gpu_gpt has its own main), but the project's configure asks for the package.
if(NOT TARGET benchmark::benchmark)
  add_library(benchmark::benchmark INTERFACE IMPORTED)
endif()
EOF
  du -sh "$deps"
  echo "prepared $deps: carry it to the GPU machine (device tool: carry [\"build-deps\"])"
  exit 0
fi

[ -n "$build_dir" ] || build_dir=$([ "$dry_run" = 1 ] && echo build-gpu-dry || echo build-gpu)
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
bin="$build_dir/bin"
out="${OUT:-out}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PATH="/usr/local/cuda/bin:$PATH"
jobs=$(nproc 2>/dev/null || echo 16)
[ "$jobs" -gt 16 ] && jobs=16
budget=${BUDGET_S:-450}
start=$(date +%s)
deadline=$(( start + budget ))
failures=0

# The plan, written first: a step missing from results.tsv at the end was not reached.
# <name> <binary> <gtest filter> <own timeout, s>
suites=(
  "TensorCuda test_common TensorCuda.* 60"
  "ConvertCuda test_common ConvertCuda.* 60"
  "RandomCuda test_common RandomCuda.* 45"
  "CudaAllocator test_common CudaAllocator.* 45"
  "CudaKernels test_common CudaKernels.* 60"
  "CudaOptim test_common CudaOptim.* 60"
  "CudaGemm test_common CudaGemm.* 60"
  "CudaAttention test_common CudaAttention.* 60"
  "CudaGpt test_common CudaGpt.* 90"
  "CudaFp8 test_ch03 CudaFp8.* 60"
  "CudaMixedPrecisionStep test_ch03 CudaMixedPrecisionStep.* 90"
  "Nccl test_ch04 Nccl.* 60"
)
# GPU_CHECK_SUITES replaces the list ("name binary filter seconds;..."): the script's own test
# (scripts/gpu_check_selftest.sh) runs it on stand-in binaries that pass, fail, crash and hang.
if [ -n "${GPU_CHECK_SUITES:-}" ]; then IFS=';' read -ra suites <<< "$GPU_CHECK_SUITES"; fi
plan="configure build"
for s in "${suites[@]}"; do plan="$plan ${s%% *}"; done
plan="$plan bench"
done_steps=""

: > "$out/summary.txt"
printf 'step\tresult\tseconds\tdetail\n' > "$out/results.tsv"
note() { echo "$*" | tee -a "$out/summary.txt"; }
# record STEP RESULT SECONDS DETAIL: one line in both files, at once.
record() {
  printf '%-14s %-12s %4s s  %s\n' "$1" "$2" "$3" "$4" | tee -a "$out/summary.txt"
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$out/results.tsv"
  done_steps="$done_steps $1"
  case "$2" in ok|passed|skipped) ;; *) failures=$(( failures + 1 )) ;; esac
}
finish() {
  local missing=""
  for s in $plan; do
    case " $done_steps " in *" $s "*) ;; *) missing="$missing $s" ;; esac
  done
  if [ -n "$missing" ]; then
    for s in $missing; do
      printf '%s\tnot reached\t0\t\n' "$s" >> "$out/results.tsv"
    done
    note "not reached:$missing"
    failures=$(( failures + 1 ))
  fi
  note "total: $(( $(date +%s) - start )) s of a $budget s budget; $failures problem(s)" \
       "($([ "$dry_run" = 1 ] && echo 'dry run, no GPU expected' || echo 'GPU run'))"
}
trap 'note "interrupted"; finish; exit 3' INT TERM

# left_for OWN: the timeout a step gets, 0 when the budget cannot give it 10 s.
left_for() {
  local left=$(( deadline - $(date +%s) - 5 ))
  local t=$1
  [ "$left" -lt "$t" ] && t=$left
  [ "$t" -lt 10 ] && t=0
  echo "$t"
}

note "gpu_check $([ "$dry_run" = 1 ] && echo '--dry-run ')on $(hostname), $(date -u +%FT%TZ), budget $budget s"
note "plan: $plan"

# ---- The environment, and NCCL from the pip wheels where the toolkit has none.
nccl_wheel=""
for py in python3 python; do
  command -v "$py" > /dev/null 2>&1 || continue
  for d in $("$py" -c 'import site, sysconfig; print(" ".join([sysconfig.get_paths()["purelib"], site.getusersitepackages()] + site.getsitepackages()))' 2>/dev/null); do
    for sub in nvidia/nccl nvidia/cu13 nvidia/cu12; do
      if [ -z "$nccl_wheel" ] && [ -f "$d/$sub/include/nccl.h" ]; then nccl_wheel="$d/$sub"; fi
    done
  done
  break
done
if [ -n "$nccl_wheel" ]; then
  export LD_LIBRARY_PATH="$nccl_wheel/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
{
  date -u
  timeout 20 nvidia-smi || echo "nvidia-smi failed or is absent"
  nvcc --version || echo "no nvcc on PATH"
  cmake --version | head -1
  g++ --version | head -1
  echo "nproc: $(nproc), jobs: $jobs"
  echo "NCCL wheel: ${nccl_wheel:-none}"
  ls /usr/local/cuda/lib64/libnccl* /usr/lib/x86_64-linux-gnu/libnccl* 2>/dev/null
} > "$out/env.txt" 2>&1
gpu_seen=0
if timeout 20 nvidia-smi -L > /dev/null 2>&1; then gpu_seen=1; fi
if [ "$dry_run" = 0 ] && [ "$gpu_seen" = 0 ]; then
  note "warning: nvidia-smi lists no GPU; the suites will say why they skip"
fi

# ---- Configure and build, once.
t0=$(date +%s)
if [ "$do_build" = 0 ]; then
  record configure skipped 0 "--no-build: using $build_dir"
  record build skipped 0 "--no-build"
else
  prefix_args=()
  : > "$out/configure.log"
  if [ -d "$deps/prefix" ]; then
    if [ ! -d "$deps/prefix/lib/cmake/GTest" ] && [ ! -d "$deps/prefix/lib64/cmake/GTest" ]; then
      # GoogleTest from the carried sources, into the same prefix (logged with the configure).
      { timeout 120 cmake -S "$deps/googletest-src" -B "$deps/gtest-build" -G Ninja \
          -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$deps/prefix" &&
        timeout 120 cmake --build "$deps/gtest-build" -j "$jobs" &&
        cmake --install "$deps/gtest-build"; } >> "$out/configure.log" 2>&1 ||
        note "GoogleTest from build-deps did not build: see configure.log"
    fi
    prefix_args=(-DCMAKE_PREFIX_PATH="$deps/prefix")
  fi
  # Warnings do not stop this build (CI keeps -Werror; another compiler here must not cost the
  # run). A dry run into an existing build keeps that build's settings (no rebuild of it all).
  cfg_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DMIXPAR_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90
            "${prefix_args[@]}")
  if [ "$dry_run" = 1 ] && [ -f "$build_dir/CMakeCache.txt" ]; then
    cfg_args=()
    note "dry run: configuring the existing $build_dir with its own settings"
  fi
  t=$(left_for 120)
  if [ "$t" -gt 0 ] && timeout -k 5 "$t" cmake -S . -B "$build_dir" "${cfg_args[@]}" \
       >> "$out/configure.log" 2>&1; then
    found=$(grep -o 'CUDA found.*' "$out/configure.log" | head -1)
    if [ -z "$found" ]; then
      record configure FAILED $(( $(date +%s) - t0 )) "no CUDA toolkit found: the GPU engine would not be built"
      finish; exit 1
    fi
    record configure ok $(( $(date +%s) - t0 )) "$found"
  else
    record configure FAILED $(( $(date +%s) - t0 )) "see configure.log (missing dependencies? --prepare elsewhere)"
    tail -20 "$out/configure.log"
    finish; exit 1
  fi

  t0=$(date +%s)
  t=$(left_for 330)
  [ "$t" -gt 0 ] || { finish; exit 1; }
  timeout -k 10 "$t" cmake --build "$build_dir" -j "$jobs" \
    --target test_common test_ch03 test_ch04 bench_gpu_gpt -- -k 0 > "$out/build.log" 2>&1
  rc=$?
  built=""
  for b in test_common test_ch03 test_ch04 bench_gpu_gpt; do
    # A binary counts when its own target is complete: all of them when the build passed;
    # otherwise ask for each target alone (only its failing parts run again), so a stale binary
    # from an earlier build never counts.
    if [ "$rc" = 0 ]; then
      built="$built $b"
    elif [ "$rc" != 124 ] && [ "$rc" != 137 ] && [ "$(left_for 60)" -gt 0 ] &&
         timeout -k 5 "$(left_for 60)" cmake --build "$build_dir" -j "$jobs" --target "$b" \
           >> "$out/build.log" 2>&1; then
      built="$built $b"
    fi
  done
  warnings=$(grep -c "warning" "$out/build.log")
  if [ "$rc" = 0 ]; then
    record build ok $(( $(date +%s) - t0 )) "built:$built; $warnings warning lines"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    record build "TIMED OUT" $(( $(date +%s) - t0 )) "after $t s; built:${built:- nothing}"
  else
    record build FAILED $(( $(date +%s) - t0 )) "rc $rc; built:${built:- nothing}; first errors in summary"
    grep -E "error|FAILED:" "$out/build.log" | head -20 | tee -a "$out/summary.txt"
  fi
fi
[ "$do_build" = 0 ] && built="test_common test_ch03 test_ch04 bench_gpu_gpt"

# ---- One process per suite.
for s in "${suites[@]}"; do
  read -r name binary filter own <<< "$s"
  log="$out/$name.log"
  if [ ! -x "$bin/$binary" ] || [[ " $built " != *" $binary "* ]]; then
    record "$name" "not built" 0 "$binary did not build"
    continue
  fi
  t=$(left_for "$own")
  [ "$t" -gt 0 ] || break
  t0=$(date +%s)
  timeout -k 5 "$t" "$bin/$binary" --gtest_filter="$filter" --gtest_color=no \
    --gtest_output="xml:$out/$name.xml" > "$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  # Per-test result lines end in "(N ms)"; gtest's closing lists repeat the names without it.
  passed=$(grep -cE '^\[       OK \] .*ms\)$' "$log")
  skipped=$(grep -cE '^\[  SKIPPED \] .*ms\)$' "$log")
  failed=$(grep -cE '^\[  FAILED  \] .*ms\)$' "$log")
  counts="$passed passed, $failed failed, $skipped skipped"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    last=$(grep -E '^\[ RUN      \]' "$log" | tail -1 | sed 's/^\[ RUN      \] //')
    record "$name" "TIMED OUT" "$secs" "after $t s in ${last:-?}; $counts"
  elif [ "$rc" -ge 128 ]; then
    last=$(grep -E '^\[ RUN      \]' "$log" | tail -1 | sed 's/^\[ RUN      \] //')
    record "$name" CRASHED "$secs" "signal $(( rc - 128 )) in ${last:-?}; $counts"
  elif [ "$rc" != 0 ]; then
    record "$name" FAILED "$secs" "rc $rc; $counts"
    grep -E '^\[  FAILED  \] .*ms\)$' "$log" | sed 's/^/    /' | tee -a "$out/summary.txt"
  elif [ $(( passed + skipped )) = 0 ]; then
    record "$name" FAILED "$secs" "the filter $filter selected no test"
  elif [ "$skipped" -gt 0 ] && [ "$dry_run" = 0 ] && [ "$name" != Nccl ]; then
    # On the GPU machine every GPU test must run; a skip there says the GPU was not used.
    why=$(grep -m1 -iE 'skipped|cuda|gpu' "$log" | head -c 160)
    record "$name" FAILED "$secs" "$counts on a GPU machine: $why"
  elif [ "$skipped" -gt 0 ] && [ "$passed" = 0 ]; then
    record "$name" skipped "$secs" "$counts (no GPU: expected in a dry run)"
  else
    record "$name" passed "$secs" "$counts"
  fi
done

# ---- The benchmark: two short runs (materialised and fused attention), peak memory each.
if [[ " $built " != *" bench_gpu_gpt "* ]] || [ ! -x "$bin/bench_gpu_gpt" ]; then
  record bench "not built" 0 "bench_gpu_gpt did not build"
else
  t=$(left_for 120)
  if [ "$t" -gt 0 ]; then
    t0=$(date +%s)
    timeout -k 5 "$t" "$bin/bench_gpu_gpt" --batch 8 --steps 5 --warmup 2 --gemm 8192 \
      > "$out/bench.log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - t0 ))
    if [ "$rc" = 0 ]; then
      record bench ok "$secs" "$(grep -cE 'ms/step' "$out/bench.log") timed runs"
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      record bench "TIMED OUT" "$secs" "after $t s"
    else
      record bench FAILED "$secs" "rc $rc: $(tail -1 "$out/bench.log" | head -c 200)"
    fi
    grep -E "^device|^cuBLAS|^GPT-2|^\[|ms/step|memory|fused|nothing to measure" \
      "$out/bench.log" | sed 's/^/    /' | tee -a "$out/summary.txt"
  fi
fi

finish
[ "$failures" = 0 ]
