// GEMM: FP32 accumulation on the tensors' buffers (no copy of f32 operands) by the FMA-chain
// kernels (fma_gemm.h: the same bits on every CPU, the fastest kernel the CPU has), FP64
// references by Eigen (eigen_gemm.h), oneDNN for 16-bit operands where the CPU has 16-bit dot
// products (onednn_matmul.h), a plain triple loop for the FP16-accumulation lesson.
#include "ops/matmul.h"

#include <stdexcept>
#include <string>
#include <type_traits>

#include "ops/checks.h"
#include "ops/eigen_gemm.h"
#include "ops/fixed_order.h"
#include "ops/fma_gemm.h"
#include "ops/matrix_view.h"
#include "ops/onednn_matmul.h"
#include "ops/op_profile.h"

namespace mixpar::ops {

std::string_view accumulation_name(Accumulation acc) {
  return acc == Accumulation::kFP16 ? "fp16" : "fp32";
}

namespace {

struct GemmDims {
  std::int64_t m, n, k;
};

GemmDims check_matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool ta, bool tb) {
  check_operand(a, "matmul", "a");
  check_operand(b, "matmul", "b");
  check_operand(out, "matmul", "out");
  check_2d(a, "matmul", "a");
  check_2d(b, "matmul", "b");
  const GemmDims d{ta ? a.dim(1) : a.dim(0), tb ? b.dim(0) : b.dim(1), ta ? a.dim(0) : a.dim(1)};
  const std::int64_t kb = tb ? b.dim(1) : b.dim(0);
  if (kb != d.k) {
    throw std::invalid_argument("matmul: inner dimensions differ: op(a) is [" +
                                std::to_string(d.m) + ", " + std::to_string(d.k) + "], op(b) is [" +
                                std::to_string(kb) + ", " + std::to_string(d.n) + "]");
  }
  check_shape(out, {d.m, d.n}, "matmul", "out");
  check_no_overlap(out, a, "matmul", "out", "a");
  check_no_overlap(out, b, "matmul", "out", "b");
  return d;
}

// out = alpha * op(A) op(B) + beta * out in C arithmetic, one rounding into out's dtype: the
// operands as C arrays (in place when already C, widened once otherwise: matrix_view.h), the
// product by fma_gemm.h for FP32 and by Eigen (eigen_gemm.h) for FP64.
template <class C>
void gemm_values(const Tensor& a, const Tensor& b, Tensor& out, const GemmDims& d, bool ta,
                 bool tb, C alpha, C beta) {
  ValuesOut<C> result(out, beta != C(0));
  if constexpr (std::is_same_v<C, float>) {
    const Fp32GemmIn in_a(a), in_b(b);  // bf16 operands widened inside the kernels' packing
    detail::fma_gemm(in_a.data(), in_a.type(), in_b.data(), in_b.type(), nullptr, result.data(),
                     d.m, d.n, d.k, ta, tb, alpha, beta);
  } else {
    const ValuesIn<C> in_a(a), in_b(b);
    detail::eigen_gemm<C>(in_a.data(), in_b.data(), result.data(), d.m, d.n, d.k, ta, tb, alpha,
                          beta);
  }
  result.commit();
}

// The running sum is an FP16 number: acc = fp16(acc + a_ik * b_kj) after every term. The
// product and sum are formed in FP32 first (exact products for 16-bit inputs), so this is a
// double rounding that differs from a fused fp16 FMA only on rare ties: irrelevant here,
// where the lesson is that the sum stops growing once its ulp dwarfs the terms.
void gemm_fp16_accumulate(const Tensor& a, const Tensor& b, Tensor& out, const GemmDims& d,
                          bool ta, bool tb, float alpha, float beta) {
  const ValuesIn<float> in_a(a), in_b(b);
  const float* pa = in_a.data();
  const float* pb = in_b.data();
  ValuesOut<float> result(out, beta != 0.0f);
  float* po = result.data();
  for (std::int64_t i = 0; i < d.m; ++i) {
    for (std::int64_t j = 0; j < d.n; ++j) {
      float acc = 0.0f;
      for (std::int64_t k = 0; k < d.k; ++k) {
        const float x = ta ? pa[k * d.m + i] : pa[i * d.k + k];
        const float y = tb ? pb[j * d.k + k] : pb[k * d.n + j];
        acc = round_to(DType::kF16, acc + x * y);
      }
      float& o = po[i * d.n + j];
      o = beta == 0.0f ? alpha * acc : alpha * acc + beta * o;
    }
  }
  result.commit();
}

}  // namespace

void matmul(const Tensor& a, const Tensor& b, Tensor& out, bool trans_a, bool trans_b,
            Accumulation acc, float alpha, float beta) {
  const OpTimer timer("matmul");
  const GemmDims d = check_matmul(a, b, out, trans_a, trans_b);
  if (acc == Accumulation::kFP16) {
    gemm_fp16_accumulate(a, b, out, d, trans_a, trans_b, alpha, beta);
  } else if (fixed_order_active()) {
    detail::gemm_fixed_order(a, b, nullptr, out, trans_a, trans_b, alpha, beta);
  } else if (detail::onednn_matmul(a, b, out, trans_a, trans_b, alpha, beta)) {
    // 16-bit operands on the CPU's 16-bit units, where oneDNN has them (onednn_matmul.h)
  } else if (any_f64({&a, &b, &out})) {
    gemm_values<double>(a, b, out, d, trans_a, trans_b, alpha, beta);
  } else {
    gemm_values<float>(a, b, out, d, trans_a, trans_b, alpha, beta);
  }
}

}  // namespace mixpar::ops
