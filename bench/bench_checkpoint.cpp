// What a checkpoint costs the training loop, synchronous against --checkpoint-async, on the
// GPT-2 124M shape (FP32 on one device: 124M masters and two AdamW moments, about 1.5 GB a
// checkpoint): the time a step stands still for one checkpoint (a synchronous save: all of
// it; an asynchronous one: the staging copy and the commit), the background write's time, and
// a training step's time with the writer running beside it against one without.
// Manual time: only the part the loop would wait for is timed. Writes into $TMPDIR (or /tmp).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "bench_data.h"
#include "ch08_full_3d/async_checkpoint.h"
#include "ch08_full_3d/trainer.h"
#include "ops/compute_threads.h"

namespace {

using namespace mixpar;
using namespace mixpar::ch08;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// GPT-2 124M, T 64, B 4, FP32: llm.c's smallest GPT-2 (bench_gpt_step.cpp's M).
TrainerConfig config_124m(const std::string& dir) {
  TrainerConfig c;
  c.model = GptConfig{12, 12, 768, 1024, 50257};
  c.batch = 4;
  c.seq = 64;
  c.dtype = DType::kF32;
  c.data = "random tokens";
  c.steps = 1'000'000;
  c.schedule = LrSchedule{LrScheduleKind::kConstant, 1e-4, 1e-4, 0, c.steps};
  c.checkpoint_dir = dir;
  c.checkpoint_keep = 1;  // one checkpoint on disk at a time
  return c;
}

// A fresh checkpoint root per benchmark, removed at its end.
struct Root {
  std::string path;
  explicit Root(const char* name) {
    const char* tmp = std::getenv("TMPDIR");
    path = (fs::path(tmp != nullptr ? tmp : "/tmp") / ("mixpar_bench_" + std::string(name)))
               .string();
    fs::remove_all(path);
  }
  ~Root() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// The step stands still for the whole synchronous save: every file written, synced and
// checksummed, then committed.
void BM_CheckpointStallSync(benchmark::State& state) {
  ops::set_compute_threads(static_cast<int>(state.range(0)));
  const Root root("sync");
  const TrainerConfig c = config_124m(root.path);
  Trainer t(c, bench::random_tokens(c.batch * c.seq * 16 + 1, c.model.vocab_size));
  t.train_step();
  for (auto _ : state) {
    const Clock::time_point t0 = Clock::now();
    t.save_checkpoint();
    state.SetIterationTime(seconds_since(t0));
  }
}

// The step stands still for the staging copy (and, at the next step, the commit); the files
// are written by the background thread, whose time is reported beside it (write_ms).
void BM_CheckpointStallAsync(benchmark::State& state) {
  ops::set_compute_threads(static_cast<int>(state.range(0)));
  const Root root("async");
  const TrainerConfig c = config_124m(root.path);
  Trainer t(c, bench::random_tokens(c.batch * c.seq * 16 + 1, c.model.vocab_size));
  t.train_step();
  AsyncCheckpoints ck(root.path, 1, nullptr);
  double write_s = 0, staged = 0;
  for (auto _ : state) {
    const Clock::time_point t0 = Clock::now();
    ck.save(t.step(), [&] { return t.stage_checkpoint(); });
    double blocked = seconds_since(t0);
    // The write is left to finish outside the timed part, as the steps between checkpoints
    // would; its commit is the loop's again.
    state.PauseTiming();
    const std::optional<CheckpointTimes> done = ck.finish();
    state.ResumeTiming();
    blocked += done->commit_s;
    write_s += done->write_s;
    staged = static_cast<double>(done->staged_bytes);
    state.SetIterationTime(blocked);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["write_ms"] = 1e3 * write_s / n;
  state.counters["staged_MB"] = staged / 1e6;
}

// One training step, alone (arg 1 = 0) or started as the writer starts writing a checkpoint
// (1): what the write costs the steps it runs beside (memory bandwidth, the page cache, a
// core). overlapped counts the steps that ended before the write did.
void BM_StepWhileWriting(benchmark::State& state) {
  ops::set_compute_threads(static_cast<int>(state.range(0)));
  const bool writing = state.range(1) != 0;
  const Root root(writing ? "step_writing" : "step_alone");
  const TrainerConfig c = config_124m(root.path);
  Trainer t(c, bench::random_tokens(c.batch * c.seq * 16 + 1, c.model.vocab_size));
  t.train_step();
  AsyncCheckpoints ck(root.path, 1, nullptr);
  double overlapped = 0;
  for (auto _ : state) {
    if (writing) {
      state.PauseTiming();
      ck.save(t.step(), [&] { return t.stage_checkpoint(); });
      state.ResumeTiming();
    }
    const Clock::time_point t0 = Clock::now();
    t.train_step();
    state.SetIterationTime(seconds_since(t0));
    if (writing) {
      state.PauseTiming();
      overlapped += ck.poll().has_value() ? 0 : 1;  // still writing when the step ended
      ck.finish();
      state.ResumeTiming();
    }
  }
  state.counters["overlapped"] = overlapped;
}

BENCHMARK(BM_CheckpointStallSync)
    ->Arg(2)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);
BENCHMARK(BM_CheckpointStallAsync)
    ->Arg(2)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);
BENCHMARK(BM_StepWhileWriting)
    ->Args({2, 0})
    ->Args({2, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
