// switch_aux_loss against chapter 9's load_balance.h and aux_loss_scale.h on seeded routings,
// and the values the formula fixes: coef when balanced, E coef when one expert takes all.
#include "ch09_aux_loss_grad/aux_loss_grad.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ch09_expert_parallel/aux_loss_scale.h"
#include "ch09_expert_parallel/load_balance.h"
#include "ch09_expert_parallel/moe_lesson.h"
#include "ch09_expert_parallel/router.h"
#include "ch09_expert_parallel/top_k.h"

namespace mixpar::exercises {
namespace {

TEST(SwitchAuxLoss, IsTheCoefficientWhenEveryExpertGetsItsShare) {
  // Four tokens, four experts, top-1, uniform probabilities, one token each.
  const std::vector<float> probs(16, 0.25f);
  const AuxLossResult r = switch_aux_loss(probs, {0, 1, 2, 3}, 4, 1, 0.01, 1.0f, 1);
  EXPECT_NEAR(r.loss, 0.01, 1e-12);
  ASSERT_EQ(r.dprobs.size(), 16u);
  EXPECT_NEAR(r.dprobs[0], 0.01 * 4 * 0.25 / 4, 1e-9);
}

TEST(SwitchAuxLoss, IsECoefWhenOneExpertTakesEverything) {
  std::vector<float> probs(12, 0.0f);
  for (int t = 0; t < 4; ++t) probs[std::size_t(t) * 3] = 1.0f;
  const AuxLossResult r = switch_aux_loss(probs, {0, 0, 0, 0}, 3, 1, 0.5, 1.0f, 1);
  EXPECT_NEAR(r.loss, 1.5, 1e-12);
  ASSERT_EQ(r.dprobs.size(), 12u);
  EXPECT_EQ(r.dprobs[1], 0.0f);  // an expert nobody chose gets no push
}

TEST(SwitchAuxLoss, TheGradientTakesTheLossScaleAndIsDividedOverMicroBatches) {
  const std::vector<float> probs = {0.7f, 0.2f, 0.1f, 0.1f, 0.6f, 0.3f};
  const AuxLossResult one = switch_aux_loss(probs, {0, 1}, 3, 1, 0.1, 1.0f, 1);
  const AuxLossResult scaled = switch_aux_loss(probs, {0, 1}, 3, 1, 0.1, 1024.0f, 4);
  ASSERT_EQ(one.dprobs.size(), 6u);
  ASSERT_EQ(scaled.dprobs.size(), 6u);
  EXPECT_NEAR(scaled.loss, one.loss, 1e-12);  // the value is the loss's, unscaled
  for (std::size_t i = 0; i < 6; ++i) EXPECT_NEAR(scaled.dprobs[i], one.dprobs[i] * 256.0f, 1e-6);
}

TEST(SwitchAuxLoss, EqualsChapterNinesLossAndGradient) {
  for (int k : {1, 2}) {
    const Tensor x = ch09::lesson_tokens(40, 8, 30 + std::uint64_t(k), 0.5f);
    Tensor w = ch09::lesson_tokens(8, 5, 40, 0.0f);
    const ch09::RouterOut router = ch09::router_forward(x, w);
    const ch09::Routing r = ch09::select_top_k(router.probs, {}, k, true);
    const ch09::BalanceStats s = ch09::balance_stats(r, router.probs, router.logits, nullptr);
    Tensor want = Tensor::zeros({40, 5}, DType::kF32);
    const ch09::LossFactors factors{8.0f, 2};
    ch09::add_aux_loss_grad(s, k, ch09::aux_grad_seed(0.02, factors), want);
    const AuxLossResult got = switch_aux_loss(router.probs.to_floats(), r.expert, 5, k, 0.02,
                                              factors.loss_scale, factors.micro_batches);
    SCOPED_TRACE(testing::Message() << "k " << k);
    EXPECT_NEAR(got.loss, 0.02 * ch09::aux_loss(s, k), 1e-9);
    const std::vector<float> w_grad = want.to_floats();
    ASSERT_EQ(got.dprobs.size(), w_grad.size());
    for (std::size_t i = 0; i < w_grad.size(); ++i) {
      EXPECT_NEAR(got.dprobs[i], w_grad[i], 1e-6 * std::abs(w_grad[i]) + 1e-12) << i;
    }
  }
}

}  // namespace
}  // namespace mixpar::exercises
