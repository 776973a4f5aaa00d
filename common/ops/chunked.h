// Elementwise kernels over tensors of any float dtype, in chunks of kChunk elements: each
// chunk is read as the compute type C (float, or double in reference mode) and results are
// rounded once into the output's dtype. Same-dtype tensors are used in place (no copy); the
// others go through a stack buffer, so elementwise ops allocate nothing.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "numerics/formats.h"
#include "ops/convert16.h"
#include "ops/checks.h"
#include "tensor/tensor.h"

namespace mixpar::ops {

inline constexpr std::int64_t kChunk = 1024;

// Calls body(begin, n) for consecutive chunks covering [0, total).
template <class F> void for_chunks(std::int64_t total, F&& body) {
  for (std::int64_t begin = 0; begin < total; begin += kChunk) {
    body(begin, std::min(kChunk, total - begin));
  }
}

// Below this many elements an elementwise pass stays on one thread (thread start-up costs more).
inline constexpr std::int64_t kParallelMinElements = std::int64_t{1} << 16;

// Calls range(first, last) for up to one range of whole chunks per OpenMP thread, covering
// [0, total); in parallel for large tensors outside any enclosing parallel region. Only for
// elementwise work: each element's result must not depend on how [0, total) is split.
template <class F> void parallel_for_chunk_ranges(std::int64_t total, F&& range) {
#if defined(_OPENMP)
  const std::int64_t chunks = (total + kChunk - 1) / kChunk;
  const std::int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const std::int64_t parts = std::min(threads, chunks);
  if (parts > 1 && total >= kParallelMinElements) {
#pragma omp parallel for schedule(static) num_threads(static_cast<int>(parts))
    for (std::int64_t p = 0; p < parts; ++p) {
      range(chunks * p / parts * kChunk, std::min(total, chunks * (p + 1) / parts * kChunk));
    }
    return;
  }
#endif
  range(std::int64_t{0}, total);
}

// Runs f(C{}) with C = double when `f64` (reference mode), else C = float.
template <class F> decltype(auto) with_compute_type(bool f64, F&& f) {
  if (f64) return f(double{});
  return f(float{});
}

// Flat elements [begin, begin + n) of t as C values (n <= kChunk).
template <class C> class ChunkReader {
 public:
  const C* read(const Tensor& t, std::int64_t begin, std::int64_t n) {
    const char* src = static_cast<const char*>(t.data()) +
                      static_cast<std::size_t>(begin) * dtype_size(t.dtype());
    if (t.dtype() == dtype_of<C>) return reinterpret_cast<const C*>(src);
    convert16(src, t.dtype(), buf_.data(), dtype_of<C>, static_cast<std::size_t>(n));
    return buf_.data();
  }

 private:
  std::array<C, kChunk> buf_;
};

// A writable window of C values on flat elements [begin, begin + n) of t. commit() rounds the
// window into t's dtype (nothing to do when t already holds C). `load` fills the window with
// t's current values first (read-modify-write, e.g. an optimizer updating a parameter).
template <class C> class ChunkWriter {
 public:
  C* open(const Tensor& t, std::int64_t begin, std::int64_t n, bool load = false) {
    dst_ = static_cast<char*>(t.data()) + static_cast<std::size_t>(begin) * dtype_size(t.dtype());
    dtype_ = t.dtype();
    n_ = static_cast<std::size_t>(n);
    if (dtype_ == dtype_of<C>) return reinterpret_cast<C*>(dst_);
    if (load) convert16(dst_, dtype_, buf_.data(), dtype_of<C>, n_);
    return buf_.data();
  }
  void commit() {
    if (dtype_ != dtype_of<C>) convert16(buf_.data(), dtype_of<C>, dst_, dtype_, n_);
  }

 private:
  std::array<C, kChunk> buf_;
  char* dst_ = nullptr;
  DType dtype_ = DType::kF32;
  std::size_t n_ = 0;
};

// The names an elementwise op gives its operands in its error messages: {"a", "b", "out"}.
struct OperandNames {
  const char* a;
  const char* b;
  const char* out;
};

// out[i] = f(a[i], b[i]) for any dtypes, computed as C (double when any operand is f64) and
// rounded once into out's dtype; out may be a or b. Every operand is checked, and b and out
// must have a's number of elements (errors name them as `names` does).
template <class F>
void binary_elementwise(const char* op, OperandNames names, const Tensor& a, const Tensor& b,
                        Tensor& out, F f) {
  check_operand(a, op, names.a);
  check_operand(b, op, names.b);
  check_operand(out, op, names.out);
  check_same_numel(b, a, op, names.b, names.a);
  check_same_numel(out, a, op, names.out, names.a);
  with_compute_type(any_f64({&a, &b, &out}), [&](auto tag) {
    using C = decltype(tag);
    ChunkReader<C> ra, rb;
    ChunkWriter<C> wo;
    for_chunks(a.numel(), [&](std::int64_t begin, std::int64_t n) {
      const C* pa = ra.read(a, begin, n);
      const C* pb = rb.read(b, begin, n);
      C* po = wo.open(out, begin, n);
      for (std::int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
      wo.commit();
    });
  });
}

}  // namespace mixpar::ops
