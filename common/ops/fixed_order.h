// Fixed-order GEMMs for the lessons. Inside a FixedOrderScope every GEMM of mixpar_ops
// (matmul, linear_forward and the bias gradient) sums in the textbook order: output element
// (i, j) = sum over k = 0, 1, ..., K-1 of a_ik b_kj, each product and each addition an FP32
// operation rounded to nearest (the project compiles mixpar_ops with -ffp-contract=off, so no
// fused multiply-add changes a rounding), the result rounded once into the output's dtype: the
// model of the error analyses chapters 2-4 quote, which a learner can redo by hand. The loops
// are vectorised across j only, which leaves every element's order alone: the result is the
// same on any x86-64 CPU, ISA and thread count, and the lessons' printed digits with it.
//
// The scope was first needed because Eigen's GEMM, which ran the FP32 products then, summed in
// an order that followed its kernel's vector width and cache blocking. The FP32 GEMM outside the
// scope (fma_gemm.h) now also sums in one order on every CPU, with fused multiply-adds, several
// times faster; the lessons keep the unfused order and the digits recorded with it.
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
