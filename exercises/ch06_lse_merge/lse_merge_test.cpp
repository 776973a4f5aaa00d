// merge_attention against the softmax over both blocks at once and against chapter 6's own
// merge (ch06_tensor_parallel/ring_attention.h, merge_partial_attention): the merged output
// and log-sum-exp equal the whole row's; a side with no key yet leaves the other whole; large
// scores do not overflow; merging three blocks two at a time gives the row over all three.
#include "ch06_lse_merge/lse_merge.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ch06_tensor_parallel/ring_attention.h"

namespace mixpar::exercises {
namespace {

constexpr std::int64_t kRows = 3, kD = 4;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float score(std::int64_t row, std::int64_t key) {
  return static_cast<float>(((row * 7 + key * 5) % 11) - 5) * 0.37f;
}
float value(std::int64_t key, std::int64_t c) {
  return static_cast<float>(((key * 3 + c * 2) % 9) - 4) * 0.25f;
}

// The partial output and log-sum-exp of keys [k0, k1) for every row, in double then rounded;
// `shift` is added to every score (large values must not overflow).
MergedAttention block(std::int64_t k0, std::int64_t k1, float shift = 0.0f) {
  MergedAttention b;
  for (std::int64_t i = 0; i < kRows; ++i) {
    double mx = -INFINITY;
    for (std::int64_t j = k0; j < k1; ++j) mx = std::max(mx, double(score(i, j) + shift));
    double sum = 0;
    for (std::int64_t j = k0; j < k1; ++j) sum += std::exp(double(score(i, j) + shift) - mx);
    for (std::int64_t c = 0; c < kD; ++c) {
      double o = 0;
      for (std::int64_t j = k0; j < k1; ++j) {
        o += std::exp(double(score(i, j) + shift) - mx) / sum * value(j, c);
      }
      b.out.push_back(static_cast<float>(o));
    }
    b.lse.push_back(static_cast<float>(mx + std::log(sum)));
  }
  return b;
}

void expect_near(const MergedAttention& got, const MergedAttention& want, double tol,
                 const char* what) {
  ASSERT_EQ(got.out.size(), want.out.size()) << what;
  ASSERT_EQ(got.lse.size(), want.lse.size()) << what;
  for (std::size_t k = 0; k < want.out.size(); ++k) {
    EXPECT_NEAR(got.out[k], want.out[k], tol) << what << ": out[" << k << "]";
  }
  for (std::size_t k = 0; k < want.lse.size(); ++k) {
    EXPECT_NEAR(got.lse[k], want.lse[k], tol * std::max(1.0f, std::fabs(want.lse[k])))
        << what << ": lse[" << k << "]";
  }
}

TEST(LseMerge, TwoBlocksGiveTheSoftmaxOverBoth) {
  const MergedAttention a = block(0, 3), b = block(3, 8), whole = block(0, 8);
  expect_near(merge_attention(a.out, a.lse, b.out, b.lse, kRows, kD), whole, 1e-6,
              "keys 0-2 merged with 3-7");
}

TEST(LseMerge, EqualsChapter6sMerge) {
  const MergedAttention a = block(0, 5), b = block(5, 6);
  Tensor out = Tensor::from_floats(a.out, {kRows, kD});
  Tensor lse = Tensor::from_floats(a.lse, {kRows});
  ch06::merge_partial_attention(out, lse, Tensor::from_floats(b.out, {kRows, kD}),
                                Tensor::from_floats(b.lse, {kRows}));
  expect_near(merge_attention(a.out, a.lse, b.out, b.lse, kRows, kD),
              MergedAttention{out.to_floats(), lse.to_floats()}, 1e-6, "against ch06");
}

TEST(LseMerge, ASideWithNoKeyLeavesTheOtherWhole) {
  const MergedAttention b = block(2, 6);
  const std::vector<float> zeros(static_cast<std::size_t>(kRows * kD), 0.0f);
  const std::vector<float> none(static_cast<std::size_t>(kRows), kNegInf);
  const MergedAttention m = merge_attention(zeros, none, b.out, b.lse, kRows, kD);
  ASSERT_EQ(m.out.size(), b.out.size());
  ASSERT_EQ(m.lse.size(), b.lse.size());
  for (std::size_t k = 0; k < b.out.size(); ++k) EXPECT_EQ(m.out[k], b.out[k]) << k;
  for (std::size_t k = 0; k < b.lse.size(); ++k) EXPECT_EQ(m.lse[k], b.lse[k]) << k;
}

TEST(LseMerge, LargeScoresDoNotOverflow) {
  // e^100 overflows a float (its largest is about e^88.7): the merge must only exponentiate
  // differences. A float lse near 100 is held to 2^-17 (7.6e-6), so each weight e^(lse_a - lse)
  // is off by that much relative: 4 such ulps on outputs of order 1.
  const MergedAttention a = block(0, 4, 100.0f), b = block(4, 8, 100.0f);
  const MergedAttention whole = block(0, 8, 100.0f);
  expect_near(merge_attention(a.out, a.lse, b.out, b.lse, kRows, kD), whole, 3.1e-5,
              "scores near 100");
}

TEST(LseMerge, ThreeBlocksTwoAtATimeGiveTheRowOverAll) {
  const MergedAttention a = block(0, 2), b = block(2, 5), c = block(5, 9), whole = block(0, 9);
  const MergedAttention ab = merge_attention(a.out, a.lse, b.out, b.lse, kRows, kD);
  expect_near(merge_attention(ab.out, ab.lse, c.out, c.lse, kRows, kD), whole, 1e-6,
              "((0-1, 2-4), 5-8)");
}

}  // namespace
}  // namespace mixpar::exercises
