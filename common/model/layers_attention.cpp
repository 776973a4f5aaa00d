// Causal multi-head attention as batched GEMMs: one (batch, head) pair per OpenMP work item,
// each running Eigen GEMMs on strided maps of the qkv buffer (no copies of q, k, v for FP32).
// Only the lower triangle of the T x T scores is computed: Eigen's triangular products skip
// the masked half, which is also the half llm.c's FLOP count (6*L*C*T) leaves out.
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "model/layers.h"
#include "model/layers_internal.h"
#include "ops/eigen_gemm.h"
#include "ops/op_profile.h"
#include "ops/row_math.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace mixpar::layers {
namespace {

using detail::In;
using detail::Out;

template <class C>
using RowMat = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class C>
using Strided = Eigen::Map<RowMat<C>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class C>
using ConstStrided = Eigen::Map<const RowMat<C>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class C>
using Square = Eigen::Map<RowMat<C>>;
template <class C>
using ConstSquare = Eigen::Map<const RowMat<C>>;

struct AttnDims {
  std::int64_t B, T, H, hd, Ch;  // Ch = H * hd: this call's channels (all heads it runs)
};

// Multiply-adds of the score GEMM: the size that decides whether threads pay off (unused in a
// build without OpenMP, as the sanitizer presets are).
[[maybe_unused]] std::int64_t work(const AttnDims& d) { return d.B * d.H * d.T * d.T * d.hd; }

AttnDims check_attention(const Tensor& qkv, std::int64_t n_head, const char* op) {
  ops::check_operand(qkv, op, "qkv");
  if (qkv.ndim() != 3 || qkv.dim(2) % 3 != 0) {
    throw std::invalid_argument(std::string(op) + ": 'qkv' has shape " + shape_str(qkv.shape()) +
                                ", expected [B, T, 3 * Ch]");
  }
  const std::int64_t ch = qkv.dim(2) / 3;
  if (n_head <= 0 || ch % n_head != 0) {
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(ch) +
                                " channels do not split into " + std::to_string(n_head) + " heads");
  }
  return {qkv.dim(0), qkv.dim(1), n_head, ch / n_head, ch};
}

void check_shapes(const AttnDims& d, const Tensor& out, const Tensor& att, const char* op,
                  const char* out_name, const char* att_name) {
  ops::check_operand(out, op, out_name);
  ops::check_operand(att, op, att_name);
  ops::check_shape(out, {d.B, d.T, d.Ch}, op, out_name);
  ops::check_shape(att, {d.B, d.H, d.T, d.T}, op, att_name);
}

// The [T, hd] block of head h in batch b: part 0, 1, 2 of qkv are q, k, v.
template <class C, class P>
auto head_of_qkv(P* qkv, const AttnDims& d, std::int64_t b, std::int64_t h, int part) {
  using Map = std::conditional_t<std::is_const_v<P>, ConstStrided<C>, Strided<C>>;
  return Map(qkv + (b * d.T * 3 + part) * d.Ch + h * d.hd, d.T, d.hd,
             Eigen::OuterStride<>(3 * d.Ch));
}
template <class C, class P>
auto head_of_out(P* out, const AttnDims& d, std::int64_t b, std::int64_t h) {
  using Map = std::conditional_t<std::is_const_v<P>, ConstStrided<C>, Strided<C>>;
  return Map(out + b * d.T * d.Ch + h * d.hd, d.T, d.hd, Eigen::OuterStride<>(d.Ch));
}

