// MFU: the model FLOPs a step multiplies (model_flops.h) over the peak of the cores the run
// computes on (gemm_peak.h). The peak is a peak (at least the ISA's figure and the measured
// GEMM), the ranks of a grid together multiply exactly what one device does, and a real run,
// on one device or on 8 rank threads, never reports more than 100%.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "ch08_test_util.h"
#include "gemm_peak.h"
#include "model_flops.h"
#include "train_gpt_cli.h"
#include "train_log.h"
#include "ops/onednn_matmul.h"
#include "util/cpu_features.h"

namespace mixpar::ch08 {
namespace {

using test::CliRun;
using test::read_jsonl;
using test::TempDir;
using test::train_gpt;

// The FP32 peak is the widest FMA unit the CPU has, measured on every core asked for (at most
// the machine's), whatever the build's ISA.
TEST(IsaPeak, AnFp32RunCountsTheWidestFmaUnitOfTheCpuOnItsCores) {
  const IsaPeak p = isa_peak(1);
  EXPECT_EQ(p.cores, 1);
  EXPECT_EQ(p.unit, widest_fp32_unit());
  if (cpu_has("avx512f")) {
    EXPECT_EQ(p.unit, ComputeUnit::kAvx512Fma);
  } else if (cpu_has("avx2")) {
    EXPECT_EQ(p.unit, ComputeUnit::kAvx2Fma);
  }
  EXPECT_GT(p.flops_per_s, 0.0);
  EXPECT_NE(p.gemm_path.find("FMA-chain kernel"), std::string::npos) << p.gemm_path;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  EXPECT_EQ(isa_peak(cores + 7).cores, cores);
}

#if defined(__x86_64__)
// The measured throughput is never above what a real core can do: two units at 6 GHz. The clock
// that timing dependent adds gave (14-22 GHz on cores that fold immediate adds) is gone. There
// is no lower bound: a loaded or slowed machine (a sanitizer build, a shared host, ctest -j2)
// only lowers a measured rate, so a floor would be a timed assertion that fails on a busy
// machine, not on a wrong kernel; bench/ measures speed.
TEST(IsaPeak, TheMeasuredFmaThroughputIsNeverAboveTwoUnitsAtSixGHz) {
  for (ComputeUnit u : {ComputeUnit::kSse, ComputeUnit::kAvx2Fma, ComputeUnit::kAvx512Fma}) {
    std::string why;
    if (!unit_usable(u, &why)) continue;
    const int lanes = u == ComputeUnit::kSse ? 4 : u == ComputeUnit::kAvx2Fma ? 8 : 16;
    const double per_core = measure_core_flops_per_s(u);
    EXPECT_GT(per_core, 0.0) << unit_name(u);
    EXPECT_LT(per_core, 6e9 * lanes * 2 * 2) << unit_name(u);
  }
}

// A bf16 run whose GEMMs oneDNN runs on AMX or AVX512-BF16 is measured against that unit; with
// oneDNN switched off the same run widens and counts the FP32 units.
TEST(IsaPeak, ABf16RunCountsTheUnitThatRunsItsGemms) {
  ops::set_onednn_matmul(false);
  std::string path;
  EXPECT_EQ(gemm_unit(DType::kBF16, &path), widest_fp32_unit());
  EXPECT_NE(path.find("bf16 operands widened to FP32"), std::string::npos) << path;
  ops::set_onednn_matmul(true);
  std::string why;
  if (!ops::onednn_matmul_available(DType::kBF16, &why)) {
    GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU: " << why;
  }
  const ComputeUnit u = gemm_unit(DType::kBF16, &path);
  EXPECT_NE(path.find("oneDNN"), std::string::npos) << path;
  const std::string kernel = ops::onednn_matmul_kernel(DType::kBF16);
  if (kernel.find("amx") != std::string::npos && unit_usable(ComputeUnit::kAmxBf16)) {
    EXPECT_EQ(u, ComputeUnit::kAmxBf16) << kernel;
  } else if (cpu_has("avx512bf16")) {
    EXPECT_EQ(u, ComputeUnit::kAvx512Bf16) << kernel;
  }
  // The peak is measured on that unit (its speed against the FP32 units is a benchmark's
  // question, not a test's).
  EXPECT_EQ(isa_peak(1, DType::kBF16).unit, u);
}
#endif

TEST(GemmPeak, APeakBelowTheGemmOrFarAboveItIsRefused) {
  EXPECT_EQ(refuse_peak(100e9, 50e9), "");
  EXPECT_EQ(refuse_peak(100e9, 105e9), "") << "within the slack";
  EXPECT_NE(refuse_peak(100e9, 120e9).find("below the measured GEMM"), std::string::npos);
  EXPECT_NE(refuse_peak(1000e9, 5e9).find("more than 100 times"), std::string::npos);
  EXPECT_NE(refuse_peak(0, 5e9), "");
}

TEST(GemmPeak, MfuDividesByTheUnitsPeakUnlessItWasRefused) {
  const GemmPeak p = measure_gemm_peak(1, DType::kF32, 256, 2);
  EXPECT_EQ(p.threads, 1);
  EXPECT_EQ(p.n, 256);
  EXPECT_GT(p.measured_flops_per_s, 0.0);
  EXPECT_EQ(p.isa.cores, 1);
  EXPECT_EQ(p.refused, refuse_peak(p.isa.flops_per_s, p.measured_flops_per_s));
  EXPECT_EQ(p.flops_per_s, p.refused.empty() ? p.isa.flops_per_s : p.measured_flops_per_s);
  const std::string d = p.describe();
  EXPECT_NE(d.find("256^3 f32 GEMM"), std::string::npos) << d;
  EXPECT_NE(d.find(unit_name(p.isa.unit)), std::string::npos) << d;
  // A 16-bit run's peak is measured on its own GEMM path.
  EXPECT_EQ(measure_gemm_peak(1, DType::kBF16, 128, 1).dtype, DType::kBF16);
}

TEST(GemmPeak, TheProcessComputesOnItsRanksThreadsAtMostEveryCore) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  EXPECT_EQ(process_compute_threads(1, 1), 1);
  EXPECT_EQ(process_compute_threads(8, 1), std::min(8, cores));
  EXPECT_EQ(process_compute_threads(8, 0), std::min(8, cores));  // share_cores: >= 1 each
  EXPECT_EQ(process_compute_threads(2, 0), 2 * std::max(1, cores / 2));
}

// One device: 6 (12 L C^2 + V C) + 6 L C T per token, wpe, biases and LayerNorms left out.
TEST(ModelFlops, OneDeviceMultipliesTheFourProjectionsAndTheHead) {
  const GptConfig m{2, 8, 128, 64, 256};
  const double want = 6.0 * (12.0 * 2 * 128 * 128 + 256.0 * 128) + 6.0 * 2 * 128 * 64;
  EXPECT_DOUBLE_EQ(rank_flops_per_token(make_gpt2_registry(m), m, 64, 1), want);
  TrainerConfig c;
  c.model = m;
  c.seq = 64;
  c.batch = 16;
  c.grad_accum = 2;
  EXPECT_DOUBLE_EQ(grid_flops_per_step(c), want * 32 * 64);
  // llm.c's 6N + 6LCT counts wpe, biases and LayerNorms too: a little more.
  EXPECT_GT(static_cast<double>(m.flops_per_token(64)), want);
}

// Every (tp, pp) place's own count, summed, is one device's (tp splits each weight and the
// heads, pp the blocks; the first stage's wte is a lookup, the last stage's the head), with
// the vocabulary padded to a multiple of tp.
TEST(ModelFlops, TheRanksOfAGridTogetherMultiplyWhatOneDeviceDoes) {
  const GptConfig m{4, 4, 64, 32, 257};
  for (const auto& [tp, pp] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {1, 2}, {2, 2}, {4, 4}}) {
    double sum = 0;
    for (int s = 0; s < pp; ++s) {
      for (int t = 0; t < tp; ++t) {
        sum += rank_flops_per_token(make_gpt2_registry(m, gpt_stage(m, s, pp), {t, tp}), m, 32, tp);
      }
    }
    TrainerConfig c;
    c.model = m;
    c.seq = 32;
    c.batch = 1;
    c.tp = tp;
    c.pp = pp;
    EXPECT_DOUBLE_EQ(sum * 32, grid_flops_per_step(c)) << "tp " << tp << " pp " << pp;
  }
}

