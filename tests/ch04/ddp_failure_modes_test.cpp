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

void expect_symptoms(const ScenarioResult& r) {
  ASSERT_FALSE(r.claims.empty());
  for (const Claim& c : r.claims) {
    EXPECT_TRUE(c.ok) << r.name << ": " << c.claim << ": expected " << c.expected << ", measured "
                      << c.measured << "\n" << r.table;
  }
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
