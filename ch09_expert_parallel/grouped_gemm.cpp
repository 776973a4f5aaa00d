#include "ch09_expert_parallel/grouped_gemm.h"

#include <stdexcept>
#include <string>

#include "ops/fma_gemm.h"
#include "ops/linear.h"

namespace mixpar::ch09 {
namespace {

// x and w FP32 (the FMA kernels), or both of one 16-bit dtype (ops::linear, group by group).
bool check(const Tensor& x, const Tensor& w, std::span<const std::int64_t> offsets,
           const char* what) {
  const bool sixteen = x.dtype() == w.dtype() &&
                       (x.dtype() == DType::kBF16 || x.dtype() == DType::kF16);
  for (const Tensor* t : {&x, &w}) {
    if ((t->dtype() != DType::kF32 && !sixteen) || !t->is_cpu()) {
      throw std::invalid_argument(std::string(what) +
                                  ": CPU tensors, FP32 or both of one 16-bit dtype");
    }
  }
  if (w.ndim() != 3 || static_cast<std::int64_t>(offsets.size()) != w.dim(0) + 1 ||
      offsets.back() != x.dim(0) || x.dim(1) != w.dim(1)) {
    throw std::invalid_argument(std::string(what) + ": x " + shape_str(x.shape()) + ", w " +
                                shape_str(w.shape()) + " and " + std::to_string(offsets.size()) +
                                " offsets do not fit");
  }
  return sixteen;
}

// Group g's weight [in, out] and bias [out].
Tensor weight_of(const Tensor& w, std::int64_t g) {
  const std::int64_t in = w.dim(1), out = w.dim(2);
  return w.flat_slice(g * in * out, in * out).view({in, out});
}
Tensor bias_of(const Tensor& b, std::int64_t g, std::int64_t out) {
  return b.flat_slice(g * out, out);
}

const float* at(const Tensor& t, std::int64_t elements) { return t.data_as<float>() + elements; }
float* at(Tensor& t, std::int64_t elements) { return t.data_as<float>() + elements; }

}  // namespace

void grouped_linear_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                            std::span<const std::int64_t> offsets, Tensor& y) {
  const bool sixteen = check(x, w, offsets, "grouped_linear_forward");
  const std::int64_t in = w.dim(1), out = w.dim(2);
  for (std::int64_t g = 0; g < w.dim(0); ++g) {
    const std::int64_t r0 = offsets[std::size_t(g)], n = offsets[std::size_t(g) + 1] - r0;
    if (n == 0) continue;
    if (sixteen) {
      const Tensor bg = bias_of(b, g, out);
      Tensor yg = y.rows(r0, n);
      ops::linear_forward(x.rows(r0, n), weight_of(w, g), &bg, yg);
      continue;
    }
    // ops::linear_forward's FP32 path: the bias in the kernels' epilogue, one rounding.
    ops::detail::fma_gemm(at(x, r0 * in), at(w, g * in * out), at(b, g * out), at(y, r0 * out),
                          n, out, in, false, false, 1.0f, 0.0f);
  }
}

void grouped_linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                             Tensor& dw, Tensor& db, std::span<const std::int64_t> offsets,
                             bool accumulate) {
  const bool sixteen = check(x, w, offsets, "grouped_linear_backward");
  const std::int64_t in = w.dim(1), out = w.dim(2);
  for (std::int64_t g = 0; g < w.dim(0); ++g) {
    const std::int64_t r0 = offsets[std::size_t(g)], n = offsets[std::size_t(g) + 1] - r0;
    Tensor dw_g = dw.flat_slice(g * in * out, in * out), db_g = db.flat_slice(g * out, out);
    if (n == 0) {
      if (!accumulate) dw_g.zero(), db_g.zero();
      continue;
    }
    if (sixteen) {
      Tensor dx_g = dx != nullptr ? dx->rows(r0, n) : Tensor();
      Tensor dw_view = dw_g.view({in, out});
      ops::linear_backward(x.rows(r0, n), weight_of(w, g), dy.rows(r0, n),
                           dx != nullptr ? &dx_g : nullptr, dw_view, &db_g, accumulate);
      continue;
    }
    // ops::linear_backward's products: dx = dy w^T, dw (+)= x^T dy (common/ops/matmul.cpp).
    if (dx != nullptr) {
      ops::detail::fma_gemm(at(dy, r0 * out), at(w, g * in * out), nullptr, at(*dx, r0 * in), n,
                            in, out, false, true, 1.0f, 0.0f);
    }
    ops::detail::fma_gemm(at(x, r0 * in), at(dy, r0 * out), nullptr, dw_g.data_as<float>(), in,
                          out, n, true, false, 1.0f, accumulate ? 1.0f : 0.0f);
    ops::bias_grad(dy.rows(r0, n), db_g, accumulate);
  }
}

}  // namespace mixpar::ch09
