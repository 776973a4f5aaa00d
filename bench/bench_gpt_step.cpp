// One full training step of ch08's Trainer (forward, backward, clip, AdamW) on random tokens, for
// config S (4/256/4, V 256, T 128, B 8; fp32, bf16, fp16) and M (GPT-2 124M shape, T 64, B 4).
// Counters over wall time: tokens/s and GFLOP/s at llm.c's 6N + 6LCT FLOPs per token (causal
// half of attention). The argument is the thread count (OpenMP loops and Eigen GEMMs).
// --profile: after the runs, each benchmark's time per step split by operation (ops/op_profile.h)
// from its last run, the rest of the step ("outside the timed ops") included, so a README can
// show where a step's time goes.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench_data.h"
#include "ch08_full_3d/trainer.h"
#include "ops/compute_threads.h"
#include "ops/fma_gemm.h"
#include "ops/onednn_matmul.h"
#include "ops/op_profile.h"
#include "random/philox.h"
#include "report/format.h"
#include "report/text_table.h"
#include "util/cpu_features.h"

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

// --profile: each benchmark's last run, by name.
bool g_profile = false;
struct StepProfile {
  double steps = 0, seconds = 0;
  std::vector<ops::OpTime> ops;
};
std::map<std::string, StepProfile>& profiles() {
  static std::map<std::string, StepProfile> p;
  return p;
}

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

// label: the name --profile prints. recompute: each block's forward runs again in backward (activation recompute): the extra
// compute shows as the time difference to the same config without it.
void BM_GptStep(benchmark::State& state, const char* label, const BenchShape& shape, DType dtype,
                bool recompute = false) {
  ops::set_compute_threads(static_cast<int>(state.range(0)));
  const TrainerConfig c = bench_config(shape, dtype, recompute);
  Trainer trainer(c, random_tokens(shape.B * shape.T * 16 + 1, shape.model.vocab_size));
  // Warm-up: buffers allocated, caches warm, and fp16's scaler past its first overflows.
  for (int i = 0; i < (dtype == DType::kF16 ? 3 : 1); ++i) trainer.train_step();
  std::int64_t skipped = 0;
  ops::OpProfile::reset();
  ops::OpProfile::enable(g_profile);
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) skipped += trainer.train_step().skipped ? 1 : 0;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ops::OpProfile::enable(false);
  const double steps = static_cast<double>(state.iterations());
  if (g_profile) {
    profiles()[std::string(label) + "/" + std::to_string(state.range(0))] =
        StepProfile{steps, wall, ops::OpProfile::snapshot()};
  }
  const double tokens = static_cast<double>(c.tokens_per_step());
  state.counters["tok/s"] = benchmark::Counter(steps * tokens, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(steps * tokens * static_cast<double>(c.model.flops_per_token(c.seq)) / 1e9,
                         benchmark::Counter::kIsRate);
  state.counters["skipped"] = static_cast<double>(skipped);
}

BENCHMARK_CAPTURE(BM_GptStep, S_fp32, "S_fp32", kS, DType::kF32)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_GptStep, S_fp32_recompute, "S_fp32_recompute", kS, DType::kF32, true)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_GptStep, S_bf16, "S_bf16", kS, DType::kBF16)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_GptStep, S_fp16, "S_fp16", kS, DType::kF16)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_GptStep, M_fp32, "M_fp32", kM, DType::kF32)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

void print_profiles() {
  for (const auto& [name, p] : profiles()) {
    const double step_ms = 1e3 * p.seconds / p.steps;
    std::printf("\n%s: %.2f ms per step (%.0f steps), by operation:\n", name.c_str(), step_ms,
                p.steps);
    TextTable t({"operation", "calls/step", "ms/step", "share"});
    double timed = 0;
    for (const ops::OpTime& op : p.ops) {
      timed += op.seconds;
      t.add({op.name, fmt("%.0f", double(op.calls) / p.steps),
             fmt("%.2f", 1e3 * op.seconds / p.steps),
             fmt("%.1f %%", 100.0 * op.seconds / p.seconds)});
    }
    const double rest = p.seconds - timed;
    t.add({"outside the timed ops", "", fmt("%.2f", 1e3 * rest / p.steps),
           fmt("%.1f %%", 100.0 * rest / p.seconds)});
    std::printf("%s", t.str().c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--profile") == 0) g_profile = true;
    else args.push_back(argv[i]);
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  // What this build runs on this CPU, in the output's context (scripts/bench_vs_pytorch.py
  // prints it beside PyTorch's configuration): the ISA it was compiled for and which kernel
  // multiplies FP32 GEMMs (fma_gemm.h's kernel for this CPU) and 16-bit ones (oneDNN's, or why
  // the software path).
  benchmark::AddCustomContext("mixpar_isa", std::string(build_isa()));
  benchmark::AddCustomContext("mixpar_fp32_gemm",
                              std::string(ops::gemm_kernel_name(ops::gemm_kernel())));
  for (const DType t : {DType::kBF16, DType::kF16}) {
    std::string why;
    const std::string kernel = ops::onednn_matmul_available(t, &why)
                                   ? "oneDNN " + ops::onednn_matmul_kernel(t)
                                   : "software (FP32 GEMM on widened operands: " + why + ")";
    benchmark::AddCustomContext("mixpar_" + std::string(dtype_name(t)) + "_gemm",
                                ops::onednn_matmul_enabled() ? kernel
                                                             : "software (MIXPAR_ONEDNN=0)");
  }
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_profiles();
  return 0;
}
