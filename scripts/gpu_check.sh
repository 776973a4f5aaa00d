#!/usr/bin/env bash
# The GPU engine's check, on a machine with a GPU: configure for sm_90 (H100/H200), build
# test_common and bench_gpu_gpt only, run the GPU tests and the benchmark, and write every log
# to "${OUT:-out}" (env.txt, configure.log, build.log, tests.log, tests.xml, bench.log,
# summary.txt). Exit code 0 only when the build and every GPU test pass. About 4-6 minutes
# on 16 cores: the build dominates.
#
# GPU machines without the build dependencies (Eigen, GoogleTest, Google Benchmark) and
# without a network use build-deps/, prepared first on a machine that has them:
#   bash scripts/gpu_check.sh --prepare    # Eigen's headers, GoogleTest's sources, and a
#                                          # stand-in benchmark package (nothing built here
#                                          # links it), ~14 MB, ignored by git (/build*/)
# and then carried along (the device tool: carry ["build-deps"], command
# "bash scripts/gpu_check.sh"). GoogleTest is built from source there, in seconds.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
deps="$root/build-deps"

if [ "${1:-}" = "--prepare" ]; then
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

out="${OUT:-out}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PATH="/usr/local/cuda/bin:$PATH"
jobs=$(nproc 2>/dev/null || echo 16)
[ "$jobs" -gt 16 ] && jobs=16
start=$(date +%s)
status=0
summary() { echo "$*" | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"

{
  date -u
  nvidia-smi || echo "nvidia-smi failed"
  nvcc --version || echo "no nvcc on PATH"
  cmake --version | head -1
  g++ --version | head -1
} > "$out/env.txt" 2>&1

prefix_args=()
if [ -d "$deps/prefix" ]; then
  if [ ! -d "$deps/prefix/lib/cmake/GTest" ] && [ ! -d "$deps/prefix/lib64/cmake/GTest" ]; then
    # GoogleTest from the carried sources, into the same prefix (logged with the configure).
    { cmake -S "$deps/googletest-src" -B "$deps/gtest-build" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$deps/prefix" &&
      cmake --build "$deps/gtest-build" -j "$jobs" &&
      cmake --install "$deps/gtest-build"; } > "$out/configure.log" 2>&1 ||
      summary "GoogleTest from build-deps did not build: see configure.log"
  fi
  prefix_args=(-DCMAKE_PREFIX_PATH="$deps/prefix")
fi

if cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
     -DCMAKE_CUDA_ARCHITECTURES=90 "${prefix_args[@]}" >> "$out/configure.log" 2>&1; then
  summary "configure: ok ($(grep -o 'CUDA found[^:]*' "$out/configure.log" | head -1))"
else
  summary "configure: FAILED (see configure.log; missing dependencies? run --prepare elsewhere)"
  tail -20 "$out/configure.log"
  exit 1
fi
if ! grep -q "CUDA found" "$out/configure.log"; then
  summary "configure found no CUDA toolkit: the GPU engine would not be built"
  exit 1
fi

# The tests first: bench_gpu_gpt also links every chapter's library, so a chapter that does not
# build at the moment costs the benchmark only, not the GPU test results.
if cmake --build build-gpu --target test_common -j "$jobs" > "$out/build.log" 2>&1; then
  summary "build test_common: ok in $(( $(date +%s) - start )) s"
else
  summary "build test_common: FAILED (see build.log)"
  grep -E "error|Error" "$out/build.log" | head -20
  exit 1
fi

timeout 300 ./build-gpu/bin/test_common --gtest_filter='Cuda*:ConvertCuda*:*Cuda*' \
  --gtest_output="xml:$out/tests.xml" > "$out/tests.log" 2>&1
test_rc=$?
# Per-test result lines end in "(N ms)"; gtest's closing lists repeat the names without it.
passed=$(grep -cE '^\[       OK \] .*ms\)$' "$out/tests.log")
skipped=$(grep -cE '^\[  SKIPPED \] .*ms\)$' "$out/tests.log")
failed=$(grep -E '^\[  FAILED  \] .*ms\)$' "$out/tests.log")
summary "tests: rc $test_rc, $passed passed, $skipped skipped"
if [ "$test_rc" -ne 0 ]; then
  status=1
  [ "$test_rc" -eq 124 ] && summary "tests: TIMED OUT after 300 s"
  [ -n "$failed" ] && summary "$failed"
fi

if cmake --build build-gpu --target bench_gpu_gpt -j "$jobs" >> "$out/build.log" 2>&1; then
  timeout 180 ./build-gpu/bin/bench_gpu_gpt > "$out/bench.log" 2>&1
  bench_rc=$?
  summary "bench: rc $bench_rc"
  grep -E "^device|^cuBLAS|^GPT-2|^\[|ms/step" "$out/bench.log" | tee -a "$out/summary.txt"
else
  summary "build bench_gpu_gpt: FAILED (see the end of build.log)"
fi
summary "total: $(( $(date +%s) - start )) s"
exit $status
