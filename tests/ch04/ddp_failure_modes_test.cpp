// Each failure mode of the chapter shows its symptom, next to its fix: replicas initialised
// differently never agree (the check says so) while the averaged loss looks normal; ranks
// reading the same data train like one rank; a scaler decision taken per rank splits weights
// and scales after one rank's overflow; an FP16 reduction of scaled gradients overflows where
// an FP32 one does not.
#include <gtest/gtest.h>

#include "ch04_ddp/ddp_scenarios.h"
#include "util/errors.h"

namespace mixpar::ch04 {
namespace {

// The symptoms hold; the correctness claim measured on the buggy run (what --bug NAME prints
// as "FAIL (expected)") fails, and every failure mode has one.
void expect_symptoms(const ScenarioResult& r) {
  ASSERT_FALSE(r.claims.empty());
  int broken = 0;
  for (const Claim& c : r.claims) {
    if (!c.broken_by.empty()) {
      ++broken;
      EXPECT_EQ(c.broken_by, r.name);
      EXPECT_FALSE(c.ok) << "--bug " << c.broken_by << " no longer breaks: " << c.claim
                         << " (measured " << c.measured << ")\n" << r.table;
      continue;
    }
    EXPECT_TRUE(c.ok) << r.name << ": " << c.claim << ": expected " << c.expected << ", measured "
                      << c.measured << "\n" << r.table;
  }
  EXPECT_GE(broken, 1) << r.name << ": no claim is marked as the one the bug breaks";
}

TEST(DdpFailure, DifferentInitDriftsAndTheReplicaCheckSaysSo) {
  expect_symptoms(different_init_scenario(2, LessonConfig{}));
}

TEST(DdpFailure, SameDataOnEveryRankTrainsLikeOneRank) {
  expect_symptoms(same_data_scenario(4, LessonConfig{}));
}

TEST(DdpFailure, PerRankScalerDecisionSplitsTheRanksAfterOneOverflow) {
  expect_symptoms(local_scaler_scenario(2, LessonConfig{}));
}

TEST(DdpFailure, Fp16ReductionOfScaledGradientsOverflowsWhereFp32DoesNot) {
  const Fp16ReduceMeasure m = measure_fp16_reduce(4, LessonConfig{});
  EXPECT_LT(m.local_max, 65504.0) << "each rank's own scaled gradients fit";
  EXPECT_GT(m.sum_max, 65504.0) << "their sum does not";
  EXPECT_FALSE(m.fp32_inf);
  EXPECT_TRUE(m.fp32_taken);
  EXPECT_TRUE(m.fp16_inf);
  EXPECT_FALSE(m.fp16_taken);
}

TEST(DdpFailure, UnknownFailureModeIsAnInputError) {
  EXPECT_THROW(bug_scenario("no-such-bug", 2, LessonConfig{}), InputError);
}

}  // namespace
}  // namespace mixpar::ch04
