#!/usr/bin/env bash
# CI's test run (.ci/run calls it). First the main build: everything (CPU engine; the CUDA
# engine too when a toolkit is present) and every test, so that a failure there is seen
# quickly. Then the runs that need builds of their own, each building only what it runs:
#   asan  AddressSanitizer + UBSan (build-asan): the readers of user input (flags, JSON,
#         safetensors, token shards, config.json, atomic files), the communicator, and every
#         test of chapter 8 (the trainer, its checkpoints and train_gpt's command line)
#   tsan  ThreadSanitizer (build-tsan): the communicator and chapter 4's DDP
#   fuzz  libFuzzer (build-fuzz, clang): every harness of fuzz/ over its seed corpus, then
#         MIXPAR_FUZZ_SECONDS (default 20) of new inputs each
# GPU tests skip, saying why, where no GPU is visible. With no argument CI runs main, then
# fuzz (about 3.5 minutes on 2 idle cores: the build, then 6 x 22 s); asan and tsan run when
# named, and join the default once their time on the 2-core CI machine is measured to fit its
# 30 minutes beside the main build's 9.5.
# Usage: bash scripts/test.sh [main|asan|tsan|fuzz ...]   (no argument: main fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
export PATH="/usr/local/cuda/bin:$PATH"
jobs="$(nproc)"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(main fuzz)

# The suites of test_common the sanitizer runs take; the rest of it is the math, which the
# main run covers and which the sanitizers would only make slow.
readers='Cli|ParseBytes|ParseDouble|ParseInt|RunMain|Json|AtomicWrite|GptConfig|Safetensors'
readers+='|TokenLoader|TokenShard|Tokenizer|BuiltinData|CheckedMath|ParamRegistry'
comm='LocalComm|LocalSendrecv|LocalSendrecvReduce|ParallelGrid'
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
    asan)
      stage "asan: readers, communicator and chapter 8 under AddressSanitizer + UBSan"
      cmake --preset asan
      cmake --build --preset asan -j "$jobs" --target test_common test_ch08 train_gpt
      ctest --preset asan -L common -R "^($readers|$comm)\."
      ctest --preset asan -L ch08
      ;;
    tsan)
      # One OpenMP thread: libgomp is not built with TSan, and its own synchronisation would
      # be reported; the ranks' threads, the communicator's and DDP's, are what is checked.
      stage "tsan: communicator and DDP under ThreadSanitizer"
      cmake --preset tsan
      cmake --build --preset tsan -j "$jobs" --target test_common test_ch04
      OMP_NUM_THREADS=1 ctest --preset tsan -L common -R "^($comm)\."
      OMP_NUM_THREADS=1 ctest --preset tsan -L ch04 -R "^($ddp)\."
      ;;
    fuzz)
      stage "fuzz: every libFuzzer harness, seeds then ${MIXPAR_FUZZ_SECONDS:-20} s each"
      CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DMIXPAR_FUZZ=ON \
        -DMIXPAR_WITH_CUDA=OFF -DMIXPAR_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DMIXPAR_FUZZ_SECONDS="${MIXPAR_FUZZ_SECONDS:-20}"
      cmake --build build-fuzz -j "$jobs" --target mixpar_fuzzers
      ctest --test-dir build-fuzz -L fuzz --output-on-failure
      ;;
    *)
      echo "scripts/test.sh: unknown stage '$s' (main, asan, tsan or fuzz)" >&2
      exit 2
      ;;
  esac
done
echo; echo "== done ($(date -u +%H:%M:%S) UTC)"