void expect_mfu_at_most_100_percent(const std::string& args) {
  TempDir d;
  const CliRun r = train_gpt(d, args + " --log-jsonl " + d.file("log.jsonl"));
  ASSERT_EQ(r.code, 0) << args << "\n" << r.err;
  EXPECT_NE(r.out.find("MFU: peak"), std::string::npos) << r.out;
  const std::vector<Json> lines = read_jsonl(d.file("log.jsonl"));
  ASSERT_FALSE(lines.empty());
  for (const Json& j : lines) {
    ASSERT_TRUE(j.contains("mfu")) << j.dump();
    const double mfu = j.at("mfu").as_double();
    EXPECT_GT(mfu, 0.0) << args;
    EXPECT_LE(mfu, 1.0) << args << ": step " << j.at("step").as_int() << " at "
                        << j.at("flops").as_double() / j.at("step_ms").as_double() / 1e6
                        << " GFLOP/s\n" << r.out;
  }
}

// The demo's two runs, 6 steps: before the peak was a peak these printed MFU 300-440%.
TEST(TrainGptMfu, OneDeviceOnOneThreadStaysAtMost100Percent) {
  expect_mfu_at_most_100_percent("--threads 1 --batch 16 --grad-accum 2 --steps 6 --dtype bf16");
}

