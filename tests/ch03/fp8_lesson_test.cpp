// The FP8 lessons of the ch03 demo (ch03_master_weights/fp8_lesson.h): every correct
// configuration's claim holds and every mistake breaks the claim it is named for, with the
// measured numbers the README quotes in the right order (promotion beats none by a wide
// margin; a stale amax saturates the spike's row and depresses the scale for the history's
// length; E4M3 gradients flush where E5M2 do not; one scale per tensor underflows the rest).
#include "ch03_master_weights/fp8_lesson.h"

#include <gtest/gtest.h>

namespace mixpar::ch03 {
namespace {

void expect_lesson(const std::vector<Claim>& claims) {
  int broken = 0;
  for (const Claim& k : claims) {
    if (!k.broken_by.empty()) {
      ++broken;
      EXPECT_FALSE(k.ok) << "--bug " << k.broken_by << " no longer breaks: " << k.claim;
    } else {
      EXPECT_TRUE(k.ok) << k.claim << ": expected " << k.expected << ", measured " << k.measured;
    }
  }
  EXPECT_EQ(broken, 1);
}

TEST(Fp8Lesson, PromotionEvery128KeepsTheK4096SumWhereThe14BitAccumulatorAloneDrifts) {
  const AccumulationResult r = accumulation_lesson();
  expect_lesson(accumulation_claims(r));
  EXPECT_LT(r.fp32_error, r.promoted_error);
  EXPECT_GT(r.unpromoted_error, 10 * r.promoted_error);
}

TEST(Fp8Lesson, StaleAmaxSaturatesTheSpikeAndHoldsTheScaleDownForTheHistoryLength) {
  const SpikeResult r = spike_lesson(16, 20, 60);
  expect_lesson(spike_claims(r));
  const SpikeStep& s = r.steps[20];
  EXPECT_GT(s.delayed.saturated, 100);  // most of the spiking row
  EXPECT_EQ(s.tensorwise.saturated, 0);
  EXPECT_EQ(r.steps_scale_depressed, 16);
  // While depressed, the delayed cast underflows more values than the current one.
  EXPECT_GT(r.steps[25].delayed.subnormal, 10 * (r.steps[25].tensorwise.subnormal + 1));
  // A shorter history recovers sooner.
  EXPECT_EQ(spike_lesson(4, 20, 40).steps_scale_depressed, 4);
}

TEST(Fp8Lesson, GradientsInE4M3FlushWhereE5M2KeepsThem) {
  const GradFormatResult r = grad_format_lesson();
  expect_lesson(grad_format_claims(r));
  EXPECT_LE(r.e5m2.flushed * 1000, r.e5m2.values);
  EXPECT_GT(r.e4m3.flushed, r.e4m3.values / 20);
}

TEST(Fp8Lesson, BlockwiseKeepsTheRestOfAnOutliersTensorWhereOneScaleUnderflowsIt) {
  const OutlierResult r = outlier_lesson();
  expect_lesson(outlier_claims(r));
  EXPECT_GT(r.tensorwise_underflow, 20 * (r.blockwise_underflow + 1));
}

}  // namespace
}  // namespace mixpar::ch03
