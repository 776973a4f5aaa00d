// Reductions as chunked loops (ops/chunked.h) with FP64 accumulators. Every element is widened
// exactly (16-bit and f32 values are all doubles), so counts and checks are exact.
#include "ops/reductions.h"

#include <algorithm>
#include <cmath>
#include <limits>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "ops/checks.h"
#include "ops/chunked.h"
#include "ops/op_profile.h"

namespace mixpar::ops {
namespace {

// Folds f(acc, x) over all elements of t, each element read as a double.
template <class Acc, class F> Acc fold(const char* op, const Tensor& t, Acc init, F f) {
  check_operand(t, op, "t");
  ChunkReader<double> reader;
  Acc acc = init;
  for_chunks(t.numel(), [&](std::int64_t begin, std::int64_t n) {
    const double* p = reader.read(t, begin, n);
    for (std::int64_t i = 0; i < n; ++i) acc = f(acc, p[i]);
  });
  return acc;
}

}  // namespace

double sum(const Tensor& t) {
  const OpTimer timer("reductions (sums, norms, inf checks)");
  return fold("sum", t, 0.0, [](double a, double x) { return a + x; });
}

double sum_of_squares(const Tensor& t) {
  const OpTimer timer("reductions (sums, norms, inf checks)");
  return fold("sum_of_squares", t, 0.0, [](double a, double x) { return a + x * x; });
}

std::vector<double> sums_of_squares(std::span<const Tensor> ts) {
  const OpTimer timer("reductions (sums, norms, inf checks)");
  std::vector<double> out(ts.size());
  std::int64_t total = 0;
  for (const Tensor& t : ts) {
    check_operand(t, "sums_of_squares", "t");
    total += t.numel();
  }
  const auto n = static_cast<std::int64_t>(ts.size());
  auto one = [&](std::int64_t i) {
    out[static_cast<std::size_t>(i)] =
        fold("sums_of_squares", ts[static_cast<std::size_t>(i)], 0.0,
             [](double a, double x) { return a + x * x; });
  };
#if defined(_OPENMP)
  if (n > 1 && total >= kParallelMinElements && !omp_in_parallel() && omp_get_max_threads() > 1) {
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < n; ++i) one(i);
    return out;
  }
#endif
  (void)total;  // a build without OpenMP has nothing to decide with it
  for (std::int64_t i = 0; i < n; ++i) one(i);
  return out;
}

double max_abs(const Tensor& t) {
  const OpTimer timer("reductions (sums, norms, inf checks)");
  return fold("max_abs", t, 0.0, [](double a, double x) {
    if (std::isnan(a) || std::isnan(x)) return std::numeric_limits<double>::quiet_NaN();
    return std::max(a, std::fabs(x));
  });
}

bool has_inf_or_nan(const Tensor& t) { return count_nonfinite(t) > 0; }

std::int64_t count_zeros(const Tensor& t) {
  const OpTimer timer("reductions (sums, norms, inf checks)");
  return fold("count_zeros", t, std::int64_t{0},
              [](std::int64_t a, double x) { return a + (x == 0.0 ? 1 : 0); });
}

std::int64_t count_nonfinite(const Tensor& t) {
  const OpTimer timer("reductions (sums, norms, inf checks)");
  return fold("count_nonfinite", t, std::int64_t{0},
              [](std::int64_t a, double x) { return a + (std::isfinite(x) ? 0 : 1); });
}

}  // namespace mixpar::ops
