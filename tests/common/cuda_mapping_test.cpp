// The host-side rules of the GPU engine, checked without a GPU: the row-major -> column-major
// GEMM argument mapping (run through a plain column-major reference GEMM, as cuBLAS would read
// it), the launch configurations, and the error text of the CUDA / cuBLAS / NCCL checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/gemm_args.h"
#include "cuda/launch.h"
#if MIXPAR_HAVE_CUDA
#include "cuda/check.h"
#endif
#if MIXPAR_HAVE_NCCL
#include "cuda/nccl_check.h"
#endif

namespace mixpar::cuda {
namespace {

// BLAS semantics: D[i + j ld_out] = sum_l op(A)[i, l] op(B)[l, j], with A, B column-major.
void column_major_gemm(const ColumnMajorGemm& g, const std::vector<double>& first,
                       const std::vector<double>& second, std::vector<double>& out) {
  for (std::int64_t j = 0; j < g.n; ++j) {
    for (std::int64_t i = 0; i < g.m; ++i) {
      double s = 0;
      for (std::int64_t l = 0; l < g.k; ++l) {
        const double a = g.trans_first ? first[l + i * g.ld_first] : first[i + l * g.ld_first];
        const double b = g.trans_second ? second[j + l * g.ld_second] : second[l + j * g.ld_second];
        s += a * b;
      }
      out[i + j * g.ld_out] = s;
    }
  }
}

// The row-major product as ops::matmul defines it, with row strides.
double row_major_entry(const RowMajorGemm& g, const std::vector<double>& a,
                       const std::vector<double>& b, std::int64_t lda, std::int64_t ldb,
                       std::int64_t i, std::int64_t j) {
  double s = 0;
  for (std::int64_t l = 0; l < g.K; ++l) {
    const double x = g.trans_a ? a[l * lda + i] : a[i * lda + l];
    const double y = g.trans_b ? b[j * ldb + l] : b[l * ldb + j];
    s += x * y;
  }
  return s;
}

TEST(CudaGemmArgs, TheColumnMajorCallComputesTheRowMajorProduct) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (std::int64_t pad : {0, 3}) {  // packed, and row strides longer than the rows
        const std::int64_t M = 5, N = 7, K = 4;
        const std::int64_t a_rows = ta ? K : M, a_cols = ta ? M : K;
        const std::int64_t b_rows = tb ? N : K, b_cols = tb ? K : N;
        const std::int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
        RowMajorGemm g{M, N, K, ta, tb, pad ? lda : 0, pad ? ldb : 0, pad ? ldc : 0};
        std::vector<double> a(static_cast<std::size_t>(a_rows * lda)),
            b(static_cast<std::size_t>(b_rows * ldb)), c(static_cast<std::size_t>(M * ldc), NAN);
        for (double& x : a) x = u(rng);
        for (double& x : b) x = u(rng);
        const ColumnMajorGemm cm = to_column_major(g);
        column_major_gemm(cm, b, a, c);  // first operand: row-major b; second: row-major a
        for (std::int64_t i = 0; i < M; ++i) {
          for (std::int64_t j = 0; j < N; ++j) {
            ASSERT_NEAR(c[static_cast<std::size_t>(i * ldc + j)],
                        row_major_entry(g, a, b, lda, ldb, i, j), 1e-12)
                << "ta " << ta << " tb " << tb << " pad " << pad << " at " << i << "," << j;
          }
        }
      }
    }
  }
}

TEST(CudaGemmArgs, FieldsOfTheLinearLayersGemms) {
  // y [R, out] = x [R, in] w [in, out]: cuBLAS sees y^T [out, R] = w^T x^T, nothing transposed.
  const ColumnMajorGemm fwd = to_column_major({8, 12, 4});
  EXPECT_EQ(fwd.m, 12);
  EXPECT_EQ(fwd.n, 8);
  EXPECT_EQ(fwd.k, 4);
  EXPECT_FALSE(fwd.trans_first);
  EXPECT_FALSE(fwd.trans_second);
  EXPECT_EQ(fwd.ld_first, 12);
  EXPECT_EQ(fwd.ld_second, 4);
  EXPECT_EQ(fwd.ld_out, 12);
  EXPECT_EQ(fwd.first_rows, 12);
  EXPECT_EQ(fwd.first_cols, 4);
  // dw [in, out] = x^T dy: a = x [R, in] transposed; b = dy [R, out].
  const ColumnMajorGemm dw = to_column_major({4, 12, 8, true, false});
  EXPECT_FALSE(dw.trans_first);
  EXPECT_TRUE(dw.trans_second);
  EXPECT_EQ(dw.ld_second, 4);  // x's row length
  EXPECT_EQ(dw.second_rows, 4);
  EXPECT_EQ(dw.second_cols, 8);
}

