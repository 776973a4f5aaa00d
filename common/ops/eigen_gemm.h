// Eigen's GEMM on row-major arrays of the compute type C: the kernels that matmul.cpp and
// linear.cpp call for FP64 operands (the references tests compare with) after checking them.
// FP32 GEMMs run on fma_gemm.h's kernels, whose bits do not follow the vector width; the float
// instantiations stay for bench_gemm, which times them side by side. They are a translation unit of their own, eigen_gemm.cpp,
// because Eigen's product templates are the most expensive code of the project to compile
// (tens of seconds at -O2; several times that under AddressSanitizer + UBSan), and a sanitizer
// build compiles that unit without instrumentation (common/ops/CMakeLists.txt): the bounds of
// every array passed here are established by the callers' checks, which are instrumented.
#pragma once

#include <cstdint>

namespace mixpar::ops::detail {

// Eigen cuts a GEMM's k dimension into panels of kc and sums each output element panel by
// panel, kc chosen from the L1 data cache that Eigen reads from CPUID (and the kernel's
// register block): about 288 with a 32 KiB L1 (AMD Zen, Skylake), 432 with 48 KiB (Ice Lake,
// Sapphire Rapids). The same binary would then sum a K = 1024 product in other groups, and
// print other digits, on the two CPUs. fix_eigen_blocking() sets the sizes Eigen plans with to
// fixed ones (kEigenCacheSizes: 32 KiB, 1 MiB, 8 MiB) once per process; every GEMM of
// mixpar_ops and the GPT layers calls it first. Only the summation order depends on it,
// never correctness; the cost is a few percent at most on a CPU with a larger L1.
inline constexpr std::ptrdiff_t kEigenCacheSizes[3] = {32 * 1024, 1024 * 1024, 8 * 1024 * 1024};
void fix_eigen_blocking();

// o = alpha * op(a) op(b) + beta * o, with op(a) [m, k], op(b) [k, n], o [m, n], all dense and
// row-major (a is [k, m] when ta, b is [n, k] when tb). beta == 0 never reads o. The output is
// cut into per-thread blocks of rows or columns (parallel_gemm.h).
template <class C>
void eigen_gemm(const C* a, const C* b, C* o, std::int64_t m, std::int64_t n, std::int64_t k,
                bool ta, bool tb, C alpha, C beta);

// y = x w + bias (broadcast over rows): x [m, k], w [k, n], bias [n], y [m, n], the bias added
// in C to each block as it leaves the GEMM (the fused epilogue of linear_forward).
template <class C>
void eigen_linear(const C* x, const C* w, const C* bias, C* y, std::int64_t m, std::int64_t n,
                  std::int64_t k);

extern template void eigen_gemm<float>(const float*, const float*, float*, std::int64_t,
                                       std::int64_t, std::int64_t, bool, bool, float, float);
extern template void eigen_gemm<double>(const double*, const double*, double*, std::int64_t,
                                        std::int64_t, std::int64_t, bool, bool, double, double);
extern template void eigen_linear<float>(const float*, const float*, const float*, float*,
                                         std::int64_t, std::int64_t, std::int64_t);
extern template void eigen_linear<double>(const double*, const double*, const double*, double*,
                                          std::int64_t, std::int64_t, std::int64_t);

}  // namespace mixpar::ops::detail
