// The gradient sync overlaps backward (its buckets reduced on a communication
// thread) on a pure data-parallel layout over dp itself, and beside tp, cp, a
// pipeline or MoE blocks, whose collectives the compute thread calls during
// backward, over dp's dup (Communicator::dup): the local backend's lane of its
// own. Over one group, two threads of one rank made its deadlock check call a
// live rank stuck: ZeroOverTp's tp 2 x dp 2 runs failed now and then under load
// with a dp reduce-scatter "deadlocked" against a tp all-reduce. ZeRO-3, which
// gathers on the compute thread there, keeps its buckets after backward. Either
// way the bits are the same.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ch08_test_util.h"
#include "strategy_factory.h"

namespace mixpar::ch08 {
namespace {

TEST(OverlapRule, BesideOtherGroupsTheBucketsOverlapBackwardOnDpsDup) {
  TrainerConfig c = test::tiny_config();
  c.ranks = c.dp = 2;
  EXPECT_TRUE(buckets_overlap_backward(c, false)) << "pure dp overlaps over dp itself";
  TrainerConfig off = c;
  off.overlap = false;
  EXPECT_FALSE(buckets_overlap_backward(off, true)) << "--no-overlap";
  TrainerConfig z3_dp = c;
  z3_dp.zero_stage = 3;
  EXPECT_TRUE(buckets_overlap_backward(z3_dp, false)) << "ZeRO-3 on pure dp";
  // Each layout whose compute thread talks to another group during backward: with dp's dup
  // the buckets overlap, without one they wait for backward's end.
  struct Beside {
    const char* what;
    int tp, cp, pp, experts, zero;
  };
  for (const Beside& b : {Beside{"tp's all-reduces", 2, 1, 1, 0, 0},
                          Beside{"cp's ring", 1, 2, 1, 0, 0},
                          Beside{"the pipeline's sends", 1, 1, 2, 0, 1},
                          Beside{"the MoE blocks' all-to-alls", 1, 1, 1, 4, 0},
                          Beside{"tp, ZeRO-3 gathering on its own thread", 2, 1, 1, 0, 3}}) {
    TrainerConfig x = c;
    x.tp = b.tp;
    x.cp = b.cp;
    x.pp = b.pp;
    x.moe.n_experts = b.experts;
    x.zero_stage = b.zero;
    EXPECT_TRUE(buckets_overlap_backward(x, true)) << b.what << ", dp's dup";
    EXPECT_FALSE(buckets_overlap_backward(x, false)) << b.what << ", no dup";
  }
}

// The rule reaches the sync the trainer builds: ZeRO-2 reduce-scatters during
// backward on dp 2 alone and on tp 2 x dp 2 (over dp's dup), after it with
// --no-overlap.
TEST(OverlapRule, TheTrainersSyncSaysWhenItReduces) {
  const TrainingData data = test::random_data(4096);
  for (int tp : {1, 2}) {
    for (bool overlap : {true, false}) {
      TrainerConfig c = test::tiny_config();
      c.tp = tp;
      c.dp = 2;
      c.ranks = tp * 2;
      c.threads = 1;
      c.zero_stage = 2;
      c.overlap = overlap;
      const auto said = test::train_on_each_rank(
          c, data, [&](Trainer& t, int) { return t.grad_sync().describe(); });
      for (const std::string& s : said) {
        EXPECT_NE(s.find(overlap ? "during backward" : "after backward"), std::string::npos)
            << "tp " << tp << ", overlap " << overlap << ": " << s;
      }
    }
  }
}

struct TrainedRun {
  std::vector<double> losses, norms;
  std::vector<NamedTensor> params;
  std::string sync;
};

TrainedRun train(TrainerConfig c, const TrainingData& data) {
  const auto runs = test::train_on_each_rank(c, data, [&](Trainer& t, int) {
    TrainedRun r;
    for (int s = 0; s < 3; ++s) {
      const StepStats st = t.train_step();
      r.losses.push_back(st.loss);
      r.norms.push_back(st.grad_norm);
    }
    for (const NamedTensor& p : t.model().parameters())
      r.params.push_back({p.name, p.tensor.clone()});
    r.sync = t.grad_sync().describe();
    return r;
  });
  return runs.back();  // the last rank: a last pipeline stage, a second tp and dp rank
}

// Buckets reduced during backward on dp's dup give the bits of buckets reduced
// after it, on every layout whose compute thread talks to another group
// meanwhile: the same sums in the same fixed order, only earlier.
TEST(OverlapRule, BucketsOnDpsDupGiveTheBitsOfBucketsAfterBackward) {
  const TrainingData data = test::random_data(8192);
  struct Layout {
    const char* name;
    int tp, cp, pp, zero;
  };
  for (const Layout& l :
       {Layout{"tp 2 x dp 2, DDP", 2, 1, 1, 0}, Layout{"cp 2 x dp 2, ZeRO-2", 1, 2, 1, 2},
        Layout{"pp 2 x dp 2, ZeRO-1", 1, 1, 2, 1}}) {
    TrainerConfig c = test::tiny_config();
    c.tp = l.tp;
    c.cp = l.cp;
    c.pp = l.pp;
    c.dp = 2;
    c.ranks = l.tp * l.cp * l.pp * 2;
    c.threads = 1;
    c.zero_stage = l.zero;
    c.grad_accum = 2;
    c.bucket_mb = 0.01;  // several buckets, so some leave while backward still runs
    const TrainedRun during = train(c, data);
    c.overlap = false;
    const TrainedRun after = train(c, data);
    EXPECT_NE(during.sync.find("during backward"), std::string::npos)
        << l.name << ": " << during.sync;
    EXPECT_NE(after.sync.find("after backward"), std::string::npos) << l.name << ": " << after.sync;
    EXPECT_EQ(during.losses, after.losses) << l.name;
    EXPECT_EQ(during.norms, after.norms) << l.name;
    test::expect_same_tensors(during.params, after.params);
  }
}

}  // namespace
}  // namespace mixpar::ch08
