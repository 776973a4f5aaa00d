// Expert parallelism on local ranks (dp 4, ep borrowed from it): ep 1, 2, 4 give the same
// outputs and gradients, all-to-all and all-gather dispatch the same bits, the all-to-all's
// bytes equal the formula (the all-gather's too), and the two failure modes of the gradient sums and the bias.
#include <gtest/gtest.h>

#include "ch09_expert_parallel/expert_mesh.h"
#include "ch09_test_util.h"
#include "util/errors.h"

namespace mixpar::ch09 {
namespace {

using testing::same_bits;

MoeConfig ep_test_config() {
  MoeConfig c = lesson_config();
  c.aux_loss_coef = 1e-2;
  c.z_loss_coef = 1e-3;
  c.bias_update_rate = 1e-3;
  return c;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::abs(double(a[i]) - b[i]));
    m = std::max(m, std::abs(double(b[i])));
  }
  return d / m;
}

void expect_equal_runs(const EpRun& a, const EpRun& ref, bool experts_bitwise) {
  for (std::size_t r = 0; r < ref.y.size(); ++r) {
    EXPECT_TRUE(same_bits(a.y[r], ref.y[r])) << "y of rank " << r;
    EXPECT_TRUE(same_bits(a.dx[r], ref.dx[r])) << "dx of rank " << r;
    EXPECT_TRUE(same_bits(a.bias[r], ref.bias[r])) << "bias of rank " << r;
  }
  EXPECT_TRUE(same_bits(a.router_grad, ref.router_grad));
  ASSERT_EQ(a.expert_grads.size(), ref.expert_grads.size());
  for (const auto& [e, g] : ref.expert_grads) {
    if (experts_bitwise) EXPECT_TRUE(same_bits(a.expert_grads.at(e), g)) << "expert " << e;
    else EXPECT_LE(rel_diff(a.expert_grads.at(e), g), 1e-5) << "expert " << e;
  }
}

TEST(ExpertParallel, Ep124GiveTheSameOutputsAndGradients) {
  const MoeConfig c = ep_test_config();
  EpRunOptions o;
  const EpRun ref = run_expert_parallel(c, o);
  for (int ep : {2, 4}) {
    o.ep = ep;
    SCOPED_TRACE("ep " + std::to_string(ep));
    expect_equal_runs(run_expert_parallel(c, o), ref, false);
  }
}

TEST(ExpertParallel, WithCapacityDropsEp2StillEqualsEp1) {
  MoeConfig c = ep_test_config();
  c.capacity_factor = 1.0;
  EpRunOptions o;
  const EpRun ref = run_expert_parallel(c, o);
  o.ep = 2;
  expect_equal_runs(run_expert_parallel(c, o), ref, false);
}

TEST(ExpertParallel, AllToAllAndAllGatherDispatchAgreeBitwiseWithAndWithoutDrops) {
  MoeConfig c = ep_test_config();
  for (double factor : {0.0, 1.0}) {
    c.capacity_factor = factor;
    for (int ep : {2, 4}) {
      EpRunOptions o;
      o.ep = ep;
      const EpRun a2a = run_expert_parallel(c, o);
      o.dispatch = DispatchKind::kAllGather;
      SCOPED_TRACE("ep " + std::to_string(ep) + ", capacity factor " + std::to_string(factor));
      expect_equal_runs(run_expert_parallel(c, o), a2a, true);
    }
  }
}

TEST(ExpertParallel, AllToAllBytesEqualTheFormulaFromTheRouting) {
  EpRunOptions o;
  o.ep = 4;
  const EpRun run = run_expert_parallel(ep_test_config(), o);
  for (std::size_t r = 0; r < run.sent.size(); ++r) {
    EXPECT_GT(run.sent[r], 0u);
    EXPECT_EQ(run.sent[r], run.sent_formula[r]) << "rank " << r;
  }
}

TEST(ExpertParallel, AllGatherBytesEqualTheirFormulaFromTheShapesAlone) {
  const MoeConfig c = ep_test_config();
  for (int ep : {2, 4}) {
    EpRunOptions o;
    o.ep = ep;
    o.dispatch = DispatchKind::kAllGather;
    const EpRun run = run_expert_parallel(c, o);
    for (std::size_t r = 0; r < run.sent.size(); ++r) {
      EXPECT_EQ(run.sent[r], all_gather_bytes_formula(o.tokens, c.d_model, c.top_k, ep))
          << "ep " << ep << ", rank " << r;
    }
  }
  EXPECT_EQ(all_gather_bytes_formula(24, 16, 2, 1), 0u);
}

TEST(ExpertParallel, ExpertGradsReducedOverDpInsteadOfEdpAreWrong) {
  const MoeConfig c = ep_test_config();
  EpRunOptions o;
  const EpRun ref = run_expert_parallel(c, o);
  o.ep = 2;
  o.expert_grads_over_dp = true;
  const EpRun bad = run_expert_parallel(c, o);
  double worst = 0;
  for (const auto& [e, g] : ref.expert_grads) worst = std::max(worst, rel_diff(bad.expert_grads.at(e), g));
  EXPECT_GT(worst, 0.1);
}

TEST(ExpertParallel, ExpertBiasCountsNotReducedAcrossRanksPartTheReplicas) {
  EpRunOptions o;
  o.ep = 2;
  const EpRun good = run_expert_parallel(ep_test_config(), o);
  o.bias_counts_reduced = false;
  const EpRun bad = run_expert_parallel(ep_test_config(), o);
  int differ = 0;
  for (std::size_t r = 1; r < good.bias.size(); ++r) {
    EXPECT_TRUE(same_bits(good.bias[r], good.bias[0]));
    differ += same_bits(bad.bias[r], bad.bias[0]) ? 0 : 1;
  }
  EXPECT_GT(differ, 0);
}

TEST(ExpertMesh, EpBorrowsFromDpTimesCpAndKeepsTheRankNumbers) {
  const DeviceMesh mesh = DeviceMesh::standard(4, 2, 1, 1);  // dp 4 x tp 2: rank = 2 d + t
  const DeviceMesh em = expert_mesh(mesh, 2);
  EXPECT_EQ(em.world(), mesh.world());
  EXPECT_EQ(em.size("edp"), 2);
  EXPECT_EQ(em.group(0, {"ep"}), (std::vector<int>{0, 2}));   // dp 0 and 1, same tp rank
  EXPECT_EQ(em.group(0, {"edp"}), (std::vector<int>{0, 4}));  // dp 0 and 2
  EXPECT_EQ(em.group(3, {"ep"}), (std::vector<int>{1, 3}));
  EXPECT_EQ(mesh.group(0, {"dp", "cp"}), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_THROW(expert_mesh(mesh, 3), InputError);
  EXPECT_THROW(expert_mesh(DeviceMesh::standard(2, 1, 2, 1), 8), InputError);
  EXPECT_EQ(expert_mesh(DeviceMesh::standard(2, 1, 2, 1), 4).size("edp"), 1);  // dp x cp = 4
}

}  // namespace
}  // namespace mixpar::ch09