TEST(TrainGptMfu, EightRankThreadsOnATwoByTwoByTwoGridStayAtMost100Percent) {
  expect_mfu_at_most_100_percent(
      "--ranks 8 --dp 2 --tp 2 --pp 2 --zero-stage 1 --schedule 1f1b --batch 8 --grad-accum 2 "
      "--steps 6 --dtype bf16");
}

// One FLOP count per run: the start-up line's "model GFLOP/step", the log's `flops` (the MFU's
// numerator) and model_flops.h's grid count are the same number (llm.c's all-parameter count,
// which the start-up line printed before, is 2.7% higher at this shape).
TEST(TrainGptMfu, TheStartUpLineTheLogAndTheMfuUseOneFlopCount) {
  TempDir d;
  const CliRun r = train_gpt(d, "--ranks 2 --threads 1 --batch 8 --steps 1 --log-jsonl " +
                                    d.file("log.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string tag = " model GFLOP/step (model_flops.h)";
  const std::size_t end = r.out.find(tag);
  ASSERT_NE(end, std::string::npos) << r.out;
  const std::size_t begin = r.out.rfind("| ", end) + 2;
  const double printed = std::stod(r.out.substr(begin, end - begin));
  const std::vector<Json> lines = read_jsonl(d.file("log.jsonl"));
  ASSERT_FALSE(lines.empty());
  const double logged = lines.front().at("flops").as_double();
  // train_gpt's default shape: L 2, C 128, T 64, V 256; 2 ranks x B 8 x T 64 tokens.
  const double L = 2, C = 128, T = 64, V = 256, tokens = 2 * 8 * 64;
  const double gemm_weights = 12 * L * C * C + V * C;
  EXPECT_DOUBLE_EQ(logged, (6 * gemm_weights + 6 * L * C * T) * tokens);
  EXPECT_NEAR(printed, logged / 1e9, 0.005) << r.out;
  const double all_parameters = gemm_weights + T * C + L * 13 * C + 2 * C;  // + wpe, biases, LNs
  const double llmc = (6 * all_parameters + 6 * L * C * T) * tokens;
  EXPECT_GT(std::abs(printed - llmc / 1e9), 0.05) << "the start-up line prints llm.c's count";
}

TEST(TrainLog, EscapeBytesShowsControlBytesAndInvalidUtf8AsHex) {
  EXPECT_EQ(escape_bytes("12+34= -> 64 (want 64)"), "12+34= -> 64 (want 64)");
  EXPECT_EQ(escape_bytes(std::string("a\nb\tc\\d", 7)), "a\\nb\\tc\\\\d");
  EXPECT_EQ(escape_bytes(std::string("\x01\x7f\xff\xc3", 4)), "\\x01\\x7f\\xff\\xc3");
  EXPECT_EQ(escape_bytes(std::string("\0", 1)), "\\x00");
}

}  // namespace
}  // namespace mixpar::ch08
