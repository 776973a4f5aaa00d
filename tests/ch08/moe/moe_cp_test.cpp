// Context parallelism beside MoE blocks: the MoE layer is token-wise, so each cp rank routes
// its own rows of every sequence; the balance statistics are reduced over dp x cp (the global
// batch's), and the MoE gradients are divided as context parallelism divides the dense ones
// (its sum over cp by cp, even on one replica, whose sync does not average). cp 2 alone, beside
// dp and ep, and under ZeRO-3 train like one device with the whole batch, to chapter 4's
// tolerances (the sums run in another order). No capacity limit: a capacity counts a rank's
// tokens, so drops depend on which rows a rank holds.
#include <gtest/gtest.h>

#include <string>

#include "ch04_ddp/ddp_tolerances.h"
#include "moe_test_util.h"

namespace mixpar::ch08 {
namespace {

using namespace moe_test;

struct Layout {
  int dp, cp, ep, zero;
};

TEST(MoeContextParallel, CpAloneBesideDpEpAndUnderZeroThreeTrainsLikeOneDevice) {
  const TrainingData data = random_data(4000);
  TrainerConfig one = moe_config(1, 4);
  one.moe.aux_loss_coef = 1e-2;
  one.moe.z_loss_coef = 1e-3;
  one.moe.bias_update_rate = 1e-2;
  const MoeRun base = run(one, data);
  for (const Layout l : {Layout{1, 2, 1, 0}, Layout{2, 2, 4, 0}, Layout{2, 2, 2, 3}}) {
    SCOPED_TRACE("dp " + std::to_string(l.dp) + " x cp " + std::to_string(l.cp) + ", ep " +
                 std::to_string(l.ep) + ", zero " + std::to_string(l.zero));
    TrainerConfig c = one;
    c.batch = 4 / l.dp;
    c.dp = l.dp;
    c.cp = l.cp;
    c.ranks = l.dp * l.cp;
    c.ep = l.ep;
    c.zero_stage = l.zero;
    expect_within_ddp_tolerances(run(c, data), base);
  }
}

}  // namespace
}  // namespace mixpar::ch08
