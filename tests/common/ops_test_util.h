// Helpers for the ops, optim and MLP tests: seeded random tensors, an FP64 reference GEMM, and
// central finite differences. The references here share no code with common/ops.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "random/philox.h"
#include "tensor/tensor.h"

namespace mixpar::testing {

// Uniform [lo, hi) values from Philox(seed), rounded to dtype.
inline Tensor random_tensor(Shape shape, DType dtype, std::uint64_t seed, float lo = -1.0f,
                            float hi = 1.0f) {
  Tensor t = Tensor::empty(std::move(shape), dtype);
  Philox g(seed);
  fill_uniform(t, g, lo, hi);
  return t;
}

// Every element as a double (exact for f16, bf16, f32).
inline std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  convert(t.data(), t.dtype(), out.data(), DType::kF64, out.size());
  return out;
}

// out[i, j] = alpha * sum_k op(a)[i, k] op(b)[k, j] + beta * c[i, j], all in double, plus
// sum_k |alpha op(a)[i,k] op(b)[k,j]| + |beta c| in `magnitude` (the scale of rounding error).
struct GemmRef {
  std::vector<double> value, magnitude;
};
inline GemmRef reference_gemm(const std::vector<double>& a, const std::vector<double>& b,
                              const std::vector<double>& c, std::int64_t m, std::int64_t n,
                              std::int64_t k, bool ta, bool tb, double alpha, double beta) {
  GemmRef r{std::vector<double>(static_cast<std::size_t>(m * n)),
            std::vector<double>(static_cast<std::size_t>(m * n))};
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0, mag = 0;
      for (std::int64_t q = 0; q < k; ++q) {
        const double x = ta ? a[q * m + i] : a[i * k + q];
        const double y = tb ? b[j * k + q] : b[q * n + j];
        s += x * y;
        mag += std::fabs(alpha * x * y);
      }
      const double cij = beta != 0 ? c[i * n + j] : 0.0;
      r.value[i * n + j] = alpha * s + beta * cij;
      r.magnitude[i * n + j] = mag + std::fabs(beta * cij);
    }
  }
  return r;
}

// d f / d t[i] for every element of the f64 tensor t, by central differences with step h.
// f reads t (which is perturbed in place and restored).
inline std::vector<double> finite_difference(Tensor& t, const std::function<double()>& f,
                                             double h = 1e-6) {
  double* p = t.data_as<double>();
  std::vector<double> grad(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < grad.size(); ++i) {
    const double keep = p[i];
    p[i] = keep + h;
    const double up = f();
    p[i] = keep - h;
    const double down = f();
    p[i] = keep;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

// sum_i w_i y_i with fixed weights: a scalar whose gradient with respect to y is w.
inline double weighted_sum(const Tensor& y, const std::vector<double>& w) {
  const std::vector<double> v = to_doubles(y);
  double s = 0;
  for (std::size_t i = 0; i < v.size(); ++i) s += w[i] * v[i];
  return s;
}

}  // namespace mixpar::testing
