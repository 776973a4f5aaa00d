// LayerNorm, GELU and residual add: the row-wise and elementwise layers of a GPT block.
// Rows (LayerNorm) and element blocks (GELU) are spread over OpenMP threads; every reduction
// runs in one fixed order, so results do not depend on the number of threads.
#include <cmath>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "model/layers.h"
#include "model/layers_internal.h"
#include "ops/chunked.h"
#include "ops/elementwise.h"
#include "ops/op_profile.h"
#include "ops/row_math.h"

namespace mixpar::layers {
namespace {

using detail::ArrayMap;
using detail::ConstArrayMap;
using detail::In;
using detail::Out;

struct RowDims {
  std::int64_t rows, cols;
};

// Checks x [..., C], w [C] and the statistics [N]; returns N rows of C. `more` are the
// layer's other tensors, each checked to be an operand of x.numel() or C elements.
struct Arg {
  const Tensor* t;
  const char* name;
  bool per_channel;  // C elements (weights and their grads) rather than x.numel()
};
RowDims check_layernorm(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        std::initializer_list<Arg> more, const char* op) {
  for (auto [t, name] : {std::pair{&x, "x"}, {&w, "w"}, {&mean, "mean"}, {&rstd, "rstd"}}) {
    ops::check_operand(*t, op, name);
  }
  const std::int64_t c = w.numel();
  if (c == 0 || x.ndim() < 1 || x.dim(-1) != c) {
    throw std::invalid_argument(std::string(op) + ": 'x' has shape " + shape_str(x.shape()) +
                                ", expected [..., " + std::to_string(c) + "] (w's size)");
  }
  const std::int64_t rows = x.numel() / c;
  detail::check_numel(mean, rows, op, "mean");
  detail::check_numel(rstd, rows, op, "rstd");
  for (const Arg& a : more) {
    ops::check_operand(*a.t, op, a.name);
    detail::check_numel(*a.t, a.per_channel ? c : x.numel(), op, a.name);
  }
  return {rows, c};
}

template <class C>
void layernorm_forward_impl(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& out,
                            Tensor& mean, Tensor& rstd, RowDims d, C eps) {
  const In<C> in_x(x), in_w(w), in_b(b);
  Out<C> o(out, false), m(mean, false), r(rstd, false);
  const ConstArrayMap<C> wa(in_w.data(), d.cols), ba(in_b.data(), d.cols);
  const C* px = in_x.data();
  C *po = o.data(), *pm = m.data(), *pr = r.data();
  MIXPAR_PARALLEL_FOR_IF(d.rows * d.cols >= detail::kParallelMinWork)
  for (std::int64_t i = 0; i < d.rows; ++i) {
    const ConstArrayMap<C> xi(px + i * d.cols, d.cols);
    // Two passes (mean, then squared deviations): no cancellation for rows with a large mean.
    const C* pxi = px + i * d.cols;
    const C mu = ops::lane_sum(pxi, d.cols) / C(d.cols);
    const C var = ops::lane_sum<C>(d.cols, [&](std::int64_t j) {
                    const C dev = pxi[j] - mu;
                    return dev * dev;
                  }) / C(d.cols);
    const C rs = C(1) / std::sqrt(var + eps);
    ArrayMap<C>(po + i * d.cols, d.cols) = (xi - mu) * rs * wa + ba;
    pm[i] = mu;
    pr[i] = rs;
  }
  o.commit();
  m.commit();
  r.commit();
}

// dx += (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)) * rstd,  dnorm = dout * w.
template <class C>
void layernorm_dx(const C* dout, const C* x, const C* w, const C* mean, const C* rstd, C* dx,
                  RowDims d) {
  const ConstArrayMap<C> wa(w, d.cols);
  MIXPAR_PARALLEL_FOR_IF(d.rows * d.cols >= detail::kParallelMinWork)
  for (std::int64_t i = 0; i < d.rows; ++i) {
    const ConstArrayMap<C> xi(x + i * d.cols, d.cols), gi(dout + i * d.cols, d.cols);
    const auto xhat = (xi - mean[i]) * rstd[i];  // expressions: evaluated where used, no buffer
    const auto dnorm = gi * wa;
    const C *pg = dout + i * d.cols, *pxi = x + i * d.cols;
    const C mi = mean[i], ri = rstd[i];
    const C dnorm_mean =
        ops::lane_sum<C>(d.cols, [&](std::int64_t j) { return pg[j] * w[j]; }) / C(d.cols);
    const C dnorm_xhat_mean = ops::lane_sum<C>(d.cols, [&](std::int64_t j) {
                                return (pg[j] * w[j]) * ((pxi[j] - mi) * ri);
                              }) / C(d.cols);
    ArrayMap<C>(dx + i * d.cols, d.cols) += (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * rstd[i];
  }
}

// dw = sum_rows dout * xhat, db = sum_rows dout. Threads own column blocks and walk all rows
// in order, so each sum has the same order for any thread count (bit-reproducible).
template <class C>
void layernorm_dwdb(const C* dout, const C* x, const C* mean, const C* rstd, C* dw, C* db,
                    RowDims d, bool accumulate) {
  constexpr std::int64_t kCols = 64;
  const std::int64_t blocks = (d.cols + kCols - 1) / kCols;
  MIXPAR_PARALLEL_FOR_IF(blocks > 1 && d.rows * d.cols >= detail::kParallelMinWork)
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    const std::int64_t c0 = blk * kCols, n = std::min(kCols, d.cols - c0);
    C sw[kCols] = {}, sb[kCols] = {};
    for (std::int64_t i = 0; i < d.rows; ++i) {
      const C* xi = x + i * d.cols + c0;
      const C* gi = dout + i * d.cols + c0;
      for (std::int64_t j = 0; j < n; ++j) {
        sw[j] += gi[j] * ((xi[j] - mean[i]) * rstd[i]);
        sb[j] += gi[j];
      }
    }
    for (std::int64_t j = 0; j < n; ++j) {
      dw[c0 + j] = accumulate ? dw[c0 + j] + sw[j] : sw[j];
      db[c0 + j] = accumulate ? db[c0 + j] + sb[j] : sb[j];
    }
  }
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& out, Tensor& mean,
                       Tensor& rstd, double eps) {
  const ops::OpTimer timer("layernorm forward");
  const RowDims d = check_layernorm(x, w, mean, rstd, {{&b, "b", true}, {&out, "out", false}},
                                    "layernorm_forward");
  detail::dispatch({&x, &w, &b, &out, &mean, &rstd}, [&](auto tag) {
    using C = decltype(tag);
    layernorm_forward_impl<C>(x, w, b, out, mean, rstd, d, C(eps));
  });
}

void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dw, Tensor& db, bool accumulate) {
  const ops::OpTimer timer("layernorm backward");
  const RowDims d = check_layernorm(
      x, w, mean, rstd,
      {{&dout, "dout", false}, {&dx, "dx", false}, {&dw, "dw", true}, {&db, "db", true}},
      "layernorm_backward");
  detail::dispatch({&dout, &x, &w, &mean, &rstd, &dx, &dw, &db}, [&](auto tag) {
    using C = decltype(tag);
    const In<C> g(dout), in_x(x), in_w(w), m(mean), r(rstd);
    Out<C> odx(dx, true), odw(dw, accumulate), odb(db, accumulate);
    layernorm_dx<C>(g.data(), in_x.data(), in_w.data(), m.data(), r.data(), odx.data(), d);
    layernorm_dwdb<C>(g.data(), in_x.data(), m.data(), r.data(), odw.data(), odb.data(), d,
                      accumulate);
    odx.commit();
    odw.commit();
    odb.commit();
  });
}

// ---- GELU: 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi), evaluated as ops does it:
// 0.5 (1 + tanh u) = sigmoid(2u) and 1 - tanh^2 u = 4 s (1 - s), from one exp(-2|u|) <= 1 (no
// overflow, no cancellation), here with Eigen's vectorised exp (within 1 ulp of libm's).

namespace {

template <class C>
constexpr C kGeluK = C(0.7978845608028654);  // sqrt(2 / pi)
template <class C>
constexpr C kGeluA = C(0.044715);
// Up to kPiece values on the stack: the temporaries of one piece never touch the heap.
constexpr std::int64_t kPiece = 256;
static_assert(kPiece <= ops::kChunk, "a piece fits the chunk buffers of ops/chunked.h");
template <class C>
using Col = Eigen::Array<C, Eigen::Dynamic, 1, Eigen::ColMajor, kPiece, 1>;

// s = sigmoid(2u) and 1 - s for u = k (x + a x^3), elementwise.
template <class C>
void gelu_sigmoid(const ConstArrayMap<C>& x, Col<C>& s, Col<C>& one_minus_s) {
  const Col<C> u = kGeluK<C> * (x + kGeluA<C> * x.cube());
  const Col<C> e = (C(-2) * u.abs()).exp();  // in (0, 1]
  const Col<C> big = (C(1) + e).inverse();
  const Col<C> small = e * big;
  s = (u >= C(0)).select(big, small);
  one_minus_s = (u >= C(0)).select(small, big);
}

// y[0, n) = gelu(x[0, n)) for n <= kPiece.
template <class C>
void gelu_piece(const C* x, C* y, std::int64_t n) {
  const ConstArrayMap<C> xa(x, n);
  Col<C> s, oms;
  gelu_sigmoid<C>(xa, s, oms);
  ArrayMap<C>(y, n) = xa * s;
}

// dx = dout * [s + 2 x s (1 - s) du/dx],  du/dx = k (1 + 3a x^2). In the far tails s (1 - s)
// is exactly 0 while x du/dx may overflow: the term is then 0, not NaN.
template <class C>
void gelu_grad_piece(const C* x, const C* dout, C* dx, std::int64_t n) {
  const ConstArrayMap<C> xa(x, n);
  Col<C> s, oms;
  gelu_sigmoid<C>(xa, s, oms);
  const Col<C> tail = s * oms;
  const Col<C> du = kGeluK<C> * (C(1) + C(3) * kGeluA<C> * xa.square());
  const Col<C> grad = (tail == C(0)).select(s, s + C(2) * xa * tail * du);
  ArrayMap<C>(dx, n) = ConstArrayMap<C>(dout, n) * grad;
}

// f(begin, n) over [0, total) in pieces of kPiece; blocks of kElementBlock spread over threads.
template <class F>
void for_pieces(std::int64_t total, F&& f) {
  const std::int64_t blocks = (total + detail::kElementBlock - 1) / detail::kElementBlock;
  MIXPAR_PARALLEL_FOR_IF(blocks > 1)
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    const std::int64_t end = std::min(total, (blk + 1) * detail::kElementBlock);
    for (std::int64_t i = blk * detail::kElementBlock; i < end; i += kPiece) {
      f(i, std::min(kPiece, end - i));
    }
  }
}

}  // namespace

