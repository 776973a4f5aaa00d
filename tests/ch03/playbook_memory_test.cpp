// The Ultra-Scale Playbook's FP8 memory table (ch03_master_weights/playbook_memory.h): each row's
// total follows from its formats (baseline 20, Transformer Engine 16 = 4 + 4 + 4 + 4 with no
// masters, DeepSeek-V3 15 = 4 + 4 + 1 + 2 + 2 + 2, ...), mixpar's bf16 bill is the baseline
// component by component, its FP8 bills add exactly the FP8 weight copy and the scales, and
// mixpar-mem --precision fp8 --json prints the same rows.
#include "ch03_master_weights/playbook_memory.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/json.h"
#include "command.h"

namespace mixpar::mem {
namespace {

const PlaybookRow& row(const std::string& name) {
  static const std::vector<PlaybookRow> rows = playbook_fp8_rows();
  for (const PlaybookRow& r : rows) {
    if (r.name == name) return r;
  }
  throw std::runtime_error("no Playbook row " + name);
}

TEST(PlaybookFp8Memory, EachRowsTotalFollowsFromItsFormats) {
  ASSERT_EQ(playbook_fp8_rows().size(), 6u);
  EXPECT_EQ(component_bytes(row("BF16 with FP32 mixed precision baseline")).total(), 20);
  EXPECT_EQ(component_bytes(row("the above without FP32 grad accumulation")).total(), 16);
  EXPECT_EQ(component_bytes(row("FP8-LM's O3 level")).total(), 9);
  EXPECT_EQ(component_bytes(row("Nanotron's FP8")).total(), 10);
}

TEST(PlaybookFp8Memory, TransformerEngineIsSixteenBytesWithOneFp32WeightCopy) {
  const ComponentBytes te = component_bytes(row("Transformer Engine"));
  EXPECT_EQ(te.master_weights, 0);         // n/a: the FP32 weights are the masters
  EXPECT_EQ(te.accumulated_gradients, 0);  // n/a
  EXPECT_EQ(te.model_weights, 4);
  EXPECT_EQ(te.gradients, 4);
  EXPECT_EQ(te.optimizer, 8);
  EXPECT_EQ(te.total(), 16);
}

TEST(PlaybookFp8Memory, DeepSeekV3IsFifteenBytesWithFp8WeightsAndBf16Moments) {
  const ComponentBytes ds = component_bytes(row("DeepSeek-V3"));
  EXPECT_EQ(ds.master_weights, 4);
  EXPECT_EQ(ds.accumulated_gradients, 4);
  EXPECT_EQ(ds.model_weights, 1);  // FP8, no BF16 copy counted
  EXPECT_EQ(ds.gradients, 2);
  EXPECT_EQ(ds.optimizer, 4);      // BF16 m and v
  EXPECT_EQ(ds.total(), 15);
}

TEST(PlaybookFp8Memory, MixparsBf16BillIsTheBaselineAndFp8AddsTheCopyAndScales) {
  const std::int64_t params = 1'000'000;
  Fp8Gemms g;
  g.weight_params = 600'000;
  g.count = 8;
  const ComponentBytes base = component_bytes(row("BF16 with FP32 mixed precision baseline"));
  const ComponentBytes ours =
      component_bytes(fp8_state_bytes(std::nullopt, Optimizer::kAdamW, params, g, 16));
  EXPECT_EQ(ours.master_weights, base.master_weights);
  EXPECT_EQ(ours.accumulated_gradients, base.accumulated_gradients);
  EXPECT_EQ(ours.model_weights, base.model_weights);
  EXPECT_EQ(ours.gradients, base.gradients);
  EXPECT_EQ(ours.optimizer, base.optimizer);
  EXPECT_EQ(ours.total(), 20);
  const ComponentBytes tw =
      component_bytes(fp8_state_bytes(fp8::Recipe::kTensorwise, Optimizer::kAdamW, params, g, 16));
  EXPECT_DOUBLE_EQ(tw.model_weights, 2 + 0.6);     // bf16 working copy + FP8 GEMM weights
  EXPECT_DOUBLE_EQ(tw.extra, 8 * 4 / 1e6);         // one FP32 scale per GEMM
  EXPECT_DOUBLE_EQ(tw.total(), 20 + 0.6 + 8 * 4 / 1e6);
}

TEST(PlaybookFp8Memory, ToolPrintsThePlaybookRowsBesideMixparsBills) {
  const std::string cmd = std::string("'") + MIXPAR_MEM_PATH +
                          "' --n-layer 2 --n-embd 128 --n-head 4 --vocab-size 256 --seq 64 "
                          "--micro-batch 2 --precision fp8 --fp8-recipe tensorwise --json";
  const test_support::TempDir dir;
  const test_support::CliRun run = test_support::run_shell(dir, cmd);
  ASSERT_EQ(run.code, 0) << run.err;
  const std::string& out = run.out;
  const Json rows = Json::parse(out, "mixpar-mem --json").at("fp8_playbook_accounting");
  ASSERT_EQ(rows.size(), 8u);  // six Playbook rows, mixpar bf16, mixpar fp8 tensorwise
  EXPECT_EQ(rows.at(2).at("row").as_string(), "Transformer Engine");
  EXPECT_EQ(rows.at(2).at("total").as_double(), 16);
  EXPECT_EQ(rows.at(4).at("row").as_string(), "DeepSeek-V3");
  EXPECT_EQ(rows.at(4).at("total").as_double(), 15);
  EXPECT_EQ(rows.at(4).at("model_weights").as_double(), 1);
  EXPECT_EQ(rows.at(6).at("row").as_string(), "mixpar bf16");
  EXPECT_EQ(rows.at(6).at("total").as_double(), 20);
  EXPECT_EQ(rows.at(7).at("row").as_string(), "mixpar fp8 tensorwise");
  EXPECT_GT(rows.at(7).at("model_weights").as_double(), 2);  // + the FP8 copy
  EXPECT_GT(rows.at(7).at("scales").as_double(), 0);
}

}  // namespace
}  // namespace mixpar::mem
