// An example of the teacher's hidden tests (exercises/grade.sh --hidden-tests
// exercises/teacher/hidden): a case the exercise's own tests leave out, a growth interval of 1,
// where every clean step doubles the scale and an overflow halves it.
#include <gtest/gtest.h>

#include "ch02_dynamic_scale/dynamic_scale.h"

namespace mixpar::exercises {
namespace {

TEST(HiddenDynamicScale, AnIntervalOfOneDoublesOnEveryCleanStep) {
  DynamicScale s;
  EXPECT_TRUE(update_scale(s, false, 1));
  EXPECT_EQ(s.scale, 131072.0f);
  EXPECT_EQ(s.growth_tracker, 0);
  EXPECT_FALSE(update_scale(s, true, 1));
  EXPECT_EQ(s.scale, 65536.0f);
  EXPECT_EQ(s.growth_tracker, 0);
}

}  // namespace
}  // namespace mixpar::exercises
