// One full training step of ch08's Trainer (forward, backward, clip, AdamW) on random tokens, for
// config S (4/256/4, V 256, T 128, B 8; fp32, bf16, fp16) and M (GPT-2 124M shape, T 64, B 4).
// Counters over wall time: tokens/s and GFLOP/s at llm.c's 6N + 6LCT FLOPs per token (causal
// half of attention). The argument is the thread count (OpenMP loops and Eigen GEMMs).
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "bench_data.h"
#include "ch08_full_3d/trainer.h"
#include "ops/compute_threads.h"
#include "random/philox.h"

namespace {

using namespace mixpar;
using namespace mixpar::ch08;

struct BenchShape {
  GptConfig model;
  std::int64_t B, T;
};
const BenchShape kS{{4, 4, 256, 128, 256}, 8, 128};
const BenchShape kM{{12, 12, 768, 1024, 50257}, 4, 64};

using bench::random_tokens;

TrainerConfig bench_config(const BenchShape& s, DType dtype, bool recompute) {
  TrainerConfig c;
  c.recompute = recompute;
  c.model = s.model;
  c.batch = s.B;
  c.seq = s.T;
  c.dtype = dtype;
  c.data = "random tokens";
  c.steps = 1'000'000;
  c.schedule = LrSchedule{LrScheduleKind::kConstant, 1e-4, 1e-4, 0, c.steps};
  return c;
}

// recompute: each block's forward runs again in backward (activation recompute): the extra
// compute shows as the time difference to the same config without it.
void BM_GptStep(benchmark::State& state, const BenchShape& shape, DType dtype,
                bool recompute = false) {
  ops::set_compute_threads(static_cast<int>(state.range(0)));
  const TrainerConfig c = bench_config(shape, dtype, recompute);
  Trainer trainer(c, random_tokens(shape.B * shape.T * 16 + 1, shape.model.vocab_size));
  // Warm-up: buffers allocated, caches warm, and fp16's scaler past its first overflows.
  for (int i = 0; i < (dtype == DType::kF16 ? 3 : 1); ++i) trainer.train_step();
  std::int64_t skipped = 0;
  for (auto _ : state) skipped += trainer.train_step().skipped ? 1 : 0;
  const double steps = static_cast<double>(state.iterations());
  const double tokens = static_cast<double>(c.tokens_per_step());
  state.counters["tok/s"] = benchmark::Counter(steps * tokens, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(steps * tokens * static_cast<double>(c.model.flops_per_token(c.seq)) / 1e9,
                         benchmark::Counter::kIsRate);
  state.counters["skipped"] = static_cast<double>(skipped);
}

BENCHMARK_CAPTURE(BM_GptStep, S_fp32, kS, DType::kF32)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_GptStep, S_fp32_recompute, kS, DType::kF32, true)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_GptStep, S_bf16, kS, DType::kBF16)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_GptStep, S_fp16, kS, DType::kF16)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_GptStep, M_fp32, kM, DType::kF32)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
