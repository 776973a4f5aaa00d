// Column- and row-parallel linear layers: common/ops' linear with f and g around it.
#include <stdexcept>
#include <string>

#include "ch06_tensor_parallel/column_parallel_linear.h"
#include "ch06_tensor_parallel/conjugate_ops.h"
#include "ch06_tensor_parallel/row_parallel_linear.h"
#include "ops/linear.h"

namespace mixpar::ch06 {

void ColumnParallelLinear::forward(const Tensor& x, Tensor& y) const {
  ops::linear_forward(f_forward(x), w, &b, y);
}

void ColumnParallelLinear::backward(Communicator& tp, const Tensor& x, const Tensor& dy,
                                    Tensor* dx) {
  ops::linear_backward(x, w, dy, dx, dw, &db);
  if (dx != nullptr) f_backward(tp, *dx);
}

void RowParallelLinear::forward(Communicator& tp, const Tensor& x_r, Tensor& y) const {
  ops::linear_forward(x_r, w, nullptr, y);
  g_forward(tp, y);
  ops::bias_add(y, b);  // once, after the reduction
}

void RowParallelLinear::backward(const Tensor& x_r, const Tensor& dy, Tensor* dx_r) {
  ops::linear_backward(x_r, w, g_backward(dy), dx_r, dw, &db);
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