// Row i of the raw scores s (lower triangle) becomes softmax_j<=i(scale * s_ij); zeros above.
template <class C>
void causal_softmax(Square<C>& p, C scale) {
  const Eigen::Index t = p.rows();
  for (Eigen::Index i = 0; i < t; ++i) {
    // exp and the sum in an order fixed by the row's values alone (ops/row_math.h): rows start
    // at every alignment, and the lesson's bitwise claims must not depend on which.
    C* row = p.row(i).data();
    const C mx = p.row(i).head(i + 1).maxCoeff();
    for (Eigen::Index j = 0; j <= i; ++j) row[j] = scale * (row[j] - mx);
    ops::exp_in_place(row, i + 1);
    const C inv = C(1) / ops::lane_sum(row, i + 1);
    for (Eigen::Index j = 0; j <= i; ++j) row[j] *= inv;
    p.row(i).tail(t - i - 1).setZero();
  }
}

// ds_ij = scale * p_ij (dp_ij - sum_k p_ik dp_ik) for j <= i (softmax backward); zeros above.
template <class C>
void causal_softmax_backward(const ConstSquare<C>& p, Square<C>& dp, C scale) {
  const Eigen::Index t = p.rows();
  for (Eigen::Index i = 0; i < t; ++i) {
    const auto pi = p.row(i).head(i + 1).array();
    auto di = dp.row(i).head(i + 1).array();
    const C dot = ops::lane_dot(p.row(i).data(), dp.row(i).data(), i + 1);
    di = scale * pi * (di - dot);
    dp.row(i).tail(t - i - 1).setZero();
  }
}

template <class C>
void attention_forward_head(const C* qkv, C* out, C* att, const AttnDims& d, std::int64_t bh) {
  const std::int64_t b = bh / d.H, h = bh % d.H;
  const auto q = head_of_qkv<C>(qkv, d, b, h, 0), k = head_of_qkv<C>(qkv, d, b, h, 1);
  const auto v = head_of_qkv<C>(qkv, d, b, h, 2);
  Square<C> p(att + bh * d.T * d.T, d.T, d.T);                    // [T, T]
  p.template triangularView<Eigen::Lower>() = q * k.transpose();  // raw scores, j <= i only
  causal_softmax<C>(p, C(1) / std::sqrt(C(d.hd)));
  auto o = head_of_out<C>(out, d, b, h);  // [T, hd]
  o.noalias() = p.template triangularView<Eigen::Lower>() * v;
}

// One head's backward on maps of its blocks: q, k, v, dO [T, hd], P [T, T] in; dQ, dK, dV and
// dS (in dp, which first holds dP) out.
template <class C>
void attention_backward_maps(const ConstStrided<C>& q, const ConstStrided<C>& k,
                             const ConstStrided<C>& v, const ConstStrided<C>& dout_h,
                             const ConstSquare<C>& p, Square<C>& dp, Strided<C>& dq,
                             Strided<C>& dk, Strided<C>& dv, const AttnDims& d) {
  dv.noalias() = p.template triangularView<Eigen::Lower>().transpose() * dout_h;  // P^T dO
  dp.template triangularView<Eigen::Lower>() = dout_h * v.transpose();            // dO V^T
  causal_softmax_backward<C>(p, dp, C(1) / std::sqrt(C(d.hd)));                   // dS
  dq.noalias() = dp.template triangularView<Eigen::Lower>() * k;                  // dS K
  dk.noalias() = dp.template triangularView<Eigen::Lower>().transpose() * q;      // dS^T Q
}

template <class C>
void attention_backward_head(const C* dout, const C* qkv, const C* att, C* dqkv, C* datt,
                             const AttnDims& d, std::int64_t bh) {
  const std::int64_t b = bh / d.H, h = bh % d.H;
  const ConstSquare<C> p(att + bh * d.T * d.T, d.T, d.T);
  Square<C> dp(datt + bh * d.T * d.T, d.T, d.T);
  auto dq = head_of_qkv<C>(dqkv, d, b, h, 0), dk = head_of_qkv<C>(dqkv, d, b, h, 1);
  auto dv = head_of_qkv<C>(dqkv, d, b, h, 2);
  attention_backward_maps<C>(head_of_qkv<C>(qkv, d, b, h, 0), head_of_qkv<C>(qkv, d, b, h, 1),
                             head_of_qkv<C>(qkv, d, b, h, 2), head_of_out<C>(dout, d, b, h), p, dp,
                             dq, dk, dv, d);
}

