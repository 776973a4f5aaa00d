// Tensors as raw arrays of the compute type C (ValuesIn / ValuesOut, which the GPT layers use
// too), and 2-D tensors as Eigen row-major matrices of C, for GEMM and row-wise ops. A tensor
// already of type C is used in place (no copy: the fast FP32 path); a 16-bit one is widened
// into a workspace charged to the ledger as kOther, as a tensor core widens its operands;
// results are rounded once into the output tensor's dtype (commit(), store()). Both
// conversions run on the CPU's vector units, bit-identical to formats.h (convert16.h).
#pragma once

#include <Eigen/Core>
#include <optional>

#include "numerics/formats.h"
#include "ops/convert16.h"
#include "ops/fma_gemm.h"
#include "tensor/tensor.h"

namespace mixpar::ops {

template <class C>
using RowMatrix = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class C> using ConstMatrixMap = Eigen::Map<const RowMatrix<C>>;
template <class C> using MatrixMap = Eigen::Map<RowMatrix<C>>;

// rows x cols of a 2-D tensor (a 1-D tensor of n elements reads as 1 x n).
inline Eigen::Index view_rows(const Tensor& t) { return t.ndim() == 2 ? t.dim(0) : 1; }
inline Eigen::Index view_cols(const Tensor& t) { return t.ndim() == 2 ? t.dim(1) : t.numel(); }

// Read-only view of t as C values (converted once if t is not C).
template <class C> class ValuesIn {
 public:
  explicit ValuesIn(const Tensor& t) {
    if (t.dtype() == dtype_of<C>) {
      ptr_ = static_cast<const C*>(t.data());
    } else {
      work_ = Tensor::empty(t.shape(), dtype_of<C>, MemCategory::kOther);
      convert16(t.data(), t.dtype(), work_.data(), dtype_of<C>,
                static_cast<std::size_t>(t.numel()));
      ptr_ = static_cast<const C*>(work_.data());
    }
  }
  const C* data() const { return ptr_; }

 private:
  const C* ptr_ = nullptr;
  Tensor work_;  // widened copy, only for a tensor not already of type C
};

// An operand of an FP32 GEMM (fma_gemm.h): a bf16 tensor as it is (the kernels widen it while
// packing), any other as FP32 values (ValuesIn).
class Fp32GemmIn {
 public:
  explicit Fp32GemmIn(const Tensor& t) {
    if (t.dtype() == DType::kBF16) {
      ptr_ = t.data();
      type_ = GemmOperand::kBF16;
    } else {
      values_.emplace(t);
      ptr_ = values_->data();
    }
  }
  const void* data() const { return ptr_; }
  GemmOperand type() const { return type_; }

 private:
  std::optional<ValuesIn<float>> values_;
  const void* ptr_ = nullptr;
  GemmOperand type_ = GemmOperand::kF32;
};

// Writable view of t as C values. `load`: start from t's values (read-modify-write: beta != 0,
// accumulating gradients). commit() rounds the C values into t once (round-to-nearest-even of
// formats.h); nothing to do when t already holds C.
template <class C> class ValuesOut {
 public:
  ValuesOut(const Tensor& t, bool load) : t_(t) {
    if (t.dtype() == dtype_of<C>) {
      ptr_ = static_cast<C*>(t.data());
    } else {
      work_ = Tensor::empty(t.shape(), dtype_of<C>, MemCategory::kOther);
      if (load) convert16(t.data(), t.dtype(), work_.data(), dtype_of<C>, numel());
      ptr_ = static_cast<C*>(work_.data());
    }
  }
  C* data() { return ptr_; }
  void commit() {
    if (work_.defined()) convert16(work_.data(), dtype_of<C>, t_.data(), t_.dtype(), numel());
  }

 private:
  std::size_t numel() const { return static_cast<std::size_t>(t_.numel()); }
  Tensor t_;  // a handle sharing the output's storage
  C* ptr_ = nullptr;
  Tensor work_;
};

template <class C> class MatrixIn {
 public:
  explicit MatrixIn(const Tensor& t) : values_(t), rows_(view_rows(t)), cols_(view_cols(t)) {}
  ConstMatrixMap<C> map() const { return ConstMatrixMap<C>(values_.data(), rows_, cols_); }

 private:
  ValuesIn<C> values_;
  Eigen::Index rows_, cols_;
};

// `load`: start from the tensor's current values (beta != 0, accumulating gradients).
template <class C> class MatrixOut {
 public:
  MatrixOut(const Tensor& t, bool load)
      : values_(t, load), rows_(view_rows(t)), cols_(view_cols(t)) {}
  MatrixMap<C> map() { return MatrixMap<C>(values_.data(), rows_, cols_); }
  // Rounds the result into the output tensor (once: round-to-nearest-even of formats.h).
  void store() { values_.commit(); }

 private:
  ValuesOut<C> values_;
  Eigen::Index rows_, cols_;
};

}  // namespace mixpar::ops
