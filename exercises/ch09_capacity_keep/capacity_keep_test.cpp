// keep_within_capacity on hand-made choices and against chapter 9's apply_capacity on seeded
// routings of every policy and capacity.
#include "ch09_capacity_keep/capacity_keep.h"

#include <gtest/gtest.h>

#include "ch09_expert_parallel/capacity.h"
#include "ch09_expert_parallel/top_k.h"
#include "ch09_expert_parallel/moe_lesson.h"

namespace mixpar::exercises {
namespace {

TEST(CapacityKeep, NoDropModeKeepsEveryChoice) {
  EXPECT_EQ(keep_within_capacity({0, 0, 0}, {0.5f, 0.2f, 0.9f}, 2, -1, true),
            (std::vector<char>{1, 1, 1}));
}

TEST(CapacityKeep, ByPositionKeepsTheEarliest) {
  // Expert 1 is chosen four times, capacity 2: its first two choices stay.
  EXPECT_EQ(keep_within_capacity({1, 0, 1, 1, 1}, {0.1f, 0.5f, 0.9f, 0.8f, 0.7f}, 2, 2, false),
            (std::vector<char>{1, 1, 1, 0, 0}));
}

TEST(CapacityKeep, ByProbabilityKeepsTheMostProbableTiesToTheLowerIndex) {
  EXPECT_EQ(keep_within_capacity({1, 0, 1, 1, 1}, {0.1f, 0.5f, 0.9f, 0.8f, 0.7f}, 2, 2, true),
            (std::vector<char>{0, 1, 1, 1, 0}));
  EXPECT_EQ(keep_within_capacity({0, 0, 0}, {0.5f, 0.5f, 0.5f}, 1, 2, true),
            (std::vector<char>{1, 1, 0}));
}

TEST(CapacityKeep, EqualsChapterNinesCapacityOnSeededRoutings) {
  for (int k : {1, 2}) {
    const Tensor x = ch09::lesson_tokens(48, 6, 7 + std::uint64_t(k), 0.5f);
    Tensor probs = Tensor::empty({48, 4}, DType::kF32);
    for (std::int64_t t = 0; t < 48; ++t) {  // a softmax-free score per expert: |x_t|
      for (std::int64_t e = 0; e < 4; ++e) {
        probs.data_as<float>()[t * 4 + e] = std::abs(x.data_as<float>()[t * 6 + e]);
      }
    }
    const ch09::Routing r = ch09::select_top_k(probs, {}, k, true);
    for (std::int64_t cap : {-1, 0, 3, 12, 30}) {
      for (bool by_prob : {false, true}) {
        SCOPED_TRACE(testing::Message() << "k " << k << ", capacity " << cap << ", "
                                        << (by_prob ? "by probability" : "by position"));
        const auto want = ch09::apply_capacity(
            r, 4, cap, by_prob ? ch09::DropPolicy::kProbability : ch09::DropPolicy::kPosition);
        EXPECT_EQ(keep_within_capacity(r.expert, r.prob, 4, cap, by_prob), want);
        if (HasFailure()) return;
      }
    }
  }
}

}  // namespace
}  // namespace mixpar::exercises
