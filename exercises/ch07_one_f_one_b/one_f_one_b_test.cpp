// one_f_one_b against chapter 7's schedule (compute_order of kOneFOneB, the plan train_gpt
// --pp runs) for every rank of p = 1..6 and m = 1..12.
#include "ch07_one_f_one_b/one_f_one_b.h"

#include <gtest/gtest.h>

#include "ch07_pipeline/pipeline_schedule.h"

namespace mixpar::exercises {
namespace {

std::vector<PipeStep> reference(int rank, int p, int m) {
  const ch07::PipelineLayout layout{.pp = p, .micro_batches = m, .virtual_stages = 1};
  const std::vector<ch07::RankProgram> programs =
      ch07::compute_order(ch07::ScheduleKind::kOneFOneB, layout);
  std::vector<PipeStep> out;
  for (const ch07::Action& a : programs[static_cast<std::size_t>(rank)]) {
    out.push_back({a.work == ch07::Work::kForward ? 'F' : 'B', a.micro_batch});
  }
  return out;
}

TEST(OneFOneB, TheLastStageAlternatesFromTheStart) {
  const std::vector<PipeStep> want = {{'F', 0}, {'B', 0}, {'F', 1}, {'B', 1}};
  EXPECT_EQ(one_f_one_b(3, 4, 2), want);
}

TEST(OneFOneB, TheFirstStageWarmsUpWithPMinusOneForwards) {
  const std::vector<PipeStep> s = one_f_one_b(0, 4, 8);
  ASSERT_EQ(s.size(), 16u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s[static_cast<std::size_t>(i)], (PipeStep{'F', i}));
  EXPECT_EQ(s[3], (PipeStep{'F', 3}));
  EXPECT_EQ(s[4], (PipeStep{'B', 0}));
}

TEST(OneFOneB, EqualsChapterSevensScheduleOnEveryRank) {
  for (int p = 1; p <= 6; ++p) {
    for (int m = 1; m <= 12; ++m) {
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(one_f_one_b(r, p, m), reference(r, p, m)) << "p " << p << " m " << m << " r " << r;
      }
    }
  }
}

}  // namespace
}  // namespace mixpar::exercises
