#!/usr/bin/env bash
# CI's test run (.ci/run calls it). First the main build: everything (CPU engine; the CUDA
# engine too when a toolkit is present) and every test, so that a failure there is seen
# quickly. Then the runs that need builds of their own, each building only what it runs:
#   fuzz  libFuzzer (build-fuzz, clang): every harness of fuzz/ over its seed corpus, then
#         MIXPAR_FUZZ_SECONDS (default 20) of new inputs each
#   asan  AddressSanitizer + UBSan (build-asan): the readers of user input (flags, JSON,
#         safetensors, token shards, config.json, atomic files, the tokenizer, the input
#         limits: test_sanitize_readers), the communicator and the rank grid
#         (test_sanitize_comm), and every test of chapter 8 (the trainer, its checkpoints,
#         train_gpt's command line and its mpirun runs)
#   tsan  ThreadSanitizer (build-tsan): the communicator and the rank grid (test_sanitize_comm)
#         and chapter 4's ring, buckets and DDP, with one OpenMP thread
#   isa   the CPU engine compiled, not run, with warnings as errors, for sapphirerapids
#         (AVX-512, AVX512-BF16/FP16, AMX: preset isa-spr, the whole tree) and for x86-64-v4
#         (AVX-512 alone: preset isa-v4, everything but the tests, which isa-spr compiles with a
#         superset of its ISA): what an AVX-512 or AMX machine's compiler sees, whatever CPU CI
#         runs on
# The sanitizer builds compile with line tables only (-g1: a report's stack has every function,
# file and line; no variables, which a sanitizer never prints), asan at -O1 and tsan at -O2,
# Eigen's GEMM kernels uninstrumented at -O2 (common/ops/CMakeLists.txt), and every build the
# test executables' own code at -O1 (tests/CMakeLists.txt): an instrumented compile costs
# several times a plain one, and that, not the tests' run, is most of these stages' time.
# GPU tests skip, saying why, where no GPU is visible. With no argument CI runs every stage,
# main, isa, fuzz, asan, tsan, to fit the 40 minutes aimed at on CI's 2 cores (the stages'
# measured times: README.md, "Quick start").
# Usage: bash scripts/test.sh [main|isa|asan|tsan|fuzz ...]   (no argument: main isa fuzz asan tsan)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
export PATH="/usr/local/cuda/bin:$PATH"
jobs="$(nproc)"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(main isa fuzz asan tsan)

# What the sanitizer runs take from test_common is built as executables of its own, from only
# those test files (tests/CMakeLists.txt): test_sanitize_readers and test_sanitize_comm, their
# tests labelled sanitize_readers and sanitize_comm. From test_ch04 the tsan run takes DDP's
# suites (not the NCCL ones, nor the MPI executable, which it does not build).
ddp='Ddp|DdpFailure|BucketReducer|Buckets|Ring|RingTraffic|RingTrace'

stage() { echo; echo "== $* (started $(date -u +%H:%M:%S) UTC)"; }

for s in "${stages[@]}"; do
  case "$s" in
    main)
      stage "main: build everything, run every test"
      cmake --preset default
      cmake --build --preset default -j "$jobs"
      ctest --preset default -j "$jobs"
      ;;
    isa)
      # isa-v4 leaves the tests out (MIXPAR_TESTS=OFF): none of our code branches on the ISA,
      # so what differs between the two is what GCC's and Eigen's headers do inside our
      # translation units, and isa-spr's build of the test files sees every AVX-512 header
      # isa-v4's would, and more; the tests are a third of the tree's compile.
      # The main build is x86-64-v3 on every host; these two compile what -march=native gives
      # on AVX-512 and AMX machines (GCC's AVX-512 headers, Eigen's 16-float kernels, the
      # AVX512-BF16 and AMX code paths), so a warning or error there fails CI on any CPU.
      # Their presets defer GoogleTest's test discovery to ctest time (PRE_TEST): the build
      # itself runs none of what it compiled, which a CPU without that ISA could not run (the
      # programs refuse to start there), so the stage passes on any x86-64 CPU.
      for preset in isa-v4 isa-spr; do
        stage "isa: the CPU engine for $preset (isa-v4: all but the tests), warnings as errors"
        cmake --preset "$preset"
        cmake --build --preset "$preset" -j "$jobs"
      done
      ;;
    asan)
      stage "asan: readers, communicator and chapter 8 under AddressSanitizer + UBSan"
      cmake --preset asan
      cmake --build --preset asan -j "$jobs" \
        --target test_sanitize_readers test_sanitize_comm test_ch08 train_gpt
      # Not TrainGptMfu: it measures throughput against the CPU's GEMM peak, which means
      # nothing in an instrumented build; the main stage runs it. Not test_ch08_zero and
      # test_ch08_tp (labels zero and tp, also ch08), which this stage does not build: the
      # trainer's runs of every ZeRO stage and of --tp would add their instrumented build and
      # minutes of instrumented training; the main stage runs them. Not mixpar-plan's tests
      # (label ch08_plan, also ch08), whose programs this stage does not build.
      ctest --preset asan -L '^(sanitize_readers|sanitize_comm|ch08)$' -LE '^(zero|tp|ch08_plan)$' \
        -E '^TrainGptMfu\.'
      ;;
    tsan)
      # One OpenMP thread: libgomp is not built with TSan, and its own synchronisation would
      # be reported; the ranks' threads, the communicator's and DDP's, are what is checked.
      stage "tsan: communicator and DDP under ThreadSanitizer"
      cmake --preset tsan
      cmake --build --preset tsan -j "$jobs" --target test_sanitize_comm test_ch04
      OMP_NUM_THREADS=1 ctest --preset tsan -L '^sanitize_comm$'
      OMP_NUM_THREADS=1 ctest --preset tsan -L '^ch04$' -R "^($ddp)\."
      ;;
    fuzz)
      stage "fuzz: every libFuzzer harness, seeds then ${MIXPAR_FUZZ_SECONDS:-20} s each"
      CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DMIXPAR_FUZZ=ON \
        -DMIXPAR_WITH_CUDA=OFF -DMIXPAR_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DMIXPAR_FUZZ_SECONDS="${MIXPAR_FUZZ_SECONDS:-20}"
      cmake --build build-fuzz -j "$jobs" --target mixpar_fuzzers
      # One harness per core at a time: libFuzzer runs on one thread, for a fixed time each.
      ctest --test-dir build-fuzz -L fuzz --output-on-failure -j "$jobs"
      ;;
    *)
      echo "scripts/test.sh: unknown stage '$s' (main, isa, asan, tsan or fuzz)" >&2
      exit 2
      ;;
  esac
done
echo; echo "== done ($(date -u +%H:%M:%S) UTC)"
