// Exercise (chapter 6, part 2): merge two partial attention outputs by their log-sum-exps, the
// step ring attention takes each time a K/V block arrives. For one query row with scores s_j,
// a block of keys K gives
//   lse_K = log sum_{j in K} e^{s_j},   o_K = sum_{j in K} e^{s_j - lse_K} v_j
// (its softmax over K alone, applied to V). Two disjoint blocks A and B then give the row's
// attention over A u B as
//   lse = log(e^{lse_A} + e^{lse_B}),   o = e^{lse_A - lse} o_A + e^{lse_B - lse} o_B.
// Compute it without overflow (subtract max(lse_A, lse_B) before exponentiating), and let a
// side with lse = -inf (no key yet) contribute nothing: the other side is then taken whole.
// o_a, o_b: rows x d, row-major; lse_a, lse_b: rows. See ch06_tensor_parallel/README.md
// (section 9, the merge rule) and docs/REFERENCE.md (Context parallelism).
#pragma once

#include <cstdint>
#include <vector>

namespace mixpar::exercises {

struct MergedAttention {
  std::vector<float> out;  // [rows, d]
  std::vector<float> lse;  // [rows]
};

MergedAttention merge_attention(const std::vector<float>& o_a, const std::vector<float>& lse_a,
                                const std::vector<float>& o_b, const std::vector<float>& lse_b,
                                std::int64_t rows, std::int64_t d);

}  // namespace mixpar::exercises