// rows x n elements of t (any dtype) from element `first`, `stride` apart row to row, to or
// from a dense FP32 block: the exact widening or the one rounding of convert16.
void widen_rows(const Tensor& t, std::int64_t first, std::int64_t stride, std::int64_t rows,
                std::int64_t n, float* out) {
  const auto* src = static_cast<const char*>(t.data());
  const std::size_t es = dtype_size(t.dtype());
  for (std::int64_t r = 0; r < rows; ++r) {
    ops::convert16(src + static_cast<std::size_t>(first + r * stride) * es, t.dtype(),
                   out + r * n, DType::kF32, static_cast<std::size_t>(n));
  }
}
void round_rows(const float* in, Tensor& t, std::int64_t first, std::int64_t stride,
                std::int64_t rows, std::int64_t n) {
  auto* dst = static_cast<char*>(t.data());
  const std::size_t es = dtype_size(t.dtype());
  for (std::int64_t r = 0; r < rows; ++r) {
    ops::convert16(in + r * n, DType::kF32,
                   dst + static_cast<std::size_t>(first + r * stride) * es, t.dtype(),
                   static_cast<std::size_t>(n));
  }
}

// 16-bit tensors, one head at a time: the head's q, k, v, dO and P are widened into this
// thread's part of one workspace, and its dQ, dK, dV and dS rounded into the outputs as soon
// as they are computed, while they are in cache. Widening whole tensors first (five FP32
// copies of up to B*H*T*T elements, written to memory and read back) made a bf16 step's
// attention backward take half as long again as FP32's. The values are the same (widening is
// exact and rounding elementwise; `Attention16.*` compares bits with the FP32 path).
void attention_backward_16(const Tensor& dout, const Tensor& qkv, const Tensor& att,
                           Tensor& dqkv, Tensor& datt, const AttnDims& d) {
  const std::int64_t th = d.T * d.hd, tt = d.T * d.T;
  const std::int64_t per_thread = 7 * th + 2 * tt;
  // One slice of the workspace per thread of the team (none nested inside another team).
#if defined(_OPENMP)
  const std::int64_t threads = work(d) >= detail::kParallelMinWork && !omp_in_parallel()
                                   ? omp_get_max_threads()
                                   : 1;
#else
  const std::int64_t threads = 1;
#endif
  Tensor ws = Tensor::empty({threads * per_thread}, DType::kF32, MemCategory::kOther);
  float* base = ws.data_as<float>();
  MIXPAR_PARALLEL_FOR_IF(threads > 1)
  for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
#if defined(_OPENMP)
    float* w = base + (threads > 1 ? omp_get_thread_num() : 0) * per_thread;
#else
    float* w = base;
#endif
    float *q = w, *k = q + th, *v = k + th, *g = v + th, *dq = g + th, *dk = dq + th;
    float *dv = dk + th, *p = dv + th, *dp = p + tt;
    const std::int64_t b = bh / d.H, h = bh % d.H;
    const std::int64_t first_q = b * d.T * 3 * d.Ch + h * d.hd, first_o = b * d.T * d.Ch + h * d.hd;
    widen_rows(qkv, first_q, 3 * d.Ch, d.T, d.hd, q);
    widen_rows(qkv, first_q + d.Ch, 3 * d.Ch, d.T, d.hd, k);
    widen_rows(qkv, first_q + 2 * d.Ch, 3 * d.Ch, d.T, d.hd, v);
    widen_rows(dout, first_o, d.Ch, d.T, d.hd, g);
    widen_rows(att, bh * tt, tt, 1, tt, p);
    const Eigen::OuterStride<> row(d.hd);
    Strided<float> dqm(dq, d.T, d.hd, row), dkm(dk, d.T, d.hd, row), dvm(dv, d.T, d.hd, row);
    Square<float> dpm(dp, d.T, d.T);
    attention_backward_maps<float>(ConstStrided<float>(q, d.T, d.hd, row),
                                   ConstStrided<float>(k, d.T, d.hd, row),
                                   ConstStrided<float>(v, d.T, d.hd, row),
                                   ConstStrided<float>(g, d.T, d.hd, row),
                                   ConstSquare<float>(p, d.T, d.T), dpm, dqm, dkm, dvm, d);
    round_rows(dq, dqkv, first_q, 3 * d.Ch, d.T, d.hd);
    round_rows(dk, dqkv, first_q + d.Ch, 3 * d.Ch, d.T, d.hd);
    round_rows(dv, dqkv, first_q + 2 * d.Ch, 3 * d.Ch, d.T, d.hd);
    round_rows(dp, datt, bh * tt, tt, 1, tt);
  }
}

}  // namespace

