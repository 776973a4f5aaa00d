// Chapter 5: one training step of ch08's Trainer on 2 data-parallel ranks (threads of this
// process, the local backend, one compute thread each), DDP (ZeRO stage 0) against ZeRO
// stages 1, 2 and 3 (3: without prefetch, Arg 3, and with one unit ahead, Arg 4), for config S (4/256/4, V 256, T 128, B 8 per rank) in fp32 and bf16. Each
// iteration times a few steps inside one run on rank 0's clock (manual time): the trainer,
// its buckets and buffers are built once per iteration and warmed up by one step first.
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <vector>

#include "ch08_full_3d/trainer.h"
#include "comm/local_backend.h"
#include "random/philox.h"

namespace {

using namespace mixpar;
using namespace mixpar::ch08;

constexpr int kRanks = 2;
constexpr int kTimedSteps = 4;

TrainingData random_tokens(std::int64_t n) {
  Philox g(42);
  std::vector<std::uint16_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = static_cast<std::uint16_t>(g.next_u32() % 256);
  TrainingData d;
  d.description = "random tokens";
  d.tokens = std::make_shared<const std::vector<std::uint16_t>>(std::move(t));
  return d;
}

// arg: 0-3 the ZeRO stage (3 with --zero3-prefetch 0), 4: stage 3 prefetching one unit.
TrainerConfig bench_config(DType dtype, int arg) {
  const int zero_stage = arg == 4 ? 3 : arg;
  TrainerConfig c;
  c.model = GptConfig{4, 4, 256, 128, 256};
  c.batch = 8;
  c.seq = 128;
  c.dtype = dtype;
  c.data = "random tokens";
  c.steps = 1'000'000;
  c.schedule = LrSchedule{LrScheduleKind::kConstant, 1e-4, 1e-4, 0, c.steps};
  c.ranks = c.dp = kRanks;
  c.threads = 1;
  c.zero_stage = zero_stage;
  c.zero3_prefetch = arg == 4 ? 1 : 0;
  return c;
}

void BM_DataParallelStep(benchmark::State& state, DType dtype) {
  const int stage = static_cast<int>(state.range(0));
  const TrainerConfig c = bench_config(dtype, stage);
  const TrainingData data = random_tokens(c.batch * c.seq * kRanks * 16 + 1);
  set_cpu_threads(1);
  for (auto _ : state) {
    double seconds = 0;
    run_local(kRanks, [&](Communicator& comm) {
      Trainer t(c, data, &comm);
      t.train_step();  // warm-up: buffers allocated
      const auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < kTimedSteps; ++k) t.train_step();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (comm.rank() == 0) seconds = s / kTimedSteps;
    });
    state.SetIterationTime(seconds);
  }
  static const char* const kLabels[] = {"DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3, no prefetch",
                                        "ZeRO-3, prefetch 1"};
  state.SetLabel(kLabels[stage]);
}

BENCHMARK_CAPTURE(BM_DataParallelStep, S_fp32, DType::kF32)
    ->DenseRange(0, 4)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK_CAPTURE(BM_DataParallelStep, S_bf16, DType::kBF16)
    ->DenseRange(0, 4)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);

}  // namespace

BENCHMARK_MAIN();
