// play_unit_costs against chapter 7's simulator (ch07::play with eager sends, the unit-cost
// timeline the demo prints) on afab and 1f1b for p = 1..6 and m = 1..10: the same makespan and
// bubble; the bubble formula of 1F1B; a deadlocking list refused.
#include "ch07_pipeline_makespan/pipeline_makespan.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "ch07_pipeline/bubble.h"
#include "ch07_pipeline/pipeline_schedule.h"
#include "ch07_pipeline/schedule_simulator.h"

namespace mixpar::exercises {
namespace {

std::vector<std::vector<UnitAction>> programs_of(const ch07::PipelinePlan& plan) {
  std::vector<std::vector<UnitAction>> out;
  for (const ch07::RankProgram& rank : plan.ranks) {
    std::vector<UnitAction> mine;
    for (const ch07::Action& a : rank) {
      if (a.work == ch07::Work::kTransfer) continue;  // free in the unit-cost play
      mine.push_back({a.work == ch07::Work::kForward ? 'F' : 'B', a.micro_batch});
    }
    out.push_back(std::move(mine));
  }
  return out;
}

TEST(PlayUnitCosts, OneRankNeverIdles) {
  const UnitPlay play = play_unit_costs({{{'F', 0}, {'F', 1}, {'B', 0}, {'B', 1}}});
  EXPECT_EQ(play.makespan, 6);
  EXPECT_EQ(play.bubble, 0.0);
}

TEST(PlayUnitCosts, TwoStagesOneMicroBatchIdleHalfTheTime) {
  // Rank 0: F at [0,1), waits, B at [4,6); rank 1: F at [1,2), B at [2,4).
  const UnitPlay play = play_unit_costs({{{'F', 0}, {'B', 0}}, {{'F', 0}, {'B', 0}}});
  EXPECT_EQ(play.makespan, 6);
  EXPECT_DOUBLE_EQ(play.bubble, 0.5);
}

TEST(PlayUnitCosts, OneFOneBBubbleIsPMinusOneOverMPlusPMinusOne) {
  for (int p : {2, 4}) {
    for (int m : {1, 4, 8}) {
      const ch07::PipelineLayout layout{.pp = p, .micro_batches = m, .virtual_stages = 1};
      const UnitPlay play =
          play_unit_costs(programs_of(ch07::make_plan(ch07::ScheduleKind::kOneFOneB, layout)));
      EXPECT_NEAR(play.bubble, double(p - 1) / double(m + p - 1), 1e-12) << "p " << p << " m " << m;
    }
  }
}

TEST(PlayUnitCosts, EqualsChapterSevensSimulator) {
  for (ch07::ScheduleKind kind : {ch07::ScheduleKind::kAfab, ch07::ScheduleKind::kOneFOneB}) {
    for (int p = 1; p <= 6; ++p) {
      for (int m = 1; m <= 10; ++m) {
        const ch07::PipelineLayout layout{.pp = p, .micro_batches = m, .virtual_stages = 1};
        const ch07::PipelinePlan plan = ch07::make_plan(kind, layout);
        const ch07::PlayResult ref = ch07::play(plan, ch07::SendMode::kEager);
        ASSERT_TRUE(ref.ok);
        const UnitPlay play = play_unit_costs(programs_of(plan));
        SCOPED_TRACE(testing::Message() << ch07::schedule_name(kind) << " p " << p << " m " << m);
        ASSERT_EQ(play.makespan, ref.timeline.makespan);
        ASSERT_DOUBLE_EQ(play.bubble, ch07::bubble_fraction(ref.timeline));
      }
    }
  }
}

TEST(PlayUnitCosts, RefusesACycleOfWaits) {
  // Rank 0 wants micro-batch 0's backward before running its forward: neither rank can move.
  EXPECT_THROW(play_unit_costs({{{'B', 0}, {'F', 0}}, {{'F', 0}, {'B', 0}}}),
               std::invalid_argument);
}

}  // namespace
}  // namespace mixpar::exercises
