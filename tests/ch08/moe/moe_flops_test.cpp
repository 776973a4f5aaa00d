// The model FLOPs of MoE blocks (model_flops.h): an MoE block runs its router (C E weights a
// token) and one expert of the MLP's 8 C^2 weights per kept assignment, and not the dense MLP
// its registry keeps. The step's count is the routed one: the experts' rows each step ran,
// which a capacity makes fewer than the nominal tokens x top-k.
#include <gtest/gtest.h>

#include <vector>

#include "../ch08_test_util.h"
#include "model_flops.h"

namespace mixpar::ch08 {
namespace {

TrainerConfig moe_flops_config(int n_experts, int top_k, int every) {
  TrainerConfig c = test::tiny_config();
  c.data_order = DataOrder::kSequential;
  c.threads = 1;
  c.moe.n_experts = n_experts;
  c.moe.top_k = top_k;
  c.moe_every = every;
  return c;
}

// Per token: one expert top-1 is the dense MLP plus the router's C x 1; top-2 of 4 experts on
// every 2nd of 2 blocks is one block of 2 experts' 8 C^2 and a [C, 4] router; half of its
// assignments dropped is one expert's work again, the router's alone left over.
TEST(MoeFlops, TheRouterAndTopKExpertsReplaceTheMlpOfEachMoeBlock) {
  const TrainerConfig dense = moe_flops_config(0, 2, 1);
  const double C = static_cast<double>(dense.model.n_embd);
  const double tokens = static_cast<double>(dense.tokens_per_step());
  EXPECT_EQ(moe_flops_delta_per_token(dense), 0.0);
  const double base = grid_flops_per_step(dense);

  const TrainerConfig one = moe_flops_config(1, 1, 1);
  EXPECT_DOUBLE_EQ(moe_flops_delta_per_token(one), 6.0 * 2 * C);
  EXPECT_DOUBLE_EQ(grid_flops_per_step(one), base + 6.0 * 2 * C * tokens);

  const TrainerConfig moe = moe_flops_config(4, 2, 2);
  EXPECT_DOUBLE_EQ(moe_flops_delta_per_token(moe), 6.0 * (4 * C + 8 * C * C));
  EXPECT_DOUBLE_EQ(moe_flops_delta_per_token(moe, {0.5}), 6.0 * 4 * C);
  EXPECT_DOUBLE_EQ(grid_flops_per_step(moe, {1.0}), grid_flops_per_step(moe));
}

// A run whose capacity drops assignments: the step's FLOPs are the routed count, the experts'
// part 6 x 8 C^2 x the rows the layer measured, below the nominal count.
TEST(MoeFlops, TheStepCountsTheRowsTheExpertsRanNotTheNominalTopK) {
  TrainerConfig c = moe_flops_config(4, 2, 2);
  c.moe.capacity_factor = 1.0;
  c.steps = 1;
  Trainer t(c, test::random_data(4000));
  const StepStats s = t.train_step();
  const ch09::MoeStats& m = t.moe()->layer(0).stats();
  ASSERT_GT(m.dropped, 0);
  const double C = static_cast<double>(c.model.n_embd);
  const std::vector<double> kept = kept_fractions(s.moe);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_DOUBLE_EQ(s.flops, grid_flops_per_step(c, kept));
  EXPECT_NEAR(s.flops - grid_flops_per_step(c, {0.0}),
              6.0 * 8 * C * C * static_cast<double>(m.expert_rows), 1e-6 * s.flops);
  EXPECT_LT(s.flops, grid_flops_per_step(c));
}

}  // namespace
}  // namespace mixpar::ch08
