// Chapter 6: one training step of ch08's Trainer with tensor parallelism on the CPU engine,
// tp ranks as threads of this process (local backend), against one device: config S of
// bench_gpt_step (4 layers, 4 heads, C 256, V 256, T 128, B 8; fp32). The argument is the tp
// degree (1: one device); every rank computes with cores / tp threads, so each run uses the
// same cores. Counters over wall time: tokens/s, and tp_comm, the share of rank 0's step spent
// inside the tp collectives (TpCollectives' clock: f, g, the embedding's and the loss's
// all-reduces, with the waits for the other rank they include).
#include <benchmark/benchmark.h>

#include <memory>
#include <thread>
#include <vector>

#include "ch06_tensor_parallel/tp_collectives.h"
#include "bench_data.h"
#include "ch08_full_3d/trainer.h"
#include "comm/local_backend.h"
#include "ops/compute_threads.h"
#include "random/philox.h"

namespace {

using namespace mixpar;
using namespace mixpar::ch08;

using bench::random_tokens;

TrainerConfig bench_config(int tp) {
  TrainerConfig c;
  c.model = GptConfig{4, 4, 256, 128, 256};
  c.batch = 8;
  c.seq = 128;
  c.data = "random tokens";
  c.steps = 1'000'000;
  c.schedule = LrSchedule{LrScheduleKind::kConstant, 1e-4, 1e-4, 0, c.steps};
  c.ranks = tp;
  c.tp = tp;
  c.dp = 1;
  return c;
}

void BM_TpStep(benchmark::State& state) {
  const int tp = static_cast<int>(state.range(0));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const TrainerConfig c = bench_config(tp);
  const TrainingData data = random_tokens(c.batch * c.seq * 16 + 1, c.model.vocab_size);
  LocalWorld world(tp);
  std::vector<std::unique_ptr<Trainer>> trainers(static_cast<std::size_t>(tp));
  world.run([&](Communicator& comm) {
    ops::set_compute_threads(std::max(1, cores / tp));
    trainers[static_cast<std::size_t>(comm.rank())] =
        std::make_unique<Trainer>(c, data, tp > 1 ? &comm : nullptr);
    trainers[static_cast<std::size_t>(comm.rank())]->train_step();  // warm-up
  });
  auto* ops0 = dynamic_cast<ch06::TpCollectives*>(trainers[0]->model().options().tp_ops);
  if (ops0 != nullptr) ops0->take_seconds();
  double step_s = 0;
  for (auto _ : state) {
    world.run([&](Communicator& comm) {
      ops::set_compute_threads(std::max(1, cores / tp));
      const StepStats s = trainers[static_cast<std::size_t>(comm.rank())]->train_step();
      if (comm.rank() == 0) step_s += s.seconds;
    });
  }
  const double steps = static_cast<double>(state.iterations());
  state.counters["tok/s"] = benchmark::Counter(
      steps * static_cast<double>(c.tokens_per_step()), benchmark::Counter::kIsRate);
  state.counters["tp_comm"] = ops0 != nullptr ? ops0->take_seconds() / step_s : 0.0;
  world.run([&](Communicator& comm) { trainers[static_cast<std::size_t>(comm.rank())].reset(); });
}

BENCHMARK(BM_TpStep)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
