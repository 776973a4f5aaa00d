// Capacity: the policies keep the assignments they promise, no-drop keeps all, and dropped
// tokens leave the layer as zeros (the residual carries them).
#include <gtest/gtest.h>

#include "ch09_expert_parallel/capacity.h"
#include "ch09_expert_parallel/moe_layer.h"
#include "ch09_test_util.h"
#include "util/errors.h"

namespace mixpar::ch09 {
namespace {

using testing::expect_section_holds;

// Five tokens, all on expert 0 (top-1), probabilities 0.4, 0.9, 0.6, 0.8, 0.5.
Routing five_on_one() {
  Routing r;
  r.tokens = 5;
  r.k = 1;
  r.expert = {0, 0, 0, 0, 0};
  r.prob = {0.4f, 0.9f, 0.6f, 0.8f, 0.5f};
  r.gate = r.prob;
  r.denom.assign(5, 1.0f);
  return r;
}

TEST(Capacity, PositionKeepsTheEarliestAndProbabilityTheMostProbable) {
  const Routing r = five_on_one();
  EXPECT_EQ(apply_capacity(r, 2, 2, DropPolicy::kPosition), (std::vector<char>{1, 1, 0, 0, 0}));
  EXPECT_EQ(apply_capacity(r, 2, 2, DropPolicy::kProbability), (std::vector<char>{0, 1, 0, 1, 0}));
  EXPECT_EQ(apply_capacity(r, 2, -1, DropPolicy::kProbability), (std::vector<char>(5, 1)));
}

TEST(Capacity, OverflowDropsTokensThatPassThroughAsZerosAndNoDropKeepsAll) {
  expect_section_holds(capacity_and_dropping());
}

TEST(Capacity, ACapacityBelowOneTokenIsRefused) {
  MoeConfig c = lesson_config();
  c.capacity_factor = 0.01;
  EXPECT_THROW(expert_capacity(c, 8), InputError);
  c.capacity_factor = 1.0;
  EXPECT_EQ(expert_capacity(c, 8), 4);  // ceil(1.0 x 8 x 2 / 4)
}

}  // namespace
}  // namespace mixpar::ch09
