// Linear layer forward/backward built on matmul and the matrix views; the bias epilogue and
// the bias gradient use Eigen row broadcasts and column sums on the same views. 16-bit x and w
// go to oneDNN with the bias as its epilogue where the CPU multiplies 16-bit numbers itself.
#include "ops/linear.h"

#include <type_traits>
#include <vector>

#include "ops/checks.h"
#include "ops/chunked.h"
#include "ops/eigen_gemm.h"
#include "ops/fixed_order.h"
#include "ops/fma_gemm.h"
#include "ops/matrix_view.h"
#include "ops/onednn_matmul.h"
#include "ops/op_profile.h"
#include "ops/row_math.h"

namespace mixpar::ops {
namespace {

void check_bias(const Tensor& b, std::int64_t n, const char* op) {
  check_operand(b, op, "b");
  check_shape(b, {n}, op, "b");
}

// y = x w + b in C arithmetic, rounded once into y.
template <class C> void linear_fused(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  ValuesOut<C> result(y, false);
  const ValuesIn<C> in_b(b);
  if constexpr (std::is_same_v<C, float>) {  // the bias in the kernels' epilogue: fma_gemm.h
    const Fp32GemmIn in_x(x), in_w(w);      // bf16 x, w widened inside the kernels' packing
    detail::fma_gemm(in_x.data(), in_x.type(), in_w.data(), in_w.type(), in_b.data(),
                     result.data(), x.dim(0), w.dim(1), x.dim(1), false, false, 1.0f, 0.0f);
  } else {
    const ValuesIn<C> in_x(x), in_w(w);
    detail::eigen_linear<C>(in_x.data(), in_w.data(), in_b.data(), result.data(), x.dim(0),
                            w.dim(1), x.dim(1));
  }
  result.commit();
}

}  // namespace

void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y,
                    Accumulation acc) {
  const OpTimer timer("linear forward (GEMM + bias)");
  if (b == nullptr || acc == Accumulation::kFP16) {
    matmul(x, w, y, false, false, acc);  // checks x, w, y
    if (b != nullptr) bias_add(y, *b);
    return;
  }
  check_operand(x, "linear_forward", "x");
  check_operand(w, "linear_forward", "w");
  check_operand(y, "linear_forward", "y");
  check_2d(x, "linear_forward", "x");
  check_2d(w, "linear_forward", "w");
  check_shape(w, {x.dim(1), w.dim(1)}, "linear_forward", "w");
  check_shape(y, {x.dim(0), w.dim(1)}, "linear_forward", "y");
  check_bias(*b, w.dim(1), "linear_forward");
  check_no_overlap(y, x, "linear_forward", "y", "x");
  check_no_overlap(y, w, "linear_forward", "y", "w");
  if (fixed_order_active()) detail::gemm_fixed_order(x, w, b, y, false, false, 1.0f, 0.0f);
  else if (detail::onednn_linear(x, w, *b, y)) {
    // 16-bit x and w on the CPU's 16-bit units, the bias added in the GEMM's epilogue (the
    // same path as matmul's 16-bit products: onednn_matmul.h)
  } else if (any_f64({&x, &w, b, &y})) linear_fused<double>(x, w, *b, y);
  else linear_fused<float>(x, w, *b, y);
}

void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                     Tensor* db, bool accumulate) {
  const OpTimer timer("linear backward (GEMMs + bias grad)");
  if (dx != nullptr) matmul(dy, w, *dx, false, true);                         // dy w^T
  matmul(x, dy, dw, true, false, Accumulation::kFP32, 1.0f, accumulate ? 1.0f : 0.0f);  // x^T dy
  if (db != nullptr) bias_grad(dy, *db, accumulate);
}

void bias_add(Tensor& y, const Tensor& b) {
  const OpTimer timer("bias add");
  check_operand(y, "bias_add", "y");
  check_2d(y, "bias_add", "y");
  check_bias(b, y.dim(1), "bias_add");
  with_compute_type(any_f64({&y, &b}), [&](auto tag) {
    using C = decltype(tag);
    const MatrixIn<C> in_b(b);
    MatrixOut<C> result(y, true);
    result.map().rowwise() += in_b.map().row(0);
    result.store();
  });
}

void bias_grad(const Tensor& dy, Tensor& db, bool accumulate) {
  const OpTimer timer("bias grad");
  check_operand(dy, "bias_grad", "dy");
  check_operand(db, "bias_grad", "db");
  check_2d(dy, "bias_grad", "dy");
  check_shape(db, {dy.dim(1)}, "bias_grad", "db");
  if (fixed_order_active()) {
    detail::bias_grad_fixed_order(dy, db, accumulate);
    return;
  }
  with_compute_type(any_f64({&dy, &db}), [&](auto tag) {
    using C = decltype(tag);
    // Each column summed down the rows in order (ops/row_math.h): Eigen's colwise().sum()
    // splits the columns between packets and a scalar tail by the vector width and db's
    // alignment, so a bias at another offset would get other last bits.
    ValuesOut<C> result(db, accumulate);
    std::vector<C> scratch(static_cast<std::size_t>(dy.dim(1)));
    if constexpr (std::is_same_v<C, float>) {
      if (dy.dtype() == DType::kBF16) {  // widened a row at a time as it is summed: no copy
        column_sums_bf16(static_cast<const std::uint16_t*>(dy.data()), dy.dim(0), dy.dim(1),
                         result.data(), accumulate, scratch.data());
        result.commit();
        return;
      }
    }
    const ValuesIn<C> in_dy(dy);
    column_sums(in_dy.data(), dy.dim(0), dy.dim(1), result.data(), accumulate, scratch.data());
    result.commit();
  });
}

}  // namespace mixpar::ops
