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
#include "ops/matrix_view.h"
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

// Read-only and writable views of t as C values (ops/matrix_view.h): In converts once if t is
// not C; Out(t, load) starts from t's values when `load`, and commit() rounds into t once.
template <class C> using In = ops::ValuesIn<C>;
template <class C> using Out = ops::ValuesOut<C>;

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
