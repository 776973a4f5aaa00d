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

#include "model/gpt_params.h"
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

// Unit roundoff u of dt (half an ulp of 1): 2^-24 f32, 2^-11 f16, 2^-8 bf16.
inline double unit_roundoff(DType dt) {
  switch (dt) {
    case DType::kF32: return std::ldexp(1.0, -24);
    case DType::kF16: return std::ldexp(1.0, -11);
    case DType::kBF16: return std::ldexp(1.0, -8);
    default: return std::ldexp(1.0, -53);
  }
}

// Two FP32 evaluations of one sum of n terms, in different orders (or one with FMAs), are
// each within gamma_{n+2} ~ (n + 2) u32 of the exact sum in units of sum |terms| = magnitude
// (Higham, "Accuracy and Stability of Numerical Algorithms", 3.1; the +2 covers a scale and a
// bias), then each rounds once into dt: they differ by at most
//   atol 2 (n + 2) u32 magnitude,  rtol 2 u(dt)
// the bound the CPU's GEMM tests use (ops_matmul_test.cpp). With all_close's per-element
// scale, pass magnitude 1 and the per-element sums |terms| as the scale.
inline Tolerance sum_tolerance(DType dt, std::int64_t n, double magnitude = 1.0) {
  return {2.0 * static_cast<double>(n + 2) * unit_roundoff(DType::kF32) * magnitude,
          2.0 * unit_roundoff(dt)};
}

// A log-sum-exp over n scores, each a dot product of D terms scaled by 1/sqrt(D), computed in
// FP32 (flash attention's online softmax over `tiles` key tiles) against FP64: each score errs
// by the dot's gamma_D D^-1/2 sum|q_d k_d| <= gamma_D D^{1/2} max|q| max|k|, which shifts the
// lse by as much; the running sum errs by (n + 2 tiles + 2) u32 relative (each tile's
// rescale adds an exp and a multiply), the same in absolute terms after the log; the final
// m + log(l) rounds once more (2 u32 of |lse|).
inline Tolerance lse_tolerance(std::int64_t D, std::int64_t n, std::int64_t tiles,
                               double max_q = 1.0, double max_k = 1.0) {
  const double u = unit_roundoff(DType::kF32);
  const double dot = static_cast<double>(D + 2) * u * std::sqrt(static_cast<double>(D)) * max_q *
                     max_k;
  return {dot + static_cast<double>(n + 2 * tiles + 2) * u, 2.0 * u};
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

// The GPU GPT tests' model and batch: two blocks, small enough for a CPU reference in
// milliseconds, with a sequence (33) that is not a multiple of any kernel's tile.
inline constexpr std::int64_t kGptBatch = 2, kGptSeq = 33;
inline GptConfig small_gpt_config() {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 128;
  c.n_positions = 64;
  c.vocab_size = 300;
  return c;
}
// kGptBatch x kGptSeq token ids in [0, 300) from a linear congruential sequence: one per
// (seed, salt), so that each test file draws its own.
inline std::vector<std::int32_t> gpt_token_ids(std::uint32_t seed, std::uint32_t salt) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(kGptBatch * kGptSeq));
  std::uint32_t x = seed * 2654435761u + salt;
  for (std::int32_t& id : v) {
    x = x * 1664525u + 1013904223u;
    id = static_cast<std::int32_t>((x >> 8) % 300);
  }
  return v;
}

}  // namespace mixpar::cuda_testing
