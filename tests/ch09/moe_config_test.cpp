// Bad layouts are refused before any work, with one line naming what is wrong; the router is
// FP32 because BF16 flips its choices.
#include <gtest/gtest.h>

#include "ch09_expert_parallel/moe_layer.h"
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

TEST(Router, Bf16RoundingFlipsTopKChoicesTheFp32RouterDoesNot) {
  const Section s = router_precision();
  testing::expect_section_holds(s);
}

}  // namespace
}  // namespace mixpar::ch09
