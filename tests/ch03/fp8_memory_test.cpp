// The FP8 bill (ch03_master_weights/fp8_memory.h): the BF16 row is the bill the ledger
// measures in the chapter's demo (20 = 16 + the FP32 unscale buffer); each recipe adds the FP8
// weight copy (12 L C^2 GEMM weights of GPT-2) and its own scaling state, counted from the
// shape; mixpar-mem --precision fp8 --json prints the same numbers.
#include "ch03_master_weights/fp8_memory.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "ch03_master_weights/memory_bill.h"
#include "util/json.h"
#include "command.h"

namespace mixpar::mem {
namespace {

TrainingSetup gpt2_small() {
  TrainingSetup t;
  GptShape s;
  s.n_layer = 12;
  s.n_embd = 768;
  s.n_head = 12;
  s.vocab_size = 50257;
  s.seq = 1024;
  s.micro_batch = 4;
  t.shape = s;
  return t;
}

constexpr std::int64_t kGpt2Params = 124'439'808;

TEST(Fp8Memory, Bf16RowIsTheBillTheLedgerMeasures) {
  const ch03::MemoryBillRow measured =
      ch03::measure_memory_bill(ch02::StudentSetup{}, Precision::kBf16, Optimizer::kAdamW);
  const auto& m = measured.measured;
  const double ledger =
      double(m.parameters + m.gradients + m.master_params + m.optimizer_state) / double(measured.params);
  const Fp8StateBytes bf16 =
      fp8_state_bytes(std::nullopt, Optimizer::kAdamW, kGpt2Params, {}, 1024);
  EXPECT_EQ(bf16.total(), ledger);
  EXPECT_EQ(bf16.total(), 20);
}

TEST(Fp8Memory, EachRecipeAddsTheWeightCopyAndItsScalingState) {
  const TrainingSetup t = gpt2_small();
  const Fp8Gemms g = fp8_gemms(t, kGpt2Params);
  EXPECT_EQ(g.weight_params, 12 * 12 * 768 * 768);
  EXPECT_EQ(*g.count, 48);
  EXPECT_EQ(*g.blocks, g.weight_params / (128 * 128));  // 128 divides 768
  const double n = double(kGpt2Params);
  const double copy = double(g.weight_params) / n;
  const Fp8StateBytes d = fp8_state_bytes(fp8::Recipe::kDelayed, Optimizer::kAdamW, kGpt2Params, g, 16);
  EXPECT_EQ(d.fp8_weights, copy);
  EXPECT_EQ(*d.scaling_state, 48.0 * 3 * (16 + 2) * 4 / n);
  const Fp8StateBytes tw =
      fp8_state_bytes(fp8::Recipe::kTensorwise, Optimizer::kAdamW, kGpt2Params, g, 16);
  EXPECT_EQ(*tw.scaling_state, 48.0 * 4 / n);
  const Fp8StateBytes bw =
      fp8_state_bytes(fp8::Recipe::kBlockwise, Optimizer::kAdamW, kGpt2Params, g, 16);
  EXPECT_EQ(*bw.scaling_state, double(*g.blocks) * 4 / n);
  EXPECT_DOUBLE_EQ(bw.total(), 20 + copy + *bw.scaling_state);
  // --params alone: every parameter is taken as a GEMM weight; GEMMs are not counted.
  TrainingSetup p;
  p.params = 1000;
  const Fp8StateBytes up =
      fp8_state_bytes(fp8::Recipe::kDelayed, Optimizer::kAdamW, 1000, fp8_gemms(p, 1000), 16);
  EXPECT_EQ(up.fp8_weights, 1);
  EXPECT_FALSE(up.scaling_state.has_value());
}

TEST(Fp8Memory, ToolPrintsEachRecipesBytesPerParameter) {
  const std::string cmd = std::string("'") + MIXPAR_MEM_PATH +
                          "' --n-layer 12 --n-embd 768 --n-head 12 --vocab-size 50257 --seq 1024 "
                          "--micro-batch 4 --precision fp8 --amax-history 16 --json";
  const test_support::TempDir dir;
  const test_support::CliRun run = test_support::run_shell(dir, cmd);
  ASSERT_EQ(run.code, 0) << run.err;
  const std::string& out = run.out;
  const Json j = Json::parse(out, "mixpar-mem --json");
  const Json& rows = j.at("fp8_bytes_per_param");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows.at(0).at("run").as_string(), "bf16");
  EXPECT_EQ(rows.at(0).at("total").as_double(), 20);
  const Fp8Gemms g = fp8_gemms(gpt2_small(), kGpt2Params);
  const Fp8StateBytes d = fp8_state_bytes(fp8::Recipe::kDelayed, Optimizer::kAdamW, kGpt2Params, g, 16);
  EXPECT_EQ(rows.at(1).at("run").as_string(), "fp8 delayed");
  EXPECT_EQ(rows.at(1).at("scaling_state").as_double(), *d.scaling_state);
  EXPECT_EQ(rows.at(1).at("total").as_double(), d.total());
  EXPECT_EQ(j.at("precision").as_string(), "bf16");  // the run the GEMMs are cast from
}

}  // namespace
}  // namespace mixpar::mem
