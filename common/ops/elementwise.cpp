// scale, axpy and add as chunked kernels (ops/chunked.h): in place on same-dtype buffers,
// through a stack buffer otherwise.
#include "ops/elementwise.h"

#include "ops/checks.h"
#include "ops/chunked.h"
#include "ops/op_profile.h"

namespace mixpar::ops {

void scale(Tensor& x, double s) {
  const OpTimer timer("scale / axpy / add");
  check_operand(x, "scale", "x");
  with_compute_type(any_f64({&x}), [&](auto tag) {
    using C = decltype(tag);
    const C sc = static_cast<C>(s);
    ChunkWriter<C> w;
    for_chunks(x.numel(), [&](std::int64_t begin, std::int64_t n) {
      C* p = w.open(x, begin, n, /*load=*/true);
      for (std::int64_t i = 0; i < n; ++i) p[i] *= sc;
      w.commit();
    });
  });
}

void axpy(double alpha, const Tensor& x, Tensor& y) {
  const OpTimer timer("scale / axpy / add");
  check_operand(x, "axpy", "x");
  check_operand(y, "axpy", "y");
  check_same_numel(y, x, "axpy", "y", "x");
  with_compute_type(any_f64({&x, &y}), [&](auto tag) {
    using C = decltype(tag);
    const C a = static_cast<C>(alpha);
    ChunkReader<C> rx;
    ChunkWriter<C> wy;
    for_chunks(x.numel(), [&](std::int64_t begin, std::int64_t n) {
      const C* px = rx.read(x, begin, n);
      C* py = wy.open(y, begin, n, /*load=*/true);
      for (std::int64_t i = 0; i < n; ++i) py[i] += a * px[i];
      wy.commit();
    });
  });
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const OpTimer timer("scale / axpy / add");
  binary_elementwise("add", {"a", "b", "out"}, a, b, out, [](auto x, auto y) { return x + y; });
}

}  // namespace mixpar::ops
