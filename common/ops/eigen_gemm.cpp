// Eigen's GEMM kernels on row-major arrays (eigen_gemm.h): maps of the callers' buffers, no
// copies; Eigen folds alpha into its kernel and reads transposed maps without copying them.
#include "ops/eigen_gemm.h"

#include <Eigen/Core>

#include "ops/parallel_gemm.h"

namespace mixpar::ops::detail {
namespace {

template <class C>
using RowMajor = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace

void fix_eigen_blocking() {
  static const bool done = [] {
    Eigen::setCpuCacheSizes(kEigenCacheSizes[0], kEigenCacheSizes[1], kEigenCacheSizes[2]);
    return true;
  }();
  (void)done;
}

template <class C>
void eigen_gemm(const C* a, const C* b, C* o, std::int64_t m, std::int64_t n, std::int64_t k,
                bool ta, bool tb, C alpha, C beta) {
  fix_eigen_blocking();
  const Eigen::Map<const RowMajor<C>> am(a, ta ? k : m, ta ? m : k);
  const Eigen::Map<const RowMajor<C>> bm(b, tb ? n : k, tb ? k : n);
  Eigen::Map<RowMajor<C>> om(o, m, n);
  // Threads take blocks of output rows (x's rows) or columns (y's columns): parallel_gemm.h.
  auto run = [&](const auto& x, const auto& y) {
    for_gemm_blocks(m, n, k, [&](auto r0, auto nr, auto c0, auto nc) {
      auto ob = om.block(r0, c0, nr, nc);
      const auto xb = x.middleRows(r0, nr);
      const auto yb = y.middleCols(c0, nc);
      if (beta == C(0)) {
        ob.noalias() = alpha * (xb * yb);
      } else {
        ob *= beta;
        ob.noalias() += alpha * (xb * yb);
      }
    });
  };
  if (!ta && !tb) run(am, bm);
  else if (ta && !tb) run(am.transpose(), bm);
  else if (!ta && tb) run(am, bm.transpose());
  else run(am.transpose(), bm.transpose());
}

template <class C>
void eigen_linear(const C* x, const C* w, const C* bias, C* y, std::int64_t m, std::int64_t n,
                  std::int64_t k) {
  fix_eigen_blocking();
  const Eigen::Map<const RowMajor<C>> xm(x, m, k);
  const Eigen::Map<const RowMajor<C>> wm(w, k, n);
  const Eigen::Map<const Eigen::Matrix<C, 1, Eigen::Dynamic>> bias_row(bias, n);
  Eigen::Map<RowMajor<C>> ym(y, m, n);
  // Threads take blocks of output rows or columns (parallel_gemm.h), bias included.
  for_gemm_blocks(m, n, k, [&](auto r0, auto nr, auto c0, auto nc) {
    auto ob = ym.block(r0, c0, nr, nc);
    ob.noalias() = xm.middleRows(r0, nr) * wm.middleCols(c0, nc);
    ob.rowwise() += bias_row.segment(c0, nc);
  });
}

template void eigen_gemm<float>(const float*, const float*, float*, std::int64_t, std::int64_t,
                                std::int64_t, bool, bool, float, float);
template void eigen_gemm<double>(const double*, const double*, double*, std::int64_t,
                                 std::int64_t, std::int64_t, bool, bool, double, double);
template void eigen_linear<float>(const float*, const float*, const float*, float*, std::int64_t,
                                  std::int64_t, std::int64_t);
template void eigen_linear<double>(const double*, const double*, const double*, double*,
                                   std::int64_t, std::int64_t, std::int64_t);

}  // namespace mixpar::ops::detail