void attention_forward(const Tensor& qkv, std::int64_t n_head, Tensor& out, Tensor& att) {
  const ops::OpTimer timer("attention forward");
  const AttnDims d = check_attention(qkv, n_head, "attention_forward");
  ops::detail::fix_eigen_blocking();  // Eigen's panels of k fixed, whatever this CPU's L1
  check_shapes(d, out, att, "attention_forward", "out", "att");
  detail::dispatch({&qkv, &out, &att}, [&](auto tag) {
    using C = decltype(tag);
    // 16-bit: q, k, v are widened once; the probabilities are rounded into att once, while
    // this call's output uses them unrounded (as a fused kernel keeping them in registers).
    const In<C> in(qkv);
    Out<C> o(out, false), a(att, false);
    const C* pq = in.data();
    C *po = o.data(), *pa = a.data();
    // Nested in this parallel loop, Eigen's GEMMs run single-threaded (it checks for an
    // enclosing OpenMP team): parallelism comes from the B*H independent heads.
    MIXPAR_PARALLEL_FOR_IF(work(d) >= detail::kParallelMinWork)
    for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) attention_forward_head<C>(pq, po, pa, d, bh);
    o.commit();
    a.commit();
  });
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        std::int64_t n_head, Tensor& dqkv, Tensor& datt) {
  const ops::OpTimer timer("attention backward");
  const AttnDims d = check_attention(qkv, n_head, "attention_backward");
  ops::detail::fix_eigen_blocking();
  check_shapes(d, dout, att, "attention_backward", "dout", "att");
  check_shapes(d, dout, datt, "attention_backward", "dout", "datt");
  ops::check_operand(dqkv, "attention_backward", "dqkv");
  ops::check_shape(dqkv, qkv.shape(), "attention_backward", "dqkv");
  const auto is16 = [](const Tensor& t) {
    return t.dtype() == DType::kBF16 || t.dtype() == DType::kF16;
  };
  if (!ops::any_f64({&dout, &qkv, &att, &dqkv, &datt}) &&
      (is16(dout) || is16(qkv) || is16(att) || is16(dqkv) || is16(datt))) {
    attention_backward_16(dout, qkv, att, dqkv, datt, d);
    return;
  }
  detail::dispatch({&dout, &qkv, &att, &dqkv, &datt}, [&](auto tag) {
    using C = decltype(tag);
    const In<C> g(dout), in(qkv), p(att);
    Out<C> dq(dqkv, false), dp(datt, false);
    const C *pg = g.data(), *pq = in.data(), *pp = p.data();
    C *pdq = dq.data(), *pdp = dp.data();
    MIXPAR_PARALLEL_FOR_IF(work(d) >= detail::kParallelMinWork)
    for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
      attention_backward_head<C>(pg, pq, pp, pdq, pdp, d, bh);
    }
    dq.commit();
    dp.commit();
  });
}

}  // namespace mixpar::layers
