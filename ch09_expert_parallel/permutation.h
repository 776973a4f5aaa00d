// Token permutation: the kept assignments' rows gathered expert by expert (expert-major,
// tokens in order within an expert), so each expert's tokens are one contiguous block of
// rows and the experts run as one grouped GEMM (grouped_gemm.h). Its inverse, the combine,
// scatters the rows back and sums a token's rows in choice order, each times its gate. An
// expert that receives no token is a block of zero rows.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ch09_expert_parallel/top_k.h"
#include "tensor/tensor.h"

namespace mixpar::ch09 {

struct Permutation {
  int n_experts = 0;
  int k = 0;
  std::int64_t tokens = 0;
  std::vector<std::int64_t> counts;   // [E] rows of each expert
  std::vector<std::int64_t> offsets;  // [E + 1] first row of each expert; offsets[E] = N
  std::vector<std::int64_t> source;   // [N] the assignment t k + j of each permuted row
  std::vector<std::int64_t> row_of;   // [T k] the permuted row of each assignment, -1: dropped
  std::int64_t rows() const { return offsets.back(); }
};

Permutation make_permutation(const Routing& r, const std::vector<char>& keep, int n_experts);

// xp [N, C] = the rows x [T, C] of each permuted row's token (FP32).
void permute_rows(const Tensor& x, const Permutation& p, Tensor& xp);
// y [T, C] = for each token, sum over its kept choices j in order of w_j * yp[row], the first
// term assigned (so one term is copied exactly); weights empty: w = 1, no multiply. A token
// with no kept choice gets zeros. This is also permute_rows' backward (weights empty).
void unpermute_rows(const Tensor& yp, const Permutation& p, std::span<const float> weights,
                    Tensor& y);
// unpermute_rows' backward for yp: dyp [N, C] = w_j * dy[token] (permute_rows when weights
// are empty).
void unpermute_backward(const Tensor& dy, const Permutation& p, std::span<const float> weights,
                        Tensor& dyp);

}  // namespace mixpar::ch09
