// ZeRO-3's failure modes on the lesson loop (zero_lesson.h), as the demo shows them: a unit
// that leaves out the tied wte reads it released, a named error on every rank; a prefetch
// order other than the model's is an error naming the expected and the actual unit on every
// rank, once the gathers in flight are back (no hang). And the lesson's ZeRO-3 against DDP.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ch05_zero/zero_lesson.h"

namespace mixpar::ch05 {
namespace {

std::vector<RankResult> lesson(int stage, ZeroBug bug, int ranks = 2, int prefetch = 1) {
  LessonSetup s;
  s.ranks = ranks;
  s.zero_stage = stage;
  s.bug = bug;
  s.prefetch = prefetch;
  return run_lesson(s);
}

TEST(ZeroStage3Lesson, AUnitWithoutTheTiedWeightReadsItReleasedAndSaysSo) {
  for (const RankResult& r : lesson(3, ZeroBug::kForgottenTiedWeight)) {
    EXPECT_NE(r.error.find("tensor used while released: the parameters of the bucket starting "
                           "at wte.weight, released by ZeRO-3"),
              std::string::npos)
        << r.error;
    EXPECT_TRUE(r.steps.empty()) << "the first forward must fail";
  }
}

TEST(ZeroStage3Lesson, APrefetchOrderOtherThanTheModelsNamesTheExpectedAndTheActualUnit) {
  for (int prefetch : {1, 2}) {
    for (const RankResult& r : lesson(3, ZeroBug::kPrefetchOrder, 2, prefetch)) {
      EXPECT_NE(r.error.find("ZeRO-3 prefetch order: the backward pass asked for block 1 (unit "
                             "1) but the prefetch order expected block 0 (unit 0)"),
                std::string::npos)
          << r.error;
    }
  }
}

TEST(ZeroStage3Lesson, EqualsDdpStepByStepForEveryPrefetch) {
  const std::vector<RankResult> ddp = lesson(0, ZeroBug::kNone, 4);
  for (int prefetch : {0, 1, 3}) {
    const std::vector<RankResult> z = lesson(3, ZeroBug::kNone, 4, prefetch);
    ASSERT_EQ(z[0].steps.size(), ddp[0].steps.size());
    for (std::size_t k = 0; k < ddp[0].steps.size(); ++k) {
      EXPECT_EQ(z[0].steps[k].loss, ddp[0].steps[k].loss) << "prefetch " << prefetch;
      EXPECT_EQ(z[0].steps[k].grad_norm, ddp[0].steps[k].grad_norm) << "prefetch " << prefetch;
      EXPECT_EQ(z[0].steps[k].weights_hash, ddp[0].steps[k].weights_hash)
          << "prefetch " << prefetch;
    }
  }
}

TEST(ZeroStage3Lesson, UnknownBugNamesTheNewChoices) {
  try {
    (void)parse_bug("nope");
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("forgotten-tied-weight|prefetch-order"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mixpar::ch05
