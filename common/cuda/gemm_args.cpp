// to_column_major: the row-major -> column-major argument mapping of every GEMM the engine runs.
#include "cuda/gemm_args.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace mixpar::cuda {

namespace {

// The row stride of a stored row-major matrix of `cols` columns (ld 0: packed).
std::int64_t row_stride(std::int64_t cols, std::int64_t ld, const char* name) {
  const std::int64_t packed = std::max<std::int64_t>(1, cols);  // BLAS wants ld >= 1
  if (ld == 0) return packed;
  if (ld < packed) {
    throw std::invalid_argument(std::string("gemm: row stride of ") + name + " is " +
                                std::to_string(ld) + ", below its " + std::to_string(cols) +
                                " columns");
  }
  return ld;
}

}  // namespace

ColumnMajorGemm to_column_major(const RowMajorGemm& g) {
  if (g.M < 0 || g.N < 0 || g.K < 0) {
    throw std::invalid_argument("gemm: negative size M = " + std::to_string(g.M) +
                                ", N = " + std::to_string(g.N) + ", K = " + std::to_string(g.K));
  }
  // Stored row-major shapes.
  const std::int64_t a_rows = g.trans_a ? g.K : g.M, a_cols = g.trans_a ? g.M : g.K;
  const std::int64_t b_rows = g.trans_b ? g.N : g.K, b_cols = g.trans_b ? g.K : g.N;
  ColumnMajorGemm c;
  c.m = g.N;
  c.n = g.M;
  c.k = g.K;
  // Row-major b read column-major is b^T: [b_cols, b_rows]. Column-major op(first) must be
  // [N, K] = (op(b))^T, which is b^T itself when b is not transposed: no transpose then.
  c.trans_first = g.trans_b;
  c.trans_second = g.trans_a;
  c.ld_first = row_stride(b_cols, g.ldb, "b");
  c.ld_second = row_stride(a_cols, g.lda, "a");
  c.ld_out = row_stride(g.N, g.ldc, "out");
  c.first_rows = b_cols;
  c.first_cols = b_rows;
  c.second_rows = a_cols;
  c.second_cols = a_rows;
  return c;
}

}  // namespace mixpar::cuda