void gelu_forward(const Tensor& x, Tensor& out) {
  const ops::OpTimer timer("gelu forward");
  ops::check_operand(x, "gelu_forward", "x");
  ops::check_operand(out, "gelu_forward", "out");
  detail::check_numel(out, x.numel(), "gelu_forward", "out");
  detail::dispatch({&x, &out}, [&](auto tag) {
    using C = decltype(tag);
    // Piece by piece: a 16-bit piece is widened into, and rounded from, a stack buffer
    // (ops/chunked.h), so no whole-tensor workspace is allocated and the data is read once;
    // a tensor of type C is used in place.
    for_pieces(x.numel(), [&](std::int64_t i, std::int64_t n) {
      ops::ChunkReader<C> rx;
      ops::ChunkWriter<C> wy;
      const C* px = rx.read(x, i, n);
      gelu_piece<C>(px, wy.open(out, i, n), n);
      wy.commit();
    });
  });
}

void gelu_backward(const Tensor& x, const Tensor& dout, Tensor& dx) {
  const ops::OpTimer timer("gelu backward");
  ops::check_operand(x, "gelu_backward", "x");
  ops::check_operand(dout, "gelu_backward", "dout");
  ops::check_operand(dx, "gelu_backward", "dx");
  detail::check_numel(dout, x.numel(), "gelu_backward", "dout");
  detail::check_numel(dx, x.numel(), "gelu_backward", "dx");
  detail::dispatch({&x, &dout, &dx}, [&](auto tag) {
    using C = decltype(tag);
    // As gelu_forward; dx may be dout: each piece of dout is read before dx's is written.
    for_pieces(x.numel(), [&](std::int64_t i, std::int64_t n) {
      ops::ChunkReader<C> rx, rg;
      ops::ChunkWriter<C> wd;
      const C* px = rx.read(x, i, n);
      const C* pg = rg.read(dout, i, n);
      gelu_grad_piece<C>(px, pg, wd.open(dx, i, n), n);
      wd.commit();
    });
  });
}

// ---- Residual add.

void residual_forward(const Tensor& a, const Tensor& b, Tensor& out) {
  const ops::OpTimer timer("residual");
  ops::add(a, b, out);  // checks operands and sizes; out may alias a or b
}

void residual_backward(const Tensor& dout, Tensor& da, Tensor& db) {
  const ops::OpTimer timer("residual");
  ops::axpy(1.0, dout, da);
  ops::axpy(1.0, dout, db);
}

}  // namespace mixpar::layers
