// The demo's lesson: every section's claims hold, each --bug section breaks exactly the
// claims it marks, an unknown --bug is an InputError, and the figures' data is the sections'.
#include <algorithm>
#include <cstdio>

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

// The figures' data (the demo's --json) is the sections' own measurement: every balancing run
// counts all 256 tokens at each of its steps and ends on the largest share the table prints,
// and the capacity sweep holds the table's factor 1.0 (4 of 64 dropped) and drops nothing
// once the capacity reaches the busiest expert's load.
TEST(Ch09Lesson, TheFiguresDataIsTheSectionsOwnMeasurement) {
  const Section lb = load_balancing();
  const Json& runs = lb.figure.at("load_balancing").at("runs");
  ASSERT_EQ(runs.size(), 3u);
  const Claim& collapse = testing::claim_of(lb, "without balancing");
  const Json& none = runs.at(0).at("tokens_per_expert");
  ASSERT_EQ(none.size(), 150u);
  double largest = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const Json& steps = runs.at(i).at("tokens_per_expert");
    for (std::size_t t = 0; t < steps.size(); ++t) {
      double sum = 0;
      for (const Json& v : steps.at(t).as_array()) sum += v.as_double();
      EXPECT_EQ(sum, 256.0) << "run " << i << ", step " << t;
    }
  }
  for (const Json& v : none.at(149).as_array()) largest = std::max(largest, v.as_double());
  char share[32];
  std::snprintf(share, sizeof share, "%.1f%%", 100 * largest / 256);
  EXPECT_EQ(collapse.measured, share);

  const Section cap = capacity_and_dropping();
  const Json& c = cap.figure.at("capacity");
  std::int64_t busiest = 0;
  for (const Json& n : c.at("loads_without_limit").as_array()) busiest = std::max(busiest, n.as_int());
  bool saw_one = false;
  for (const Json& p : c.at("sweep").as_array()) {
    const double f = p.at("capacity_factor").as_double();
    if (f == 1.0) {
      saw_one = true;
      EXPECT_EQ(p.at("dropped").as_int(), 4);
      EXPECT_EQ(p.at("assignments").as_int(), 64);
    }
    EXPECT_EQ(p.at("dropped").as_int() == 0, p.at("capacity").as_int() >= busiest) << "factor " << f;
  }
  EXPECT_TRUE(saw_one);
}

}  // namespace
}  // namespace mixpar::ch09
