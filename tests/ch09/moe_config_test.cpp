// Bad layouts are refused before any work, with one line naming what is wrong; the router is
// FP32 because BF16 flips its choices.
#include <gtest/gtest.h>

#include "ch09_expert_parallel/moe_layer.h"
#include "ch09_expert_parallel/router.h"
#include "ch09_test_util.h"
#include "util/errors.h"

namespace mixpar::ch09 {
namespace {

std::string refusal(const MoeConfig& c, int ep) {
  try {
    validate(c, ep);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(MoeConfig, BadLayoutsAreRefusedWithOneLineNamingTheProblem) {
  MoeConfig c = lesson_config();
  EXPECT_EQ(refusal(c, 1), "");
  EXPECT_EQ(refusal(c, 4), "");
  EXPECT_NE(refusal(c, 3).find("ep 3 must divide n_experts = 4"), std::string::npos);
  c.top_k = 5;
  EXPECT_NE(refusal(c, 1).find("top_k 5 must be in [1, n_experts = 4]"), std::string::npos);
  c = lesson_config();
  c.aux_loss_coef = -1;
  EXPECT_NE(refusal(c, 1).find("aux_loss_coef"), std::string::npos);
  for (const std::string& why : {refusal(c, 1)}) EXPECT_EQ(why.find('\n'), std::string::npos);
  EXPECT_THROW(MoeLayer(c, {}), InputError);
}

TEST(Router, StaysFp32WhateverTheInputsDtype) {
  const Tensor x = lesson_tokens(10, 16, 9);
  const Tensor w = lesson_tokens(16, 4, 10);
  const Tensor xb = x.to(DType::kBF16);
  const RouterOut from_bf16 = router_forward(xb, w);
  const RouterOut from_f32 = router_forward(xb.to(DType::kF32), w);
  EXPECT_EQ(from_bf16.logits.dtype(), DType::kF32);
  EXPECT_EQ(from_bf16.probs.dtype(), DType::kF32);
  EXPECT_TRUE(testing::same_bits(from_bf16.logits.to_floats(), from_f32.logits.to_floats()));
  EXPECT_TRUE(testing::same_bits(from_bf16.probs.to_floats(), from_f32.probs.to_floats()));
  EXPECT_THROW(router_forward(x, w.to(DType::kBF16)), std::invalid_argument);
}

TEST(Router, Bf16RoundingFlipsTopKChoicesTheFp32RouterDoesNot) {
  const Section s = router_precision();
  testing::expect_section_holds(s);
}

}  // namespace
}  // namespace mixpar::ch09
