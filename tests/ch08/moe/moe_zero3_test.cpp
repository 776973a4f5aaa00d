// ZeRO-3 with MoE blocks: the experts' parameters and gradients sharded over edp (the ranks
// holding the same experts), gathered before each MoE block's forward and backward and released
// after. A gathered expert holds exactly the ranges the ranks' optimizers wrote, and a
// reduce-scattered gradient the all-reduce's sums, so the run is ZeRO-1's bit for bit (chapter
// 5's stage 3 is stage 2's, hence DDP's); checkpoints hold the experts whole and resume on
// ZeRO-3 or ZeRO-1.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ch04_ddp/ddp_tolerances.h"
#include "moe_test_util.h"

namespace mixpar::ch08 {
namespace {

using namespace moe_test;

struct Layout {
  int dp, ep;
};

std::string name(const Layout& l) {
  return "dp " + std::to_string(l.dp) + " x ep " + std::to_string(l.ep) + " (edp " +
         std::to_string(l.dp / l.ep) + ")";
}

// The global norm sums the same squares in another order (the dense shards' and the experts'
// ranges, then the world): equal to rounding.
TEST(MoeZero3, ShardsTheExpertsOverEdpAndTrainsBitForBitLikeZeroOne) {
  const TrainingData data = random_data(4000);
  for (const Layout l : {Layout{2, 2}, Layout{2, 1}, Layout{4, 2}}) {
    SCOPED_TRACE(name(l));
    TrainerConfig c = moe_config(l.dp, 2);
    c.ep = l.ep;
    c.grad_accum = 2;  // the whole gradients accumulate over the step's backwards
    c.moe.aux_loss_coef = 1e-2;
    c.moe.z_loss_coef = 1e-3;
    c.zero_stage = 1;
    const MoeRun one = run(c, data);
    c.zero_stage = 3;
    const int edp = l.dp / l.ep;
    const MoeRun three = test::train_on_each_rank(c, data, [&](Trainer& t, int) {
      // Between steps a rank holds its edp range of each expert tensor, the whole released.
      MoeBlocks& m = *t.moe();
      EXPECT_EQ(m.shards_expert_params(), edp > 1);
      const std::vector<Tensor> whole = m.whole_params(), mine = m.params();
      EXPECT_EQ(whole[1].resident(), edp == 1);
      EXPECT_EQ(mine[1].numel(), whole[1].numel() / edp);
      MoeRun r = train(t);
      EXPECT_EQ(m.whole_params()[1].resident(), edp == 1);  // released again after the eval
      return r;
    })[0];
    expect_bit_for_bit(three, one);
  }
}

// A ZeRO-3 checkpoint of dp 4 x ep 2 (edp 2): resumed on its own layout and resharded to
// ZeRO-1 the run continues bit for bit (the two train alike, above); on ep 1 (edp 4, other
// ranges and another sum order of an expert's gradient) within chapter 4's tolerances.
TEST(MoeZero3, ACheckpointResumesBitForBitAndReshardsToZeroOne) {
  test::TempDir dir;
  const TrainingData data = random_data(4000);
  TrainerConfig c = moe_config(4, 2);
  c.ep = 2;
  c.zero_stage = 3;
  c.moe.aux_loss_coef = 1e-2;
  c.moe.bias_update_rate = 1e-2;
  c.checkpoint_dir = dir.file("ckpt");
  const MoeRun straight = run(c, data);
  test::train_on_each_rank(c, data, [&](Trainer& t, int) {
    for (int i = 0; i < 3; ++i) t.train_step();
    t.save_checkpoint();
  });
  struct Resume {
    int ep, zero;
    bool bitwise;
  };
  for (const Resume l : {Resume{2, 3, true}, Resume{2, 1, true}, Resume{1, 3, false}}) {
    SCOPED_TRACE("ep " + std::to_string(l.ep) + ", zero " + std::to_string(l.zero));
    TrainerConfig again = c;
    again.ep = l.ep;
    again.zero_stage = l.zero;
    const MoeRun resumed = resume_after_step_3(again, data);
    ASSERT_EQ(resumed.steps.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
      const double a = resumed.steps[i].loss, b = straight.steps[i + 3].loss;
      if (l.bitwise) {
        EXPECT_EQ(a, b) << "step " << i + 4;
      } else {
        EXPECT_LE(rel(a, b), ch04::kLossTolerance) << "step " << i + 4;
      }
    }
    if (l.bitwise) {
      EXPECT_EQ(resumed.dense, straight.dense);
      EXPECT_EQ(resumed.experts, straight.experts);
    } else {
      EXPECT_LE(worst(resumed.experts, straight.experts), ch04::kWeightsTolerance);
    }
  }
}

// On ep 1 the whole experts a ZeRO-3 checkpoint writes are the layer's own tensors, gathered
// over edp for the write and released after it: what was written is kept, and a ZeRO-1 run
// resumes from it bit for bit.
TEST(MoeZero3, AnEpOneCheckpointKeepsTheExpertsItGatheredForTheWrite) {
  test::TempDir dir;
  const TrainingData data = random_data(4000);
  TrainerConfig c = moe_config(2, 2);
  c.zero_stage = 3;
  c.steps = 4;
  c.checkpoint_dir = dir.file("ckpt");
  const MoeRun straight = run(c, data);
  test::train_on_each_rank(c, data, [&](Trainer& t, int) {
    for (int i = 0; i < 2; ++i) t.train_step();
    t.save_checkpoint();
    EXPECT_FALSE(t.moe()->whole_params()[1].resident());
  });
  TrainerConfig again = c;
  again.zero_stage = 1;
  again.resume = true;
  const MoeRun resumed = test::train_on_each_rank(again, data, [](Trainer& t, int) {
    t.resume();
    return train(t);
  })[0];
  ASSERT_EQ(resumed.steps.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(resumed.steps[i].loss, straight.steps[i + 2].loss) << "step " << i + 3;
  }
  EXPECT_EQ(resumed.experts, straight.experts);
}

}  // namespace
}  // namespace mixpar::ch08
