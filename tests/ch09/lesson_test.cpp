// The demo's lesson: every section's claims hold, each --bug section breaks exactly the
// claims it marks, and an unknown --bug is an InputError.
#include <gtest/gtest.h>

#include "ch09_test_util.h"
#include "util/errors.h"

namespace mixpar::ch09 {
namespace {

TEST(Ch09Lesson, EveryBugBreaksItsMarkedClaimAndNothingElse) {
  for (const std::string& name : bug_names()) {
    const Section s = bug_section(name);
    bool marked = false;
    for (const Claim& c : s.claims) marked = marked || c.broken_by == name;
    EXPECT_TRUE(marked) << name << " marks no claim";
    testing::expect_section_holds(s);
  }
  EXPECT_THROW(bug_section("no-such-bug"), InputError);
}

TEST(Ch09Lesson, TheEpSectionHoldsEveryClaim) {
  testing::expect_section_holds(expert_parallel_equality());
}

}  // namespace
}  // namespace mixpar::ch09
