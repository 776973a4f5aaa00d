// The ch03 demo's tables, from the demo's own functions: every scenario's claims hold (the
// correct run and its buggy twin show the symptoms the lesson names), and so do the memory
// bill's claims. A failed claim prints expected vs measured.
#include "ch03_master_weights/order_lesson.h"

#include <gtest/gtest.h>

#include <vector>

#include "ch03_master_weights/memory_bill.h"

namespace mixpar::ch03 {
namespace {

// The claims about the runs hold; the correctness claims measured on the buggy run (what
// --bug NAME prints as "FAIL (expected)") fail, and a scenario has at least one.
void expect_claims(const std::vector<Claim>& claims, bool of_a_bug = false) {
  ASSERT_FALSE(claims.empty());
  int broken = 0;
  for (const Claim& k : claims) {
    if (!k.broken_by.empty()) {
      ++broken;
      EXPECT_FALSE(k.ok) << "--bug " << k.broken_by << " no longer breaks: " << k.claim
                         << " (measured " << k.measured << ")";
      continue;
    }
    EXPECT_TRUE(k.ok) << k.claim << ": expected " << k.expected << ", measured " << k.measured;
  }
  if (of_a_bug) {
    EXPECT_GE(broken, 1) << "no claim is marked as the one the bug breaks";
  }
}

void expect_scenario(std::size_t index, Bug bug) {
  const LessonConfig c;
  const std::vector<Scenario> all = lesson_scenarios(c);
  ASSERT_GT(all.size(), index);
  ASSERT_EQ(all[index].buggy.opt.bug, bug);
  expect_claims(scenario_claims(run_scenario(c, all[index])), true);
}

TEST(OrderLesson, PureFp16WeightsFreezeWhileMastersLearn) { expect_scenario(0, Bug::kFp16Weights); }

TEST(OrderLesson, ClipBeforeUnscaleClipsEveryStepAndCrushesTheUpdates) {
  expect_scenario(1, Bug::kClipBeforeUnscale);
}

TEST(OrderLesson, NoUnscaleWithSgdDiverges) { expect_scenario(2, Bug::kNoUnscale); }

TEST(OrderLesson, NoUnscaleWithAdamWHides) { expect_scenario(3, Bug::kNoUnscale); }

TEST(OrderLesson, MemoryBillClaimsHold) {
  expect_claims(memory_claims(lesson_memory_bills(LessonConfig{})));
}

TEST(OrderLesson, ActivationFormulaCountsInputPreActivationsAndActivations) {
  // 32-64-64-10, batch 2, fp16: 2 x (32 + 2 x 64 + 2 x 64 + 10) x 2 bytes.
  EXPECT_EQ(mlp_activation_bytes({32, 64, 64, 10}, 2, DType::kF16), 2 * (32 + 256 + 10) * 2);
}

}  // namespace
}  // namespace mixpar::ch03
