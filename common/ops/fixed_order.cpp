// The fixed-order GEMM of fixed_order.h: operands widened once into row-major op(a) [M, K] and
// op(b) [K, N] arrays of the compute type, then i-k-j loops whose inner loop runs over j.
#include "ops/fixed_order.h"

#include <atomic>
#include <cstdint>
#include <vector>

#include "ops/checks.h"
#include "ops/matrix_view.h"
#include "ops/row_math.h"

namespace mixpar::ops {
namespace {

std::atomic<int> g_scopes{0};

// op(t) as a row-major [rows, cols] array of C (t is [rows, cols], or [cols, rows] when trans).
template <class C> std::vector<C> widened(const Tensor& t, bool trans) {
  const ValuesIn<C> in(t);
  const std::int64_t r = t.dim(0), c = t.dim(1);
  std::vector<C> out(static_cast<std::size_t>(r * c));
  if (!trans) {
    for (std::int64_t i = 0; i < r * c; ++i) out[static_cast<std::size_t>(i)] = in.data()[i];
    return out;
  }
  for (std::int64_t i = 0; i < r; ++i) {
    for (std::int64_t j = 0; j < c; ++j) out[static_cast<std::size_t>(j * r + i)] = in.data()[i * c + j];
  }
  return out;
}

// C is float (FP32 accumulation, as every GEMM of the project) or double (an f64 operand:
// the reference mode).
template <class C>
void gemm(const Tensor& a, const Tensor& b, const Tensor* bias, Tensor& out, bool ta, bool tb,
          C alpha, C beta) {
  const std::int64_t m = out.dim(0), n = out.dim(1), k = ta ? a.dim(0) : a.dim(1);
  const std::vector<C> pa = widened<C>(a, ta), pb = widened<C>(b, tb);
  std::vector<C> pbias;
  if (bias != nullptr) {
    const ValuesIn<C> in(*bias);
    pbias.assign(in.data(), in.data() + n);
  }
  ValuesOut<C> result(out, beta != C(0));
  C* po = result.data();
  std::vector<C> acc(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) acc[static_cast<std::size_t>(j)] = C(0);
    for (std::int64_t kk = 0; kk < k; ++kk) {
      const C x = pa[static_cast<std::size_t>(i * k + kk)];
      const C* row = pb.data() + kk * n;
      for (std::int64_t j = 0; j < n; ++j) acc[static_cast<std::size_t>(j)] += x * row[j];
    }
    C* o = po + i * n;
    for (std::int64_t j = 0; j < n; ++j) {
      C v = alpha * acc[static_cast<std::size_t>(j)];
      if (bias != nullptr) v += pbias[static_cast<std::size_t>(j)];
      o[j] = beta == C(0) ? v : v + beta * o[j];
    }
  }
  result.commit();
}

template <class C> void bias_grad(const Tensor& dy, Tensor& db, bool accumulate) {
  const std::int64_t rows = dy.dim(0), n = dy.dim(1);
  const ValuesIn<C> in(dy);
  ValuesOut<C> result(db, accumulate);
  std::vector<C> acc(static_cast<std::size_t>(n));
  column_sums(in.data(), rows, n, result.data(), accumulate, acc.data());
  result.commit();
}

}  // namespace

FixedOrderScope::FixedOrderScope() { g_scopes.fetch_add(1); }
FixedOrderScope::~FixedOrderScope() { g_scopes.fetch_sub(1); }
bool fixed_order_active() { return g_scopes.load() > 0; }

namespace detail {

void gemm_fixed_order(const Tensor& a, const Tensor& b, const Tensor* bias, Tensor& out, bool ta,
                      bool tb, float alpha, float beta) {
  if (any_f64({&a, &b, bias, &out})) {
    gemm<double>(a, b, bias, out, ta, tb, alpha, beta);
  } else {
    gemm<float>(a, b, bias, out, ta, tb, alpha, beta);
  }
}

void bias_grad_fixed_order(const Tensor& dy, Tensor& db, bool accumulate) {
  if (any_f64({&dy, &db})) bias_grad<double>(dy, db, accumulate);
  else bias_grad<float>(dy, db, accumulate);
}

}  // namespace detail
}  // namespace mixpar::ops
