// Shared plumbing of the GPT layers (not part of the public API): tensors seen as raw arrays
// of the compute type C (float, or double in reference mode). A tensor already of type C is
// used in place (the FP32 fast path copies nothing); a 16-bit one is widened into a workspace
// charged to the ledger as MemCategory::kOther and rounded back once by commit().
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <string>

#include "numerics/formats.h"
#include "ops/checks.h"
#include "tensor/tensor.h"

// `MIXPAR_PARALLEL_FOR_IF(cond) for (...)`: an OpenMP parallel loop with static scheduling
// when cond holds; a plain loop in a build without OpenMP (no unknown-pragma warnings there).
#define MIXPAR_PRAGMA(x) _Pragma(#x)
#if defined(_OPENMP)
#define MIXPAR_PARALLEL_FOR_IF(cond) MIXPAR_PRAGMA(omp parallel for schedule(static) if (cond))
#else
#define MIXPAR_PARALLEL_FOR_IF(cond)
#endif

namespace mixpar::layers::detail {

// Read-only view of t as C values (converted once if t is not C).
template <class C>
class In {
 public:
  explicit In(const Tensor& t) {
    if (t.dtype() == dtype_of<C>) {
      ptr_ = static_cast<const C*>(t.data());
    } else {
      work_ = Tensor::empty(t.shape(), dtype_of<C>, MemCategory::kOther);
      convert(t.data(), t.dtype(), work_.data(), dtype_of<C>, static_cast<std::size_t>(t.numel()));
      ptr_ = static_cast<const C*>(work_.data());
    }
  }
  const C* data() const { return ptr_; }

 private:
  const C* ptr_ = nullptr;
  Tensor work_;
};

// Writable view of t as C values. `load`: start from t's values (read-modify-write).
// commit() rounds the C values into t once; nothing to do when t already holds C.
template <class C>
class Out {
 public:
  Out(const Tensor& t, bool load) : t_(t) {
    if (t.dtype() == dtype_of<C>) {
      ptr_ = static_cast<C*>(t.data());
    } else {
      work_ = Tensor::empty(t.shape(), dtype_of<C>, MemCategory::kOther);
      if (load) convert(t.data(), t.dtype(), work_.data(), dtype_of<C>, numel());
      ptr_ = static_cast<C*>(work_.data());
    }
  }
  C* data() { return ptr_; }
  void commit() {
    if (work_.defined()) convert(work_.data(), dtype_of<C>, t_.data(), t_.dtype(), numel());
  }

 private:
  std::size_t numel() const { return static_cast<std::size_t>(t_.numel()); }
  Tensor t_;
  C* ptr_ = nullptr;
  Tensor work_;
};

template <class C>
using ArrayMap = Eigen::Map<Eigen::Array<C, Eigen::Dynamic, 1>>;
template <class C>
using ConstArrayMap = Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>>;

// The compute type of a set of tensors: double when any is f64, else float.
template <class F>
decltype(auto) dispatch(std::initializer_list<const Tensor*> ts, F&& f) {
  if (ops::any_f64(ts)) return f(double{});
  return f(float{});
}

// Throws std::invalid_argument naming the layer and argument unless t has `numel` elements.
inline void check_numel(const Tensor& t, std::int64_t numel, const char* op, const char* name) {
  if (t.numel() != numel) {
    throw std::invalid_argument(std::string(op) + ": '" + name + "' has shape " +
                                shape_str(t.shape()) + " (" + std::to_string(t.numel()) +
                                " elements), expected " + std::to_string(numel) + " elements");
  }
}

// Below this many elements of work a layer runs on one thread: starting and joining a team
// (microseconds) would cost more than it saves, and tiny models run thousands of calls.
inline constexpr std::int64_t kParallelMinWork = 32768;

// Block size of the threaded elementwise loops: large enough that one block amortises the
// scheduling, small enough that 2-16 threads all get work on a [B*T, 4C] tensor.
inline constexpr std::int64_t kElementBlock = 16384;

}  // namespace mixpar::layers::detail
