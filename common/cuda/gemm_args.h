// Row-major GEMMs on a column-major BLAS. A row-major [R, C] matrix with row stride ld is,
// read by cuBLAS, the column-major [C, R] matrix with the same ld: its transpose. So the
// row-major C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T: B goes
// first, A second, m and n swap. A pure function, so the mapping is tested without a GPU.
#pragma once

#include <cstdint>

namespace mixpar::cuda {

// out [M, N] = op(a) [M, K] . op(b) [K, N], all row-major, as ops::matmul takes them: a is
// stored [M, K] (or [K, M] when trans_a), b [K, N] (or [N, K] when trans_b). ld* are row
// strides in elements; 0 means packed (the stored matrix's column count).
struct RowMajorGemm {
  std::int64_t M = 0, N = 0, K = 0;
  bool trans_a = false, trans_b = false;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
};

// The same product as one cublasGemmEx / cublasLtMatmul call: D [m, n] (column-major, ld_out)
// = op(first) [m, k] . op(second) [k, n], where first is the row-major b and second the
// row-major a. trans_first / trans_second are cuBLAS's transa / transb.
struct ColumnMajorGemm {
  bool trans_first = false, trans_second = false;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t ld_first = 0, ld_second = 0, ld_out = 0;
  // Stored (column-major) shapes of the operands, as cuBLASLt's matrix layouts want them.
  std::int64_t first_rows = 0, first_cols = 0, second_rows = 0, second_cols = 0;
};

// Throws std::invalid_argument on a negative size or a row stride below the row length.
ColumnMajorGemm to_column_major(const RowMajorGemm& g);

}  // namespace mixpar::cuda
