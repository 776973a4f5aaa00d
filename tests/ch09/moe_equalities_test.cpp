// The layer's equalities: one expert, top-1, no capacity limit is GPT-2's MLP bit for bit;
// the grouped GEMM is each expert alone; permute then unpermute is the identity, and so is
// its gradient, with experts that receive no token; the top-k combine sums a token's choices
// in order, each times its gate.
#include <gtest/gtest.h>

#include "ch09_expert_parallel/permutation.h"
#include "ch09_expert_parallel/top_k.h"
#include "ch09_test_util.h"

namespace mixpar::ch09 {
namespace {

using testing::claim_of;
using testing::expect_section_holds;

TEST(MoeEqualities, OneExpertTopOneNoCapacityEqualsTheGptMlpBitwise) {
  const Section s = dense_equality();
  expect_section_holds(s);
  EXPECT_TRUE(claim_of(s, "output equals the dense MLP's").ok);
  EXPECT_TRUE(claim_of(s, "the four weight gradients").ok);
}

TEST(MoeEqualities, GroupedGemmEqualsEachExpertAloneBitwiseIncludingAnEmptyOne) {
  expect_section_holds(grouped_gemm_equality());
}

TEST(MoeEqualities, UnpermuteOfPermuteIsTheIdentityAndSoIsItsGradientWithEmptyExperts) {
  const Section s = permutation_identity();
  expect_section_holds(s);
  EXPECT_TRUE(claim_of(s, "experts 2 and 5 receive no rows").ok);
}

TEST(MoeEqualities, TopTwoCombineSumsATokensChoicesInOrderTimesTheirGates) {
  // Two tokens, three experts: token 0 picks experts 2 then 0, token 1 picks 1 then 2.
  const std::vector<float> p = {0.3f, 0.1f, 0.6f, 0.2f, 0.5f, 0.3f};
  const Tensor probs = Tensor::from_floats(p, {2, 3});
  const Routing r = select_top_k(probs, {}, 2, true);
  ASSERT_EQ(r.expert, (std::vector<int>{2, 0, 1, 2}));
  EXPECT_EQ(r.gate[0], 0.6f / (0.6f + 0.3f));
  EXPECT_EQ(r.gate[3], 0.3f / (0.5f + 0.3f));
  const Permutation perm = make_permutation(r, std::vector<char>(4, 1), 3);
  EXPECT_EQ(perm.counts, (std::vector<std::int64_t>{1, 1, 2}));
  // Rows as the experts would return them: row i holds the value 10 + i.
  const std::vector<float> rows = {10, 11, 12, 13};
  const Tensor yp = Tensor::from_floats(rows, {4, 1});
  Tensor y = Tensor::empty({2, 1}, DType::kF32);
  unpermute_rows(yp, perm, r.gate, y);
  const auto row = [&](int a) { return float(10 + perm.row_of[std::size_t(a)]); };
  EXPECT_EQ(y.to_floats()[0], r.gate[0] * row(0) + r.gate[1] * row(1));
  EXPECT_EQ(y.to_floats()[1], r.gate[2] * row(2) + r.gate[3] * row(3));
}

}  // namespace
}  // namespace mixpar::ch09
