// mixpar-plan's step time (ch08_full_3d/layout_plan/step_time_model.h): the ranks' FLOPs add
// up to model_flops.h's grid FLOPs, the bubble is the ch07 simulator's and shrinks with more
// micro-batches, a group that leaves its node pays the slower link, recompute adds a forward.
#include "step_time_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "model_flops.h"

namespace mixpar::plan {
namespace {

Cluster h100(std::int64_t devices) {
  Cluster c = cluster_preset("h100-80gb-nvlink-ib400", "");
  c.devices = devices;
  return c;
}

const GptConfig kModel{8, 8, 512, 128, 1000};

TEST(PlanStepTime, TheRanksFlopsAddUpToTheGridsModelFlops) {
  Cluster shared = h100(8);
  shared.shared_cores = 2;  // compute = the sum over ranks / the machine's rate
  BubbleCache cache;
  for (const Candidate& c :
       {Candidate{.dp = 8, .micro_batch = 2, .micro_batches = 1},
        Candidate{.dp = 2, .tp = 2, .pp = 2, .micro_batch = 2, .micro_batches = 4},
        Candidate{.dp = 1, .tp = 2, .cp = 2, .pp = 2, .micro_batch = 2, .micro_batches = 8}}) {
    const StepTime t = predict_step_time(c, kModel, 128, shared, cache);
    const double summed = t.compute * shared.peak_flops * t.gemm_efficiency;
    EXPECT_NEAR(summed / ch08::grid_flops_per_step(trainer_config_of(c, kModel, 128)), 1.0, 1e-9)
        << c.text();
  }
}

TEST(PlanStepTime, BubbleIsTheSimulatorsAndShrinksWithMoreMicroBatches) {
  const Cluster c = h100(4);
  BubbleCache cache;
  const Candidate few{.pp = 4, .micro_batch = 1, .micro_batches = 4};
  const Candidate many{.pp = 4, .micro_batch = 1, .micro_batches = 16};
  const StepTime a = predict_step_time(few, kModel, 128, c, cache);
  const StepTime b = predict_step_time(many, kModel, 128, c, cache);
  // 1F1B: (p - 1) / m of the compute (bubble.h's formula, the simulator's exact value).
  EXPECT_NEAR(a.bubble / a.compute, 3.0 / 4.0, 1e-12);
  EXPECT_NEAR(b.bubble / b.compute, 3.0 / 16.0, 1e-12);
}

TEST(PlanStepTime, ADataParallelGroupAcrossNodesPaysTheSlowerLink) {
  Cluster one_node = h100(16);
  one_node.devices_per_node = 16;
  const Cluster two_nodes = h100(16);
  BubbleCache cache;
  const Candidate c{.dp = 16, .micro_batch = 1, .micro_batches = 1};
  const StepTime in = predict_step_time(c, kModel, 128, one_node, cache);
  const StepTime across = predict_step_time(c, kModel, 128, two_nodes, cache);
  EXPECT_GT(across.dp, in.dp);
  EXPECT_DOUBLE_EQ(across.compute, in.compute);
}

TEST(PlanStepTime, FullRecomputeAddsOneForward) {
  const Cluster c = h100(1);
  BubbleCache cache;
  Candidate none{.micro_batch = 4, .micro_batches = 1};
  Candidate full = none;
  full.recompute = mem::Recompute::kFull;
  const double ratio = predict_step_time(full, kModel, 128, c, cache).compute /
                       predict_step_time(none, kModel, 128, c, cache).compute;
  // The blocks' 6 FLOPs per weight become 8; the LM head's stay 6: between 1 and 8/6.
  EXPECT_GT(ratio, 1.2);
  EXPECT_LT(ratio, 8.0 / 6.0);
}

TEST(PlanStepTime, TensorParallelCommunicationIsExposedAndScalesWithMicroBatches) {
  const Cluster c = h100(2);
  BubbleCache cache;
  const StepTime one = predict_step_time(Candidate{.tp = 2, .micro_batch = 1, .micro_batches = 1},
                                         kModel, 128, c, cache);
  const StepTime four = predict_step_time(
      Candidate{.tp = 2, .micro_batch = 1, .micro_batches = 4}, kModel, 128, c, cache);
  EXPECT_GT(one.tp, 0);
  EXPECT_NEAR(four.tp / one.tp, 4.0, 1e-9);
}

}  // namespace
}  // namespace mixpar::plan
