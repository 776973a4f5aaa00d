// Helpers of the GPU engine's tests: the comparison every GPU-vs-CPU test uses (absolute plus
// relative tolerance, failing on NaN, naming the worst element and both values and how many
// elements failed), the tolerances per dtype, and random CPU inputs that are never all zeros.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "ops_test_util.h"
#include "tensor/tensor.h"

namespace mixpar::cuda_testing {

struct Tolerance {
  double atol = 0;  // absolute part
  double rtol = 0;  // relative part, times |want|
};

// Results computed in FP32 from the same inputs and rounded once into dt, on CPU and GPU
// alike, differ by FP32 noise (sums in another order, another exp) and then by at most a
// rounding flip of dt, which is relative to the value. `scale` is the magnitude of the terms
// the FP32 arithmetic combines: the noise, hence the absolute part, is relative to it.
//   atol 4e-6 scale;  rtol  f32 2e-5,  f16 2e-3 (2 ulps),  bf16 1.6e-2 (2 ulps)
inline Tolerance tolerance_for(DType dt, double scale = 1.0) {
  switch (dt) {
    case DType::kF32: return {4e-6 * scale, 2e-5};
    case DType::kF16: return {4e-6 * scale, 2e-3};
    default: return {4e-6 * scale, 1.6e-2};
  }
}

// Bit-identical: the GPU performs the CPU's FP32 operations in the CPU's order.
inline constexpr Tolerance kExact{0, 0};

inline double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::fmax(m, std::fabs(static_cast<double>(x)));
  return m;
}

// got[i] must be within atol + rtol |want[i]| of want[i] for every i (atol scaled by
// scale[i] when `scale` is given: per-element error bounds such as a GEMM's sum |a||b|).
inline ::testing::AssertionResult all_close(const std::vector<float>& got,
                                            const std::vector<float>& want, Tolerance tol,
                                            const std::string& what,
                                            const std::vector<double>* scale = nullptr) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << what << ": " << got.size() << " values, expected "
                                         << want.size();
  }
  std::size_t failures = 0, worst = 0;
  double worst_ratio = -1;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    const double atol = scale ? tol.atol * (*scale)[i] : tol.atol;
    const double bound = atol + tol.rtol * std::fabs(w);
    const double err = std::fabs(g - w);
    // NaN never passes (err is NaN); an exact match always does (also inf == inf).
    const bool ok = g == w || err <= bound;
    const double ratio = std::isnan(err) ? INFINITY : err / (bound > 0 ? bound : 1e-300);
    if (!ok) ++failures;
    if (!ok && ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(9);
  os << what << ": " << failures << " of " << got.size() << " elements outside atol "
     << tol.atol << (scale ? " (scaled per element)" : "") << " + rtol " << tol.rtol
     << "; worst at index " << worst << ": got " << got[worst] << ", want " << want[worst]
     << " (error " << std::fabs(static_cast<double>(got[worst]) - want[worst]) << ")";
  return ::testing::AssertionFailure() << os.str();
}

// Uniform [lo, hi) in dtype, from Philox(seed): never zeros, different for every seed.
inline Tensor random_host(Shape shape, DType dt, std::uint64_t seed, float lo = -1.0f,
                          float hi = 1.0f) {
  return mixpar::testing::random_tensor(std::move(shape), dt, seed, lo, hi);
}

}  // namespace mixpar::cuda_testing
