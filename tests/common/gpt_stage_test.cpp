// GptModel as a pipeline stage (the seam chapter 7 plugs into): the stage split rule, stages
// that start from the whole model's weights, and two stages chained by hand (activation
// forward, its gradient backward) that compute the whole model's loss and gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "model/gpt.h"
#include "random/philox.h"
#include "tensor/ledger.h"
#include "util/errors.h"

namespace mixpar {
namespace {

// 4 blocks, 16 wide, 2 heads, 8 positions, 32 tokens.
GptConfig four_blocks() { return {4, 2, 16, 8, 32}; }

std::vector<std::int32_t> ids(const GptConfig& c, std::size_t n, std::uint64_t seed) {
  Philox g(seed);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = static_cast<std::int32_t>(g.next_u32() % c.vocab_size);
  return v;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

GptModel stage_model(const GptConfig& c, int index, int count) {
  GptOptions o;
  o.seed = 5;
  o.stage = gpt_stage(c, index, count);
  return GptModel(c, o);
}

TEST(GptStage, SplitRuleGivesTheFirstStagesTheExtraBlocks) {
  const GptConfig c{10, 2, 16, 8, 32};
  std::vector<std::int64_t> blocks;
  std::int64_t next = 0;
  for (int s = 0; s < 4; ++s) {
    const GptStage st = gpt_stage(c, s, 4);
    EXPECT_EQ(st.first_block, next) << "stages are contiguous";
    next = st.end_block;
    blocks.push_back(st.blocks(c));
  }
  EXPECT_EQ(next, 10);
  EXPECT_EQ(blocks, (std::vector<std::int64_t>{3, 3, 2, 2}));  // 10 = 3 + 3 + 2 + 2
}

TEST(GptStage, MoreStagesThanBlocksIsAnInputErrorNamingBoth) {
  try {
    gpt_stage(four_blocks(), 0, 5);
    FAIL() << "5 stages of 4 blocks accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("5 stages for 4 blocks"), std::string::npos) << e.what();
  }
}

TEST(GptStage, EachStageRegistersOnlyWhatItRunsWithTheTiedHeadOnBothEnds) {
  const GptConfig c = four_blocks();
  const ParamRegistry first = make_gpt2_registry(c, gpt_stage(c, 0, 3));
  const ParamRegistry middle = make_gpt2_registry(c, gpt_stage(c, 1, 3));
  const ParamRegistry last = make_gpt2_registry(c, gpt_stage(c, 2, 3));
  EXPECT_TRUE(first.contains("wte.weight") && first.contains("wpe.weight"));
  EXPECT_FALSE(first.contains("ln_f.weight"));
  EXPECT_FALSE(first.at("wte.weight").holding.tied_copy);
  EXPECT_FALSE(middle.contains("wte.weight") || middle.contains("ln_f.weight"));
  EXPECT_TRUE(middle.contains("h.2.attn.c_attn.weight"));  // blocks 0-1 | 2 | 3
  EXPECT_TRUE(last.contains("wte.weight") && last.contains("ln_f.bias"));
  EXPECT_FALSE(last.contains("wpe.weight"));
  EXPECT_TRUE(last.at("wte.weight").holding.tied_copy);
  // Every block's 12 parameters are on exactly one stage; wte on two.
  const ParamRegistry whole = make_gpt2_registry(c);
  for (const ParamEntry& e : whole.entries()) {
    const int holders = int(first.contains(e.name)) + int(middle.contains(e.name)) +
                        int(last.contains(e.name));
    EXPECT_EQ(holders, e.name == "wte.weight" ? 2 : 1) << e.name;
  }
}

TEST(GptStage, StagesStartFromTheWholeModelsWeights) {
  const GptConfig c = four_blocks();
  GptOptions o;
  o.seed = 5;
  const GptModel whole(c, o);
  for (int s = 0; s < 3; ++s) {
    const GptModel st = stage_model(c, s, 3);
    for (const ParamEntry& e : st.registry().entries()) {
      EXPECT_TRUE(same_bits(e.param, whole.param(e.name))) << "stage " << s << " " << e.name;
    }
  }
}

// The whole model's forward and backward, run as two stages by hand: stage 0's output is
// stage 1's input; stage 1's input gradient is stage 0's output gradient. Everything but wte
// is computed by the same operations in the same order, so it is bit-identical; wte's two
// halves (the embedding's on stage 0, the head's on stage 1) are summed in another order than
// the whole model's in-place accumulation, so they agree to rounding.
TEST(GptStage, TwoStagesChainedByHandEqualTheWholeModel) {
  const GptConfig c = four_blocks();
  const std::int64_t B = 2, T = 8;
  const auto tokens = ids(c, B * T, 1), targets = ids(c, B * T, 2);
  GptOptions o;
  o.seed = 5;
  GptModel whole(c, o);
  const double loss = whole.forward(tokens, targets, B, T);
  whole.backward(1.0f);

  GptModel s0 = stage_model(c, 0, 2), s1 = stage_model(c, 1, 2);
  EXPECT_TRUE(std::isnan(s0.forward(tokens, {}, B, T)));  // no loss before the last stage
  s1.prepare(B, T);
  s1.stage_input().copy_from(s0.stage_output());
  const double staged_loss = s1.forward({}, targets, B, T);
  EXPECT_EQ(staged_loss, loss);
  s1.backward(1.0f);
  s0.prepare(B, T);
  s0.output_grad().copy_from(s1.input_grad());
  s0.backward(1.0f);

  for (GptModel* st : {&s0, &s1}) {
    for (const ParamEntry& e : st->registry().entries()) {
      if (e.name == "wte.weight") continue;
      EXPECT_TRUE(same_bits(e.grad, whole.grad(e.name))) << e.name;
    }
  }
  const float* g0 = s0.grad("wte.weight").data_as<float>();
  const float* g1 = s1.grad("wte.weight").data_as<float>();
  const float* gw = whole.grad("wte.weight").data_as<float>();
  double worst = 0, scale = 0;
  for (std::int64_t i = 0; i < c.vocab_size * c.n_embd; ++i) {
    worst = std::max(worst, std::abs(double(g0[i] + g1[i]) - gw[i]));
    scale = std::max(scale, std::abs(double(gw[i])));
  }
  // Two FP32 additions in another order: a few ulps of the largest element.
  EXPECT_LE(worst, 4 * 1.2e-7 * scale) << "largest |dwte| " << scale;
}

// A pipeline holds several micro-batches' activations at once: two forwards into two slots,
// then their backwards, give exactly the gradients of running them one after the other.
TEST(GptStage, SlotsHoldMicroBatchesInFlightWithoutChangingTheGradients) {
  const GptConfig c = four_blocks();
  const auto t0 = ids(c, 16, 5), y0 = ids(c, 16, 6), t1 = ids(c, 16, 7), y1 = ids(c, 16, 8);
  GptOptions o;
  o.seed = 5;
  MemoryLedger ledger;  // outlives the models: their activations are charged to it
  GptModel one_by_one(c, o), in_flight(c, o);
  const double a0 = one_by_one.forward(t0, y0, 2, 8);
  one_by_one.backward(0.5f);
  const double a1 = one_by_one.forward(t1, y1, 2, 8);
  one_by_one.backward(0.5f, /*accumulate=*/true);

  {
    LedgerScope use(ledger);
    EXPECT_EQ(in_flight.forward(t0, y0, 2, 8, /*slot=*/0), a0);
    const std::size_t one_slot = ledger.live(MemCategory::kActivations);
    EXPECT_EQ(in_flight.forward(t1, y1, 2, 8, /*slot=*/1), a1);
    EXPECT_EQ(ledger.live(MemCategory::kActivations), 2 * one_slot) << "two micro-batches held";
    in_flight.backward(0.5f, false, 0);
    in_flight.backward(0.5f, true, 1);
  }
  EXPECT_EQ(in_flight.slots(), 2);
  for (const ParamEntry& e : one_by_one.registry().entries()) {
    EXPECT_TRUE(same_bits(e.grad, in_flight.grad(e.name))) << e.name;
  }
}

TEST(GptStage, AStageReportsEveryEntryItHoldsOnceDuringBackward) {
  const GptConfig c = four_blocks();
  for (int s = 0; s < 2; ++s) {
    GptModel st = stage_model(c, s, 2);
    std::vector<int> seen(st.registry().entries().size(), 0);
    st.set_grad_ready_hook([&](std::size_t e) { ++seen[e]; });
    const auto tokens = ids(c, 16, 3), targets = ids(c, 16, 4);
    st.prepare(2, 8);
    st.forward(s == 0 ? tokens : std::vector<std::int32_t>{}, targets, 2, 8);
    st.backward(1.0f);
    for (std::size_t e = 0; e < seen.size(); ++e) {
      EXPECT_EQ(seen[e], 1) << "stage " << s << " " << st.registry().entries()[e].name;
    }
  }
}

}  // namespace
}  // namespace mixpar
