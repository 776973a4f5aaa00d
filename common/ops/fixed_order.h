// Fixed-order GEMMs for the lessons. Eigen's GEMM sums each output element in an order that
// depends on its kernel (the vector width of the ISA it was compiled for), its cache blocking
// (the cache sizes the CPU reports) and the rows each thread takes (parallel_gemm.h): the same
// product can differ in its last bits from one machine, or one thread count, to the next. A
// training run of chapters 2-4 turns such a difference into other digits a few steps later.
// Inside a FixedOrderScope every GEMM of mixpar_ops (matmul, linear_forward and the bias
// gradient) sums in one order instead: output element (i, j) = sum over k = 0, 1, ..., K-1 of
// a_ik b_kj, each product and each addition an FP32 operation rounded to nearest (the project
// compiles mixpar_ops with -ffp-contract=off, so no fused multiply-add changes a rounding), the
// result rounded once into the output's dtype. The loops are vectorised across j only, which
// leaves every element's order alone: the result is the same on any x86-64 CPU, ISA and
// thread count. It is several times slower than Eigen on the lessons' small layers, and not
// meant for anything larger.
#pragma once

#include "tensor/tensor.h"

namespace mixpar::ops {

// While any scope is alive (in any thread of the process: the ranks of chapter 4's lesson are
// threads), the GEMMs run in fixed order. Scopes nest.
class FixedOrderScope {
 public:
  FixedOrderScope();
  ~FixedOrderScope();
  FixedOrderScope(const FixedOrderScope&) = delete;
  FixedOrderScope& operator=(const FixedOrderScope&) = delete;
};

bool fixed_order_active();

namespace detail {
// out = alpha * op(a) op(b) (+ bias[j] on every row when bias is not null) + beta * out, in
// the fixed order above. Arguments are checked by the callers (matmul, linear_forward).
void gemm_fixed_order(const Tensor& a, const Tensor& b, const Tensor* bias, Tensor& out, bool ta,
                      bool tb, float alpha, float beta);
// db [N] (+)= sum over the rows of dy [B, N], row 0 first.
void bias_grad_fixed_order(const Tensor& dy, Tensor& db, bool accumulate);
}  // namespace detail

}  // namespace mixpar::ops
