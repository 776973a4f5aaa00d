// The gradient sync overlaps backward (its buckets reduced on a communication thread) only on a
// pure data-parallel layout. With tp, cp, a pipeline or MoE blocks the compute thread calls
// their collectives during backward, and two threads of one rank in the local backend at once
// made its deadlock check call a live rank stuck: ZeroOverTp's tp 2 x dp 2 runs failed now and
// then under load with a dp reduce-scatter "deadlocked" against a tp all-reduce.
#include <gtest/gtest.h>

#include <string>

#include "ch08_test_util.h"
#include "strategy_factory.h"

namespace mixpar::ch08 {
namespace {

TEST(OverlapRule, BucketsOverlapBackwardOnlyWhenTheComputeThreadTalksToNoOtherGroup) {
  TrainerConfig c = test::tiny_config();
  c.ranks = c.dp = 2;
  EXPECT_TRUE(buckets_overlap_backward(c)) << "pure dp overlaps";
  TrainerConfig off = c;
  off.overlap = false;
  EXPECT_FALSE(buckets_overlap_backward(off)) << "--no-overlap";
  TrainerConfig tp = c;
  tp.tp = 2;
  EXPECT_FALSE(buckets_overlap_backward(tp)) << "tp's all-reduces in backward";
  TrainerConfig cp = c;
  cp.cp = 2;
  EXPECT_FALSE(buckets_overlap_backward(cp)) << "cp's ring in backward";
  TrainerConfig pp = c;
  pp.pp = 2;
  EXPECT_FALSE(buckets_overlap_backward(pp)) << "the pipeline's sends in backward";
  TrainerConfig moe = c;
  moe.moe.n_experts = 4;
  EXPECT_FALSE(buckets_overlap_backward(moe)) << "the MoE blocks' all-to-alls in backward";
}

// The rule reaches the sync the trainer builds: ZeRO-2 on tp 2 x dp 2 reduce-scatters after
// backward, on dp 2 alone during it.
TEST(OverlapRule, TheTrainersSyncSaysWhenItReduces) {
  const TrainingData data = test::random_data(4096);
  for (int tp : {1, 2}) {
    TrainerConfig c = test::tiny_config();
    c.tp = tp;
    c.dp = 2;
    c.ranks = tp * 2;
    c.threads = 1;
    c.zero_stage = 2;
    const auto said = test::train_on_each_rank(
        c, data, [&](Trainer& t, int) { return t.grad_sync().describe(); });
    for (const std::string& s : said) {
      EXPECT_NE(s.find(tp == 1 ? "during backward" : "after backward"), std::string::npos)
          << "tp " << tp << ": " << s;
    }
  }
}

}  // namespace
}  // namespace mixpar::ch08
