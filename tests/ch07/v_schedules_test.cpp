// The V schedules (ZB-V, DualPipeV): two chunks per rank in a V, as data. Their lists are the
// published ones (PyTorch's ScheduleZBVZeroBubble, DeepSeek's dualpipev.py: docs/SOURCES.md),
// the pre-flight play accepts them for every count they accept, their unit-cost bubbles are the
// formulas of bubble.h wherever those apply, their peaks are the tabulated ones, and GPT-2
// chunks run on them give one device's loss and gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "ch07_pipeline/bubble.h"
#include "ch07_pipeline/model_chunks.h"
#include "ch07_pipeline/pipeline_lesson.h"
#include "ch07_pipeline/pipeline_schedule.h"
#include "ch07_pipeline/schedule_simulator.h"
#include "util/errors.h"

namespace mixpar::ch07 {
namespace {

// "F0:3" forward of micro-batch 3 on chunk 0, "I1:0" input gradient, "W", "B" whole backward,
// "F1:2&B0:0" an overlapped pair.
std::string compact(const RankProgram& prog) {
  std::string s;
  for (const Action& a : prog) {
    auto one = [](char w, int c, int mb) {
      return std::string(1, w) + std::to_string(c) + ":" + std::to_string(mb);
    };
    std::string t;
    switch (a.work) {
      case Work::kForward: t = one('F', a.chunk, a.micro_batch); break;
      case Work::kBackward: t = one('B', a.chunk, a.micro_batch); break;
      case Work::kBackwardInput: t = one('I', a.chunk, a.micro_batch); break;
      case Work::kBackwardWeight: t = one('W', a.chunk, a.micro_batch); break;
      case Work::kOverlapForwardBackward:
        t = one('F', a.chunk, a.micro_batch) + "&" + one('B', a.bwd_chunk, a.bwd_micro_batch);
        break;
      case Work::kTransfer: continue;
    }
    s += (s.empty() ? "" : " ") + t;
  }
  return s;
}

TEST(VSchedules, RankRHoldsStagesRAnd2PMinus1MinusR) {
  for (int p : {2, 3, 4}) {
    const PipelineLayout l = layout_for(ScheduleKind::kZbV, p, 4, 2);
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(l.stage_of(r, 0), r);
      EXPECT_EQ(l.stage_of(r, 1), 2 * p - 1 - r);
      for (int c : {0, 1}) {
        EXPECT_EQ(l.rank_of(l.stage_of(r, c)), r);
        EXPECT_EQ(l.chunk_of(l.stage_of(r, c)), c);
      }
    }
    // The loop placement is unchanged: chunk c of rank r is stage c p + r.
    const PipelineLayout loop{p, 4, 2};
    EXPECT_EQ(loop.stage_of(1, 1), p + 1);
  }
}

// Worked by hand from PyTorch's ScheduleZBVZeroBubble._calculate_single_rank_operations and
// DeepSeek's DualPipeV.step (docs/SOURCES.md) for p 2, m 4.
TEST(VSchedules, ListsAreThePublishedOnes) {
  const auto zbv = compute_order(ScheduleKind::kZbV, layout_for(ScheduleKind::kZbV, 2, 4, 2));
  EXPECT_EQ(compact(zbv[0]),
            "F0:0 F0:1 F0:2 F1:0 I1:0 W1:0 F1:1 I1:1 W1:1 F0:3 I0:0 W0:0 F1:2 I1:2 W1:2 I0:1 "
            "W0:1 F1:3 I1:3 W1:3 I0:2 W0:2 I0:3 W0:3");
  const auto dpv =
      compute_order(ScheduleKind::kDualPipeV, layout_for(ScheduleKind::kDualPipeV, 2, 4, 2));
  EXPECT_EQ(compact(dpv[0]),
            "F0:0 F0:1 F0:2 F1:0 I1:0 W1:0 F1:1 F0:3&B1:1 F1:2&B0:0 B1:2 F1:3&B0:1 B1:3 I0:2 "
            "W0:2 I0:3 W0:3");
  EXPECT_EQ(compact(dpv[1]),
            "F0:0 F1:0 F0:1 F1:1 F0:2 B1:0 F1:2&B0:0 F0:3&B1:1 F1:3&B0:1 B1:2 B0:2 I1:3 I0:3 "
            "W1:3 W0:3");
}

TEST(VSchedules, UnsupportedCountsAreInputErrorsNamingTheReason) {
  auto error_of = [](ScheduleKind k, PipelineLayout l) {
    try {
      (void)make_plan(k, l);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error_of(ScheduleKind::kZbV, {4, 8, 1}).find("exactly two chunks per rank"),
            std::string::npos);
  EXPECT_NE(error_of(ScheduleKind::kZbV, {4, 8, 3}).find("exactly two chunks per rank"),
            std::string::npos);
  EXPECT_NE(error_of(ScheduleKind::kDualPipeV, {4, 7, 2}).find("at least 2 x pp micro-batches"),
            std::string::npos);
  EXPECT_EQ(error_of(ScheduleKind::kDualPipeV, {4, 8, 2}), "accepted");
  EXPECT_EQ(error_of(ScheduleKind::kZbV, {4, 1, 2}), "accepted");
  // A V list with the loop's placement: the layout says which placement it is.
  EXPECT_THROW(check_layout(ScheduleKind::kZbV, PipelineLayout{4, 8, 2}), InputError);
  EXPECT_THROW(check_layout(ScheduleKind::kOneFOneB, layout_for(ScheduleKind::kZbV, 4, 8, 1)),
               InputError);
}

TEST(VSchedules, EachMicroBatchRunsForwardInputAndWeightGradientOncePerChunkInOrder) {
  for (ScheduleKind k : {ScheduleKind::kZbV, ScheduleKind::kDualPipeV}) {
    for (int p = 2; p <= 6; ++p) {
      for (int m = k == ScheduleKind::kDualPipeV ? 2 * p : 1; m <= 3 * p; ++m) {
        const auto order = compute_order(k, layout_for(k, p, m, 2));
        for (const RankProgram& prog : order) {
          int f[2][64] = {}, in[2][64] = {}, w[2][64] = {};
          auto fwd = [&](int c, int mb) { ++f[c][mb]; };
          auto input = [&](int c, int mb) {
            EXPECT_EQ(f[c][mb], 1) << "backward before its forward";
            ++in[c][mb];
          };
          auto weight = [&](int c, int mb) {
            EXPECT_EQ(in[c][mb], 1) << "W before its B";
            ++w[c][mb];
          };
          for (const Action& a : prog) {
            switch (a.work) {
              case Work::kForward: fwd(a.chunk, a.micro_batch); break;
              case Work::kBackward:
                input(a.chunk, a.micro_batch);
                weight(a.chunk, a.micro_batch);
                break;
              case Work::kBackwardInput: input(a.chunk, a.micro_batch); break;
              case Work::kBackwardWeight: weight(a.chunk, a.micro_batch); break;
              case Work::kOverlapForwardBackward:
                fwd(a.chunk, a.micro_batch);
                input(a.bwd_chunk, a.bwd_micro_batch);
                weight(a.bwd_chunk, a.bwd_micro_batch);
                break;
              case Work::kTransfer: break;
            }
          }
          for (int c : {0, 1}) {
            for (int mb = 0; mb < m; ++mb) {
              EXPECT_EQ(f[c][mb] * in[c][mb] * w[c][mb], 1)
                  << schedule_name(k) << " p" << p << " m" << m << " chunk " << c << " mb " << mb;
            }
          }
        }
      }
    }
  }
}

TEST(VSchedules, PreflightAcceptsEveryCountTheyAcceptAndRefusesRendezvousSends) {
  for (ScheduleKind k : {ScheduleKind::kZbV, ScheduleKind::kDualPipeV}) {
    for (int p = 2; p <= 8; ++p) {
      for (int m = k == ScheduleKind::kDualPipeV ? 2 * p : 1; m <= 4 * p; ++m) {
        const PipelinePlan plan = make_plan(k, {p, m, 2});
        EXPECT_NO_THROW(preflight(plan)) << schedule_name(k) << " p" << p << " m" << m;
        EXPECT_FALSE(survives_rendezvous_sends(plan));
      }
    }
    EXPECT_THROW(preflight(make_plan(k, {2, 4, 2}), SendMode::kRendezvous), ScheduleRefused);
  }
}

// The bubble time of every schedule against its formula, over p, m and several cost sets, in
// DualPipe's notation (bubble.h), wherever the formula's conditions hold; and they hold at the
// simulator's unit costs once the pipeline fills.
TEST(VSchedules, BubbleTimeOfEveryScheduleIsItsFormulaWhereItApplies) {
  std::vector<UnitCosts> costs;
  for (auto [f, b, w, fb] : std::vector<std::tuple<int, int, int, int>>{
           {1, 1, 1, 3}, {1, 1, 1, 2}, {2, 2, 1, 5}, {2, 2, 1, 3}, {3, 2, 2, 7}, {1, 2, 1, 4},
           {2, 1, 1, 4}, {1, 1, 2, 4}}) {
    UnitCosts c;
    c.forward = f;
    c.backward_input = b;
    c.backward_weight = w;
    c.backward = b + w;
    c.overlapped = fb;
    costs.push_back(c);
  }
  int checked = 0;
  for (ScheduleKind k : all_schedules()) {
    for (const UnitCosts& c : costs) {
      for (int p = 2; p <= 6; ++p) {
        for (int m = 1; m <= 4 * p; ++m) {
          const int v = k == ScheduleKind::kOneFOneB || k == ScheduleKind::kAfab ||
                                k == ScheduleKind::kZbH1
                            ? 1
                            : 2;
          if (k == ScheduleKind::kInterleaved && m % p != 0) continue;
          if (k == ScheduleKind::kDualPipeV && m < 2 * p) continue;
          const PipelinePlan plan = make_plan(k, {p, m, v});
          if (!bubble_time_formula_applies(k, plan.layout, c)) continue;
          const PlayResult r = play(plan, SendMode::kEager, c);
          ASSERT_TRUE(r.ok);
          ASSERT_EQ(bubble_time(r.timeline), bubble_time_formula(k, plan.layout, c))
              << schedule_name(k) << " p" << p << " m" << m << " F" << c.forward << " B"
              << c.backward_input << " W" << c.backward_weight << " F&B" << c.overlapped;
          ++checked;
        }
      }
    }
    const PipelineLayout filled = layout_for(k, 4, 8, k == ScheduleKind::kAfab ||
                                                          k == ScheduleKind::kOneFOneB ||
                                                          k == ScheduleKind::kZbH1 ? 1 : 2);
    EXPECT_TRUE(bubble_time_formula_applies(k, filled, UnitCosts{})) << schedule_name(k);
  }
  EXPECT_GT(checked, 1000);
}

// At the unit costs every rank idles alike for the V schedules, so the fraction is the formula's.
TEST(VSchedules, BubbleFractionAtUnitCostsIsTheFormula) {
  for (ScheduleKind k : {ScheduleKind::kZbV, ScheduleKind::kDualPipeV}) {
    for (int p = 2; p <= 6; ++p) {
      for (int m = 2 * p; m <= 4 * p; ++m) {
        const PipelinePlan plan = make_plan(k, {p, m, 2});
        const double measured = bubble_fraction(play(plan, SendMode::kEager).timeline);
        EXPECT_NEAR(measured, bubble_formula(k, plan.layout), 1e-12)
            << schedule_name(k) << " p" << p << " m" << m;
      }
    }
  }
}

// DualPipeV's pair run as a CPU does (F&B = F + B) against a GPU that hides communication
// (F&B = max(F, B)): the step is shorter, and the bubble is the formula's at both costs.
TEST(VSchedules, OverlappedPairShortensTheDualPipeVStep) {
  for (int p : {2, 4, 8}) {
    const PipelinePlan plan = make_plan(ScheduleKind::kDualPipeV, {p, 2 * p, 2});
    UnitCosts gpu;
    gpu.overlapped = 2;
    const Timeline cpu_t = play(plan, SendMode::kEager).timeline;
    const Timeline gpu_t = play(plan, SendMode::kEager, gpu).timeline;
    EXPECT_LT(gpu_t.makespan, cpu_t.makespan);
    EXPECT_EQ(bubble_time(cpu_t), 2 * (p - 1));
    EXPECT_EQ(bubble_time(gpu_t), p - 1);
  }
}

TEST(VSchedules, PeakActivationsAreTheTabulatedOnes) {
  for (ScheduleKind k : {ScheduleKind::kZbV, ScheduleKind::kDualPipeV}) {
    for (int p = 2; p <= 8; ++p) {
      for (int m = k == ScheduleKind::kDualPipeV ? 2 * p : 1; m <= 4 * p; ++m) {
        const PipelinePlan plan = make_plan(k, {p, m, 2});
        const std::vector<int> peaks = peak_activations(play(plan, SendMode::kEager).timeline);
        const std::vector<std::int64_t> ones{1, 1};
        for (int r = 0; r < p; ++r) {
          EXPECT_EQ(peaks[std::size_t(r)], expected_peak_activations(k, plan.layout, r))
              << schedule_name(k) << " p" << p << " m" << m << " rank " << r;
          EXPECT_EQ(peak_held(compute_order(k, plan.layout)[std::size_t(r)], ones),
                    peaks[std::size_t(r)]);
        }
      }
    }
  }
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// GPT-2 chunks in a V on local threads: one device's loss bit for bit, every gradient but the
// tied wte bit for bit (each stage accumulates its micro-batches in one device's order), wte
// (rank 0's embedding and head adding to one tensor, in another order) to rounding.
TEST(VSchedules, GptChunksInAVGiveOneDevicesLossAndGradients) {
  const GptConfig c{8, 2, 16, 8, 32};
  for (ScheduleKind k : {ScheduleKind::kZbV, ScheduleKind::kDualPipeV}) {
    for (int p : {2, 4}) {
      const int m = k == ScheduleKind::kDualPipeV ? 2 * p : 3;
      const auto bs = lesson_batches(c, m);
      const OneDevice ref = one_device(c, bs);
      const GptPipelineRun run = run_gpt_pipeline(c, make_plan(k, {p, m, 2}), bs);
      EXPECT_EQ(run.loss_sum, ref.loss_sum) << schedule_name(k) << " p" << p;
      for (const auto& [name, g] : ref.grads) {
        if (name == "wte.weight") continue;
        EXPECT_TRUE(bitwise_equal(run.grads.at(name), g)) << schedule_name(k) << " p" << p << " " << name;
      }
      const auto& a = run.grads.at("wte.weight");
      const auto& b = ref.grads.at("wte.weight");
      double worst = 0, scale = 0;
      for (std::size_t i = 0; i < b.size(); ++i) {
        worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
        scale = std::max(scale, std::abs(double(b[i])));
      }
      EXPECT_LE(worst / scale, 1e-6) << schedule_name(k) << " p" << p;
      EXPECT_NEAR(run.grad_norm / ref.grad_norm, 1.0, 1e-6);
    }
  }
}

// The V's rank 0 holds the embedding and the head: its registry holds wte once, the owner's.
TEST(VSchedules, RankZeroOfTheVRegistersTheTiedWteOnce) {
  const GptConfig c{8, 2, 16, 8, 32};
  const auto stages = rank_chunk_stages(c, 0, 2, 2, Placement::kV);
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0].index, 0);
  EXPECT_EQ(stages[1].index, 3);
  const ParamRegistry r = make_chunks_registry(c, stages);
  int wte = 0;
  for (const ParamEntry& e : r.entries()) {
    if (e.name == "wte.weight") {
      ++wte;
      EXPECT_FALSE(e.holding.tied_copy);
    }
  }
  EXPECT_EQ(wte, 1);
}

}  // namespace
}  // namespace mixpar::ch07
