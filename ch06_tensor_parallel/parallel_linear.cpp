// Column- and row-parallel linear layers: common/ops' linear with f and g around it (f-bar
// and g-bar with sequence parallelism), the operators as TpCollectives runs them over the tp
// group (conjugate_ops.h, counted by region).
#include <stdexcept>
#include <string>

#include "ch06_tensor_parallel/column_parallel_linear.h"
#include "ch06_tensor_parallel/conjugate_ops.h"
#include "ch06_tensor_parallel/row_parallel_linear.h"
#include "ch06_tensor_parallel/tp_collectives.h"
#include "ops/linear.h"
#include "ops/matmul.h"

namespace mixpar::ch06 {
namespace {

// This rank's local products, through the layer's GEMM seam when it has one (--dtype fp8: the
// shard and its input cast to FP8, ch03_master_weights/fp8_linear.h), else common/ops'.
// y = x w (+ b when b is given).
void local_forward(const GemmSite& s, const Tensor& x, const Tensor& w, const Tensor* b,
                   Tensor& y) {
  if (s.gemms == nullptr) {
    ops::linear_forward(x, w, b, y);
  } else {
    s.gemms->forward(s.layer, s.which, x, w, b != nullptr ? *b : Tensor(), y);
  }
}

// dx = dy w^T.
void local_backward_input(const GemmSite& s, const Tensor& dy, const Tensor& w, Tensor& dx) {
  if (s.gemms == nullptr) {
    ops::matmul(dy, w, dx, false, true);
  } else {
    s.gemms->backward_input(s.layer, s.which, dy, w, dx);
  }
}

// dx = dy w^T when dx is given; dw (+)= x^T dy; db (+)= sum_rows(dy) when db is given.
void local_backward(const GemmSite& s, const Tensor& x, const Tensor& w, const Tensor& dy,
                    Tensor* dx, Tensor& dw, Tensor* db, bool accumulate) {
  if (s.gemms == nullptr) {
    ops::linear_backward(x, w, dy, dx, dw, db, accumulate);
    return;
  }
  if (dx != nullptr) s.gemms->backward_input(s.layer, s.which, dy, w, *dx);
  s.gemms->backward_weight(s.layer, s.which, x, dy, dw, accumulate);
  if (db != nullptr) ops::bias_grad(dy, *db, accumulate);
}

}  // namespace

void ColumnParallelLinear::forward(const Tensor& x, Tensor& y) const {
  local_forward(site, f_forward(x), w, &b, y);
}

void ColumnParallelLinear::backward(TpCollectives& tp, const Tensor& x, const Tensor& dy,
                                    Tensor* dx, bool accumulate) {
  if (dx != nullptr) backward_input(tp, dy, *dx);
  backward_weight(x, dy, accumulate);
}

void ColumnParallelLinear::backward_input(TpCollectives& tp, const Tensor& dy,
                                          Tensor& dx) const {
  local_backward_input(site, dy, w, dx);  // this rank's share: its columns' dy times their w^T
  tp.f_backward(dx);                    // the shares summed
}

void ColumnParallelLinear::backward_weight(const Tensor& x, const Tensor& dy, bool accumulate) {
  local_backward(site, x, w, dy, nullptr, dw, &db, accumulate);  // dx: backward_input's
}

void ColumnParallelLinear::forward_sp(TpCollectives& tp, const Tensor& x_rows, Tensor& x_full,
                                      Tensor& y) const {
  tp.f_bar_forward(x_rows, x_full);
  local_forward(site, x_full, w, &b, y);
}

void ColumnParallelLinear::backward_sp(TpCollectives& tp, const Tensor& x_rows, Tensor& x_full,
                                       const Tensor& dy, Tensor& dx_full, Tensor& dx_rows,
                                       bool accumulate) {
  tp.f_bar_forward(x_rows, x_full, "block backward re-gather");
  local_backward(site, x_full, w, dy, &dx_full, dw, &db, accumulate);
  tp.f_bar_backward(dx_full, dx_rows);
}

void RowParallelLinear::forward(TpCollectives& tp, const Tensor& x_r, Tensor& y) const {
  local_forward(site, x_r, w, nullptr, y);
  tp.g_forward(y);
  ops::bias_add(y, b);  // once, after the reduction
}

void RowParallelLinear::backward(const Tensor& x_r, const Tensor& dy, Tensor* dx_r,
                                 bool accumulate) {
  if (dx_r != nullptr) backward_input(dy, *dx_r);
  backward_weight(x_r, dy, accumulate);
}

void RowParallelLinear::backward_input(const Tensor& dy, Tensor& dx_r) const {
  local_backward_input(site, g_backward(dy), w, dx_r);
}

void RowParallelLinear::backward_weight(const Tensor& x_r, const Tensor& dy, bool accumulate) {
  local_backward(site, x_r, w, g_backward(dy), nullptr, dw, &db, accumulate);
}

void RowParallelLinear::forward_sp(TpCollectives& tp, const Tensor& x_r, Tensor& y_full,
                                   Tensor& y_rows) const {
  local_forward(site, x_r, w, nullptr, y_full);
  tp.g_bar_forward(y_full, y_rows);
  ops::bias_add(y_rows, b);  // once, on this rank's rows of the sum
}

void RowParallelLinear::backward_sp(TpCollectives& tp, const Tensor& x_r, const Tensor& dy_rows,
                                    Tensor& dy_full, Tensor& dx_r, bool accumulate) {
  ops::bias_grad(dy_rows, db);  // this rank's rows' share of the bias gradient
  tp.g_bar_backward(dy_rows, dy_full);
  local_backward(site, x_r, w, dy_full, &dx_r, dw, nullptr, accumulate);
}

Tensor column_block(const Tensor& full, int rank, int size) {
  const std::int64_t cols = full.dim(full.ndim() - 1);
  if (size < 1 || cols % size != 0) {
    throw std::invalid_argument("column_block: " + std::to_string(cols) +
                                " columns do not split into " + std::to_string(size));
  }
  const std::int64_t rows = full.numel() / cols, part = cols / size;
  Shape shape = full.shape();
  shape.back() = part;
  Tensor out = Tensor::empty(shape, full.dtype(), full.category());
  for (std::int64_t r = 0; r < rows; ++r) {
    Tensor dst = out.flat_slice(r * part, part);
    dst.copy_from(full.flat_slice(r * cols + rank * part, part));
  }
  return out;
}

Tensor row_block(const Tensor& full, int rank, int size) {
  const std::int64_t rows = full.dim(0);
  if (size < 1 || rows % size != 0) {
    throw std::invalid_argument("row_block: " + std::to_string(rows) +
                                " rows do not split into " + std::to_string(size));
  }
  const std::int64_t per = full.numel() / size;
  Shape shape = full.shape();
  shape.front() = rows / size;
  Tensor out = Tensor::empty(shape, full.dtype(), full.category());
  out.copy_from(full.flat_slice(rank * per, per));
  return out;
}

}  // namespace mixpar::ch06
