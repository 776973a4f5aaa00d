// 2-D tensors as Eigen row-major matrices of the compute type C, for GEMM and row-wise ops.
// A tensor already of type C is mapped in place (no copy: the fast FP32 path); a 16-bit one is
// widened into a workspace charged to the ledger as kOther, as a tensor core widens its
// operands; results are rounded once into the output tensor's dtype by store().
#pragma once

#include <Eigen/Core>

#include "numerics/formats.h"
#include "tensor/tensor.h"

namespace mixpar::ops {

template <class C>
using RowMatrix = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class C> using ConstMatrixMap = Eigen::Map<const RowMatrix<C>>;
template <class C> using MatrixMap = Eigen::Map<RowMatrix<C>>;

// rows x cols of a 2-D tensor (a 1-D tensor of n elements reads as 1 x n).
inline Eigen::Index view_rows(const Tensor& t) { return t.ndim() == 2 ? t.dim(0) : 1; }
inline Eigen::Index view_cols(const Tensor& t) { return t.ndim() == 2 ? t.dim(1) : t.numel(); }

template <class C> class MatrixIn {
 public:
  explicit MatrixIn(const Tensor& t) : rows_(view_rows(t)), cols_(view_cols(t)) {
    if (t.dtype() == dtype_of<C>) {
      ptr_ = static_cast<const C*>(t.data());
    } else {
      work_ = Tensor::empty(t.shape(), dtype_of<C>, MemCategory::kOther);
      convert(t.data(), t.dtype(), work_.data(), dtype_of<C>, static_cast<std::size_t>(t.numel()));
      ptr_ = static_cast<const C*>(work_.data());
    }
  }
  ConstMatrixMap<C> map() const { return ConstMatrixMap<C>(ptr_, rows_, cols_); }

 private:
  Eigen::Index rows_, cols_;
  const C* ptr_ = nullptr;
  Tensor work_;  // widened copy, only for a tensor not already of type C
};

// `load`: start from the tensor's current values (beta != 0, accumulating gradients).
template <class C> class MatrixOut {
 public:
  MatrixOut(const Tensor& t, bool load) : t_(t), rows_(view_rows(t)), cols_(view_cols(t)) {
    if (t.dtype() == dtype_of<C>) {
      ptr_ = static_cast<C*>(t.data());
    } else {
      work_ = Tensor::empty(t.shape(), dtype_of<C>, MemCategory::kOther);
      if (load) convert(t.data(), t.dtype(), work_.data(), dtype_of<C>, numel());
      ptr_ = static_cast<C*>(work_.data());
    }
  }
  MatrixMap<C> map() { return MatrixMap<C>(ptr_, rows_, cols_); }
  // Rounds the result into the output tensor (once: round-to-nearest-even of formats.h).
  void store() {
    if (work_.defined()) convert(work_.data(), dtype_of<C>, t_.data(), t_.dtype(), numel());
  }

 private:
  std::size_t numel() const { return static_cast<std::size_t>(rows_ * cols_); }
  Tensor t_;  // a handle sharing the output's storage
  Eigen::Index rows_, cols_;
  C* ptr_ = nullptr;
  Tensor work_;
};

}  // namespace mixpar::ops
