// Schedules as data: each a pure function of (p, m, v) whose lists the pre-flight simulator
// accepts, whose unit-cost timeline has the bubble of its formula, and whose ranks hold the
// micro-batches their papers state.
#include <gtest/gtest.h>

#include <algorithm>

#include "ch07_pipeline/bubble.h"
#include "ch07_pipeline/pipeline_schedule.h"
#include "ch07_pipeline/schedule_simulator.h"
#include "util/errors.h"

namespace mixpar::ch07 {
namespace {

constexpr ScheduleKind kAll[] = {ScheduleKind::kAfab, ScheduleKind::kOneFOneB,
                                 ScheduleKind::kInterleaved, ScheduleKind::kZbH1};

// Every layout of the claims: p = 2 and 4, m = 1..8 (interleaved: v = 2, m a multiple of p).
std::vector<PipelineLayout> layouts(ScheduleKind k) {
  std::vector<PipelineLayout> out;
  for (int p : {2, 4}) {
    for (int m = 1; m <= 8; ++m) {
      if (k == ScheduleKind::kInterleaved && m % p != 0) continue;
      out.push_back({p, m, k == ScheduleKind::kInterleaved ? 2 : 1});
    }
  }
  return out;
}

TEST(PipelineSchedule, EveryScheduleRunsEachMicroBatchForwardAndBackwardOncePerChunk) {
  for (ScheduleKind k : kAll) {
    for (const PipelineLayout& l : layouts(k)) {
      const auto order = compute_order(k, l);
      ASSERT_EQ(int(order.size()), l.pp);
      for (const RankProgram& prog : order) {
        std::vector<int> f(std::size_t(l.micro_batches * l.virtual_stages), 0), b = f, w = f;
        for (const Action& a : prog) {
          const auto at = std::size_t(a.chunk * l.micro_batches + a.micro_batch);
          if (a.work == Work::kForward) ++f[at];
          if (a.work == Work::kBackward || a.work == Work::kBackwardInput) {
            EXPECT_EQ(f[at], 1) << "backward before its forward";
            ++b[at];
          }
          if (a.work == Work::kBackwardWeight) {
            EXPECT_EQ(b[at], 1) << "W before its B";
            ++w[at];
          }
        }
        for (std::size_t i = 0; i < f.size(); ++i) {
          EXPECT_EQ(f[i], 1);
          EXPECT_EQ(b[i], 1);
          EXPECT_EQ(w[i], k == ScheduleKind::kZbH1 ? 1 : 0);
        }
      }
    }
  }
}

TEST(PipelineSchedule, PreflightAcceptsEverySchedule) {
  for (ScheduleKind k : kAll) {
    for (const PipelineLayout& l : layouts(k)) {
      EXPECT_NO_THROW(preflight(make_plan(k, l)))
          << schedule_name(k) << " p" << l.pp << " m" << l.micro_batches;
    }
  }
}

// Sends that wait for their receiver (NCCL's): the fused send-and-receive actions keep AFAB,
// 1F1B and ZB-H1 safe; interleaved with m > p has two neighbours sending to each other at
// once and needs the buffering of the local and MPI backends.
TEST(PipelineSchedule, AllButInterleavedWithMoreMicroBatchesThanStagesSurviveRendezvousSends) {
  for (ScheduleKind k : kAll) {
    for (const PipelineLayout& l : layouts(k)) {
      const bool expected = k != ScheduleKind::kInterleaved || l.micro_batches == l.pp;
      EXPECT_EQ(survives_rendezvous_sends(make_plan(k, l)), expected)
          << schedule_name(k) << " p" << l.pp << " m" << l.micro_batches;
    }
  }
}

TEST(PipelineBubble, UnitCostTimelineMatchesTheFormulas) {
  for (ScheduleKind k : kAll) {
    for (const PipelineLayout& l : layouts(k)) {
      const PlayResult r = play(make_plan(k, l), SendMode::kEager);
      ASSERT_TRUE(r.ok) << r.problem.what;
      // ZB-H1's formula assumes the pipeline fills: m >= p.
      if (k == ScheduleKind::kZbH1 && l.micro_batches < l.pp) continue;
      EXPECT_NEAR(bubble_fraction(r.timeline), bubble_formula(k, l), 1e-12)
          << schedule_name(k) << " p" << l.pp << " m" << l.micro_batches;
    }
  }
}

TEST(PipelineBubble, ZeroBubbleH1IsBelowHalfOfOneFOneBs) {
  for (int p : {2, 4}) {
    for (int m = p; m <= 8; ++m) {
      const PipelineLayout l{p, m, 1};
      const double zb = bubble_fraction(play(make_plan(ScheduleKind::kZbH1, l), SendMode::kEager).timeline);
      const double ofob =
          bubble_fraction(play(make_plan(ScheduleKind::kOneFOneB, l), SendMode::kEager).timeline);
      EXPECT_LT(zb, 0.5 * ofob) << "p" << p << " m" << m;
    }
  }
}

TEST(PipelineBubble, PeakActivationsAreWhatThePapersState) {
  for (ScheduleKind k : kAll) {
    for (const PipelineLayout& l : layouts(k)) {
      const auto peaks = peak_activations(play(make_plan(k, l), SendMode::kEager).timeline);
      for (int r = 0; r < l.pp; ++r) {
        EXPECT_EQ(peaks[std::size_t(r)], expected_peak_activations(k, l, r))
            << schedule_name(k) << " p" << l.pp << " m" << l.micro_batches << " rank " << r;
      }
    }
  }
  // The point of 1F1B: the first rank holds p, not m.
  const PipelineLayout l{4, 8, 1};
  EXPECT_EQ(peak_activations(play(make_plan(ScheduleKind::kAfab, l), SendMode::kEager).timeline)[0], 8);
  EXPECT_EQ(peak_activations(play(make_plan(ScheduleKind::kOneFOneB, l), SendMode::kEager).timeline)[0], 4);
}

// The peak read from a rank's program (what the trainer's pre-flight bills) is the timeline's:
// with unit weights, on every schedule and layout, v = 3 included; with a chunk's weight its
// blocks, an interleaved rank whose chunks are unequal counts what each holds. p = m = 2, v = 2:
// rank 0 runs all m v = 4 forwards before its first backward (warm-up min(2 (p - 1) + (v - 1)
// p, m v) = 4), so it holds both micro-batches of both chunks: 2 x 3 + 2 x 1 blocks.
TEST(PipelineBubble, PeakHeldFromTheProgramIsTheTimelinesPeak) {
  for (ScheduleKind k : kAll) {
    for (const PipelineLayout& l : layouts(k)) {
      const PipelinePlan plan = make_plan(k, l);
      const auto peaks = peak_activations(play(plan, SendMode::kEager).timeline);
      const std::vector<std::int64_t> ones(std::size_t(l.virtual_stages), 1);
      for (int r = 0; r < l.pp; ++r) {
        EXPECT_EQ(peak_held(plan.ranks[std::size_t(r)], ones), peaks[std::size_t(r)])
            << schedule_name(k) << " p" << l.pp << " m" << l.micro_batches << " rank " << r;
      }
    }
  }
  for (int m : {3, 6}) {
    const PipelinePlan plan = make_plan(ScheduleKind::kInterleaved, {3, m, 3});
    const auto peaks = peak_activations(play(plan, SendMode::kEager).timeline);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(peak_held(plan.ranks[std::size_t(r)], std::vector<std::int64_t>{1, 1, 1}),
                peaks[std::size_t(r)])
          << "p3 v3 m" << m << " rank " << r;
    }
  }
  const PipelinePlan plan = make_plan(ScheduleKind::kInterleaved, {2, 2, 2});
  EXPECT_EQ(peak_held(plan.ranks[0], std::vector<std::int64_t>{3, 1}), 8);
  EXPECT_THROW(peak_held(plan.ranks[0], std::vector<std::int64_t>{3}), InputError);
}

TEST(PipelineSchedule, InterleavedWarmupIsMegatrons) {
  const PipelineLayout l{4, 8, 2};
  const std::vector<RankProgram> order = compute_order(ScheduleKind::kInterleaved, l);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(warmup_forwards(ScheduleKind::kInterleaved, l, r), 2 * (4 - r - 1) + 4);
    int forwards = 0;
    for (const Action& a : order[std::size_t(r)]) {
      if (a.work != Work::kForward) break;
      ++forwards;
    }
    EXPECT_EQ(forwards, 2 * (4 - r - 1) + 4 + 1) << "warm-up, then the first steady forward";
  }
  // m = p: every forward first (Megatron's all-warm-up case).
  EXPECT_EQ(warmup_forwards(ScheduleKind::kInterleaved, {4, 4, 2}, 3), 8);
}

TEST(PipelineSchedule, LayoutsThatCannotRunAreInputErrorsNamingTheNumbers) {
  auto message = [](ScheduleKind k, PipelineLayout l) {
    try {
      check_layout(k, l);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message(ScheduleKind::kInterleaved, {4, 6, 2}).find("6 micro-batches, pp 4"),
            std::string::npos);
  EXPECT_NE(message(ScheduleKind::kOneFOneB, {2, 4, 2}).find("--virtual-stages 2"),
            std::string::npos);
  EXPECT_NE(message(ScheduleKind::kInterleaved, {2, 4, 1}).find("1 virtual stages"),
            std::string::npos);
  EXPECT_EQ(message(ScheduleKind::kOneFOneB, {4, 2, 1}), "accepted");  // m < p runs
  EXPECT_THROW(parse_schedule("gpipe"), InputError);
}

}  // namespace
}  // namespace mixpar::ch07