TEST(CudaGemmArgs, RejectsNegativeSizesAndShortRowStrides) {
  EXPECT_THROW(to_column_major({-1, 2, 3}), std::invalid_argument);
  EXPECT_THROW(to_column_major({2, 3, 4, false, false, 3}), std::invalid_argument);  // lda < K
  EXPECT_THROW(to_column_major({2, 3, 4, false, false, 0, 0, 2}), std::invalid_argument);
  EXPECT_EQ(to_column_major({0, 0, 0}).ld_out, 1);  // BLAS wants ld >= 1 even when empty
}

TEST(CudaLaunch, OneDimensionalGridsCoverEveryElement) {
  EXPECT_EQ(ceil_div(0, 256), 0);
  EXPECT_EQ(ceil_div(1, 256), 1);
  EXPECT_EQ(ceil_div(257, 256), 2);
  EXPECT_EQ(launch_1d(0).grid, 0u);  // nothing to launch
  const LaunchConfig c = launch_1d(1000);
  EXPECT_EQ(c.block, 256u);
  EXPECT_EQ(c.grid, 4u);
  EXPECT_EQ(launch_1d(1000, 256, 8).grid, 1u);  // 125 threads of 8 elements
  EXPECT_EQ(launch_1d(std::int64_t{1} << 40).grid, static_cast<unsigned>(kDefaultMaxBlocks));
  for (std::int64_t n : {1, 31, 255, 256, 257, 100003}) {
    const LaunchConfig l = launch_1d(n, 128, 4);
    EXPECT_GE(std::int64_t{l.grid} * l.block * 4, n) << n;
    EXPECT_LT(std::int64_t{l.grid - 1} * l.block * 4, n) << n;
  }
}

TEST(CudaLaunch, RowGridsGiveEveryRowAWarp) {
  const LaunchConfig r = launch_rows(37, 8);
  EXPECT_EQ(r.block, 256u);
  EXPECT_EQ(r.grid, 5u);
  EXPECT_EQ(launch_rows(0).grid, 0u);
  EXPECT_EQ(column_chunks(0), 1);
  EXPECT_EQ(column_chunks(256), 1);
  EXPECT_EQ(column_chunks(257), 2);
  EXPECT_EQ(column_chunks(16384), 64);
}

TEST(CudaLaunch, RejectsImpossibleConfigurations) {
  EXPECT_THROW(launch_1d(10, 100), std::invalid_argument);   // not a multiple of 32
  EXPECT_THROW(launch_1d(10, 2048), std::invalid_argument);  // above 1024
  EXPECT_THROW(launch_1d(10, 256, 0), std::invalid_argument);
  EXPECT_THROW(launch_rows(10, 0), std::invalid_argument);
  EXPECT_THROW(ceil_div(1, 0), std::invalid_argument);
}

#if MIXPAR_HAVE_CUDA

// The checks need only the libraries' message tables, not a device.
TEST(CudaCheck, ErrorsNameTheCallTheMessageTheFileAndTheLine) {
  try {
    MIXPAR_CUDA_CHECK(cudaErrorInvalidValue);
    FAIL() << "no exception";
  } catch (const CudaError& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), static_cast<int>(cudaErrorInvalidValue));
    EXPECT_NE(m.find("cudaErrorInvalidValue failed: invalid argument (cuda 1)"), std::string::npos)
        << m;
    EXPECT_NE(m.find("cuda_mapping_test.cpp:"), std::string::npos) << m;
  }
  try {
    MIXPAR_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED);
    FAIL() << "no exception";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("(cublas 15)"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(MIXPAR_CUBLASLT_CHECK(CUBLAS_STATUS_SUCCESS));
  EXPECT_NO_THROW(MIXPAR_CUDA_CHECK(cudaSuccess));
}

#endif

#if MIXPAR_HAVE_NCCL
TEST(CudaCheck, NcclErrorsCarryNcclsMessage) {
  try {
    MIXPAR_NCCL_CHECK(ncclInvalidArgument);
    FAIL() << "no exception";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("(nccl " + std::to_string(ncclInvalidArgument) + ")"),
              std::string::npos)
        << e.what();
  }
}
#endif

}  // namespace
}  // namespace mixpar::cuda
