// mixpar-plan's search (ch08_full_3d/layout_plan/layout_search.h): a layout is refused when
// train_gpt's mesh rules refuse it (the same table, through a TrainerConfig), and its memory
// is chapter 3's bill (mixpar-mem's total for 1F1B with m >= pp and no cp).
#include "layout_search.h"

#include <gtest/gtest.h>

#include <string>

#include "mesh_rules.h"
#include "util/errors.h"

namespace mixpar::plan {
namespace {

Cluster node_of(std::int64_t devices, std::int64_t per_node) {
  Cluster c = cluster_preset("h100-80gb-nvlink-ib400", "");
  c.devices = devices;
  c.devices_per_node = per_node;
  return c;
}

SearchSpace small_space() {
  SearchSpace s;
  s.global_batch = 16;
  s.seq = 32;
  s.micro_batch_sizes = {1, 2, 4};
  s.schedules = {ch07::ScheduleKind::kOneFOneB, ch07::ScheduleKind::kInterleaved,
                 ch07::ScheduleKind::kZbH1, ch07::ScheduleKind::kZbV};
  return s;
}

// 6 blocks and 6 heads: pp 4, tp 4 and tp 8 break rules of their own.
const GptConfig kModel{6, 6, 96, 32, 256};

TEST(PlanSearch, RefusesEveryLayoutTheMeshRulesRefuse) {
  const Cluster cluster = node_of(8, 8);
  int mesh_refused = 0, kept = 0;
  for (const Candidate& c : all_candidates(small_space(), cluster)) {
    const std::string why = refusal(c, kModel, 32, cluster);
    bool mesh_ok = true;
    try {
      ch08::check_mesh_rules(trainer_config_of(c, kModel, 32));
    } catch (const InputError&) {
      mesh_ok = false;
    }
    if (!mesh_ok) {
      ++mesh_refused;
      EXPECT_EQ(why.rfind("mesh rule ", 0), 0u) << c.text() << ": " << why;
    }
    if (why.empty()) ++kept;
  }
  EXPECT_GT(mesh_refused, 0);  // tp 4 and 8 do not divide 6 heads
  EXPECT_GT(kept, 0);
}

TEST(PlanSearch, StatesItsRulesBeyondTheMeshRules) {
  const Cluster cluster = node_of(16, 4);
  Candidate tp8{.dp = 2, .tp = 8};
  EXPECT_NE(refusal(tp8, GptConfig{8, 8, 64, 32, 256}, 32, cluster).find("spans nodes"),
            std::string::npos);
  const Cluster one = node_of(2, 2);
  Candidate zb{.dp = 1, .tp = 1, .cp = 1, .pp = 2, .schedule = ch07::ScheduleKind::kZbH1,
               .micro_batch = 1, .micro_batches = 4, .recompute = mem::Recompute::kFull};
  EXPECT_NE(refusal(zb, kModel, 32, one).find("not with recompute"), std::string::npos);
  Candidate interleaved{.pp = 2, .schedule = ch07::ScheduleKind::kInterleaved,
                        .virtual_stages = 2, .micro_batch = 1, .micro_batches = 3};
  EXPECT_NE(refusal(interleaved, GptConfig{8, 8, 64, 32, 256}, 32, one).find("multiple of pp"),
            std::string::npos);
  // pp 4 does not divide 6 blocks: chapter 3's calculator cannot bill it.
  const Cluster four = node_of(4, 4);
  Candidate pp4{.pp = 4, .micro_batch = 1, .micro_batches = 4};
  EXPECT_NE(refusal(pp4, kModel, 32, four), "");
}

TEST(PlanSearch, EveryCandidateFillsTheClusterAndTheGlobalBatch) {
  const Cluster cluster = node_of(8, 8);
  const SearchSpace s = small_space();
  for (const Candidate& c : all_candidates(s, cluster)) {
    EXPECT_EQ(c.devices(), 8) << c.text();
    EXPECT_EQ(c.dp * c.micro_batch * c.micro_batches, s.global_batch) << c.text();
    if (c.dp == 1) {
      EXPECT_EQ(c.zero_stage, 0) << c.text();
    }
  }
}

TEST(PlanSearch, MemoryIsMixparMemsBillFor1F1BWithoutContextParallelism) {
  const Cluster cluster = node_of(8, 8);
  const GptConfig model{8, 8, 128, 64, 512};
  int compared = 0;
  SearchSpace s = small_space();
  s.seq = 64;
  s.context_parallel = false;
  for (const Candidate& c : all_candidates(s, cluster)) {
    if (!refusal(c, model, 64, cluster).empty()) continue;
    if (c.schedule != ch07::ScheduleKind::kOneFOneB || c.micro_batches < c.pp) continue;
    const mem::MemoryBill bill = mem::compute_bill(training_setup_of(c, model, 64, cluster));
    EXPECT_EQ(device_memory(c, model, 64, cluster).total(), bill.total_bytes) << c.text();
    ++compared;
  }
  EXPECT_GT(compared, 10);
}

TEST(PlanSearch, ContextParallelismDividesTheActivations) {
  const Cluster cluster = node_of(2, 2);
  const GptConfig model{4, 4, 64, 64, 256};
  const Candidate one{.dp = 2, .micro_batch = 2, .micro_batches = 1};
  const Candidate two{.dp = 1, .cp = 2, .micro_batch = 2, .micro_batches = 2};
  const DeviceMemory a = device_memory(one, model, 64, cluster);
  const DeviceMemory b = device_memory(two, model, 64, cluster);
  EXPECT_EQ(b.activation_bytes, a.activation_bytes / 2);
}

TEST(PlanSearch, InterleavedHoldsTheSimulatorsChunksNotWholeStages) {
  const Cluster cluster = node_of(4, 4);
  const GptConfig model{8, 4, 64, 32, 256};
  const Candidate f{.pp = 4, .micro_batch = 1, .micro_batches = 8};
  Candidate i = f;
  i.schedule = ch07::ScheduleKind::kInterleaved;
  i.virtual_stages = 2;
  // 1F1B's first rank holds p = 4 micro-batches of its 2 layers: 8 layers' worth; interleaved
  // holds more chunks of 1 layer each (Narayanan et al.: 1 + (p - 1) / (p v) times more).
  EXPECT_DOUBLE_EQ(device_memory(f, model, 32, cluster).layers_in_flight, 8.0);
  EXPECT_GT(device_memory(i, model, 32, cluster).layers_in_flight, 8.0);
}

}  // namespace
}  // namespace mixpar::plan
