// A GPT whose sequences are split over cp ranks (its attention through the ring or the
// all-to-all, its positions the rows' true ones) trains as the same model on one device does,
// alone and composed with data and tensor parallelism (with and without sequence parallelism).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "ch06_tensor_parallel/cp_lesson.h"

namespace mixpar::ch06 {
namespace {

// The tolerance: the runs differ only in the order of their sums (attention regrouped into
// blocks, gradients' cp shares summed then averaged over dp, tp's partial sums), each a few
// f32 ulps (2^-24 relative); ten AdamW steps of lr 1e-3 move a weight by at most 1e-2, so a
// rounding-level difference in a gradient moves it far less: 1e-4 absolute on weights of
// order 1 and losses of order log V ~ 4 is a thousand ulps, as chapter 6's tp runs
// (tests/ch06/tensor_parallel_gpt_test.cpp), while a wrong gradient moves them by 1e-3 and more.
constexpr double kTol = 1e-4;

void expect_equal(const CpGptResult& one, const CpGptResult& r, const std::string& what) {
  double dl = 0, dn = 0;
  for (std::size_t i = 0; i < one.loss.size() && i < r.loss.size(); ++i) {
    dl = std::max(dl, std::fabs(one.loss[i] - r.loss[i]));
    dn = std::max(dn, std::fabs(one.grad_norm[i] - r.grad_norm[i]));
  }
  const double dw = max_weight_difference(one, r);
  std::printf("%s: tolerance %.0e; loss %.2e, grad norm %.2e, weights %.2e; replica drift %.1e\n",
              what.c_str(), kTol, dl, dn, dw, r.replica_drift);
  ASSERT_EQ(r.loss.size(), one.loss.size()) << what;
  EXPECT_LE(dl, kTol) << what;
  EXPECT_LE(dn, kTol) << what;
  EXPECT_LE(dw, kTol) << what;
  EXPECT_EQ(r.replica_drift, 0.0) << what << ": dp x cp replicas must stay bit-identical";
}

TEST(ContextParallelGpt, CpTwoAndFourRingAndAllToAllBalancedAndContiguousEqualOneDevice) {
  CpGptConfig c;
  const CpGptResult one = train_cp_gpt(c);
  EXPECT_LT(one.loss.back(), one.loss.front());
  for (CpAlgo algo : {CpAlgo::kRing, CpAlgo::kAllToAll}) {
    for (int cp : {2, 4}) {
      for (CpSplit split : {CpSplit::kZigzag, CpSplit::kContiguous}) {
        if (algo == CpAlgo::kAllToAll && split == CpSplit::kContiguous && cp == 4) continue;
        c.cp = cp;
        c.algo = algo;
        c.split = split;
        expect_equal(one, train_cp_gpt(c),
                     std::string(cp_algo_name(algo)) + " cp " + std::to_string(cp) + " " +
                         std::string(cp_split_name(split)));
      }
    }
  }
}

TEST(ContextParallelGpt, ComposesWithDataAndTensorParallelism) {
  CpGptConfig c;
  const CpGptResult one = train_cp_gpt(c);
  c.cp = 2;
  c.dp = 2;
  expect_equal(one, train_cp_gpt(c), "dp 2 x cp 2");
  c.dp = 1;
  c.tp = 2;
  expect_equal(one, train_cp_gpt(c), "tp 2 x cp 2");
  c.sequence_parallel = true;
  expect_equal(one, train_cp_gpt(c), "tp 2 + SP x cp 2");
  c.sequence_parallel = false;
  c.dp = 2;
  c.algo = CpAlgo::kAllToAll;
  expect_equal(one, train_cp_gpt(c), "dp 2 x tp 2 x cp 2, all-to-all");
}

}  // namespace
}  // namespace mixpar::ch06
