// The layers indexed by vocabulary: token + position embedding and softmax cross-entropy, each
// on a vocabulary row range [vocab_begin, vocab_begin + Vs) so a vocab-parallel rank calls them
// on its own slice. Cross-entropy rows run on OpenMP threads with Eigen's vectorised exp.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/layers.h"
#include "model/layers_internal.h"
#include "ops/op_profile.h"
#include "ops/row_math.h"

namespace mixpar::layers {
namespace {

using detail::ArrayMap;
using detail::ConstArrayMap;
using detail::In;
using detail::Out;

struct EmbedDims {
  std::int64_t B, T, C, Vs;
};

EmbedDims check_embedding(std::span<const std::int32_t> tokens, const Tensor& wte,
                          const Tensor* wpe, const Tensor& out, const char* op,
                          const char* out_name) {
  ops::check_operand(wte, op, "wte");
  ops::check_operand(out, op, out_name);
  ops::check_2d(wte, op, "wte");
  if (out.ndim() != 3 || out.dim(2) != wte.dim(1)) {
    throw std::invalid_argument(std::string(op) + ": '" + out_name + "' has shape " +
                                shape_str(out.shape()) + ", expected [B, T, " +
                                std::to_string(wte.dim(1)) + "]");
  }
  const EmbedDims d{out.dim(0), out.dim(1), out.dim(2), wte.dim(0)};
  if (static_cast<std::int64_t>(tokens.size()) != d.B * d.T) {
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(tokens.size()) +
                                " tokens for " + shape_str(out.shape()) + " (B*T expected)");
  }
  for (std::int32_t id : tokens) {
    if (id < 0)
      throw std::invalid_argument(std::string(op) + ": negative token id " + std::to_string(id));
  }
  if (wpe != nullptr) {
    ops::check_operand(*wpe, op, "wpe");
    ops::check_2d(*wpe, op, "wpe");
    if (wpe->dim(1) != d.C || wpe->dim(0) < d.T) {
      throw std::invalid_argument(std::string(op) + ": 'wpe' has shape " + shape_str(wpe->shape()) +
                                  ", expected [P >= " + std::to_string(d.T) + ", " +
                                  std::to_string(d.C) + "]");
    }
  }
  return d;
}

// Row `id - vocab_begin` of the slice, or -1 when the token belongs to another slice.
std::int64_t local_row(std::int32_t id, std::int64_t vocab_begin, std::int64_t vs) {
  const std::int64_t r = std::int64_t{id} - vocab_begin;
  return r >= 0 && r < vs ? r : -1;
}

template <class C>
void embedding_forward_impl(std::span<const std::int32_t> tokens, const Tensor& wte,
                            std::int64_t vocab_begin, const Tensor* wpe, Tensor& out,
                            const EmbedDims& d) {
  Out<C> o(out, false);
  const std::size_t wte_row_bytes = static_cast<std::size_t>(d.C) * dtype_size(wte.dtype());
  const char* pw = static_cast<const char*>(wte.data());
  std::optional<In<C>> pos;
  if (wpe != nullptr) pos.emplace(*wpe);
  for (std::int64_t r = 0; r < d.B * d.T; ++r) {
    C* row = o.data() + r * d.C;
    const std::int64_t v = local_row(tokens[static_cast<std::size_t>(r)], vocab_begin, d.Vs);
    // Only the rows used are widened: a 16-bit [50257, C] table is never converted whole.
    if (v >= 0)
      convert(pw + v * wte_row_bytes, wte.dtype(), row, dtype_of<C>, d.C);
    else
      std::fill(row, row + d.C, C(0));
    if (pos) ArrayMap<C>(row, d.C) += ConstArrayMap<C>(pos->data() + (r % d.T) * d.C, d.C);
  }
  o.commit();
}

// Token rows grouped by their row of dwte, positions in increasing order within a group: each
// dwte row is read, updated in the order of the batch and written once.
std::vector<std::int64_t> rows_by_token(std::span<const std::int32_t> tokens,
                                        std::int64_t vocab_begin, std::int64_t vs) {
  std::vector<std::int64_t> order;
  for (std::size_t r = 0; r < tokens.size(); ++r) {
    if (local_row(tokens[r], vocab_begin, vs) >= 0) order.push_back(static_cast<std::int64_t>(r));
  }
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return tokens[static_cast<std::size_t>(a)] < tokens[static_cast<std::size_t>(b)];
  });
  return order;
}

template <class C>
void embedding_dwte(std::span<const std::int32_t> tokens, const C* g, std::int64_t vocab_begin,
                    Tensor& dwte, const EmbedDims& d) {
  const std::vector<std::int64_t> order = rows_by_token(tokens, vocab_begin, d.Vs);
  const bool widen = dwte.dtype() != dtype_of<C>;  // 16-bit rows are summed in a C row
  Tensor acc;
  if (widen) acc = Tensor::empty({d.C}, dtype_of<C>, MemCategory::kOther);
  const std::size_t row_bytes = static_cast<std::size_t>(d.C) * dtype_size(dwte.dtype());
  char* pw = static_cast<char*>(dwte.data());
  for (std::size_t i = 0; i < order.size();) {
    const std::int32_t id = tokens[static_cast<std::size_t>(order[i])];
    char* wrow = pw + local_row(id, vocab_begin, d.Vs) * row_bytes;
    C* pa = widen ? acc.data_as<C>() : reinterpret_cast<C*>(wrow);
    if (widen) convert(wrow, dwte.dtype(), pa, dtype_of<C>, d.C);
    for (; i < order.size() && tokens[static_cast<std::size_t>(order[i])] == id; ++i) {
      ArrayMap<C>(pa, d.C) += ConstArrayMap<C>(g + order[i] * d.C, d.C);
    }
    if (widen) convert(pa, dtype_of<C>, wrow, dwte.dtype(), d.C);
  }
}

}  // namespace

void embedding_forward(std::span<const std::int32_t> tokens, const Tensor& wte,
                       std::int64_t vocab_begin, const Tensor* wpe, Tensor& out) {
  const ops::OpTimer timer("embedding forward");
  const EmbedDims d = check_embedding(tokens, wte, wpe, out, "embedding_forward", "out");
  detail::dispatch({&wte, wpe, &out}, [&](auto tag) {
    embedding_forward_impl<decltype(tag)>(tokens, wte, vocab_begin, wpe, out, d);
  });
}

void embedding_backward(std::span<const std::int32_t> tokens, const Tensor& dout,
                        std::int64_t vocab_begin, Tensor& dwte, Tensor* dwpe, bool accumulate) {
  const ops::OpTimer timer("embedding backward");
  const EmbedDims d = check_embedding(tokens, dwte, dwpe, dout, "embedding_backward", "dout");
  detail::dispatch({&dout, &dwte, dwpe}, [&](auto tag) {
    using C = decltype(tag);
    const In<C> g(dout);
    if (!accumulate) dwte.zero();
    embedding_dwte<C>(tokens, g.data(), vocab_begin, dwte, d);
    if (dwpe == nullptr) return;
    Out<C> o(*dwpe, accumulate);
    if (!accumulate) std::fill(o.data(), o.data() + dwpe->numel(), C(0));
    for (std::int64_t t = 0; t < d.T; ++t) {
      ArrayMap<C> row(o.data() + t * d.C, d.C);
      for (std::int64_t b = 0; b < d.B; ++b)
        row += ConstArrayMap<C>(g.data() + (b * d.T + t) * d.C, d.C);
    }
    o.commit();
  });
}

// ---- Cross-entropy.

namespace {

std::int64_t check_logits(const Tensor& logits, std::span<const std::int32_t> targets,
                          const char* op) {
  ops::check_operand(logits, op, "logits");
  ops::check_2d(logits, op, "logits");
  if (static_cast<std::int64_t>(targets.size()) != logits.dim(0) || logits.dim(0) == 0) {
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(targets.size()) +
                                " targets for logits " + shape_str(logits.shape()));
  }
  for (std::int32_t t : targets) {
    if (t < 0)
      throw std::invalid_argument(std::string(op) + ": negative target " + std::to_string(t));
  }
  return logits.dim(0);
}

// t becomes a [n] tensor of dtype dt unless it already is one (the stats' and lse's storage).
void ensure_vector(Tensor& t, std::int64_t n, DType dt) {
  if (t.defined() && t.numel() == n && t.dtype() == dt) return;
  t = Tensor::empty({n}, dt, MemCategory::kOther);
}

template <class C>
void stats_impl(const Tensor& logits, std::span<const std::int32_t> targets,
                std::int64_t vocab_begin, CrossEntropyStats& s) {
  const std::int64_t n = logits.dim(0), vs = logits.dim(1);
  const In<C> in(logits);
  const C* pl = in.data();
  C *mx = s.row_max.data_as<C>(), *se = s.sum_exp.data_as<C>(), *tl = s.target_logit.data_as<C>();
  MIXPAR_PARALLEL_FOR_IF(n * vs >= detail::kParallelMinWork)
  for (std::int64_t i = 0; i < n; ++i) {
    const ConstArrayMap<C> row(pl + i * vs, vs);
    mx[i] = row.maxCoeff();
    // exp and sum in an order fixed by the values alone (ops/row_math.h): exp of whole
    // packets from the row's start, std::exp on the tail, then lane_sum.
    thread_local std::vector<C> scratch;
    scratch.resize(static_cast<std::size_t>(vs));
    C* e = scratch.data();
    for (std::int64_t j = 0; j < vs; ++j) e[j] = row[j] - mx[i];
    ops::exp_in_place(e, vs);
    se[i] = ops::lane_sum(e, vs);
    const std::int64_t j = local_row(targets[static_cast<std::size_t>(i)], vocab_begin, vs);
    tl[i] = j >= 0 ? row[j] : C(0);
  }
}

}  // namespace

void crossentropy_stats(const Tensor& logits, std::span<const std::int32_t> targets,
                        std::int64_t vocab_begin, CrossEntropyStats& stats) {
  const ops::OpTimer timer("cross-entropy forward");
  const std::int64_t n = check_logits(logits, targets, "crossentropy_stats");
  const DType dt = ops::any_f64({&logits}) ? DType::kF64 : DType::kF32;
  for (Tensor* t : {&stats.row_max, &stats.sum_exp, &stats.target_logit}) ensure_vector(*t, n, dt);
  detail::dispatch(
      {&logits}, [&](auto tag) { stats_impl<decltype(tag)>(logits, targets, vocab_begin, stats); });
}

void crossentropy_merge_stats(CrossEntropyStats& a, const CrossEntropyStats& b) {
  const std::int64_t n = a.row_max.numel();
  const std::initializer_list<const Tensor*> others = {&a.sum_exp, &a.target_logit, &b.row_max,
                                                       &b.sum_exp, &b.target_logit};
  for (const Tensor* t : others) {
    detail::check_numel(*t, n, "crossentropy_merge_stats", "stats");
  }
  detail::dispatch({&a.row_max, &b.row_max}, [&](auto tag) {
    using C = decltype(tag);
    C *am = a.row_max.data_as<C>(), *as = a.sum_exp.data_as<C>(), *at = a.target_logit.data_as<C>();
    const C *bm = b.row_max.data_as<C>(), *bs = b.sum_exp.data_as<C>();
    const C* bt = b.target_logit.data_as<C>();
    for (std::int64_t i = 0; i < n; ++i) {
      const C m = std::max(am[i], bm[i]);  // rescale both sums to the common maximum
      as[i] = as[i] * std::exp(am[i] - m) + bs[i] * std::exp(bm[i] - m);
      am[i] = m;
      at[i] += bt[i];  // the target lies in exactly one slice; the others contribute 0
    }
  });
}

double crossentropy_loss(const CrossEntropyStats& stats, Tensor& lse) {
  const std::int64_t n = stats.row_max.numel();
  ensure_vector(lse, n, stats.row_max.dtype());
  return detail::dispatch({&stats.row_max}, [&](auto tag) {
    using C = decltype(tag);
    const C *mx = stats.row_max.data_as<C>(), *se = stats.sum_exp.data_as<C>();
    const C* tl = stats.target_logit.data_as<C>();
    C* pl = lse.data_as<C>();
    double total = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      pl[i] = mx[i] + std::log(se[i]);
      total += double(pl[i]) - double(tl[i]);
    }
    return total / double(n);
  });
}

double crossentropy_forward(const Tensor& logits, std::span<const std::int32_t> targets,
                            Tensor& lse) {
  check_logits(logits, targets, "crossentropy_forward");
  for (std::int32_t t : targets) {
    if (t >= logits.dim(1)) {
      throw std::invalid_argument("crossentropy_forward: target " + std::to_string(t) +
                                  " is not below the vocabulary size " +
                                  std::to_string(logits.dim(1)));
    }
  }
  CrossEntropyStats stats;
  crossentropy_stats(logits, targets, 0, stats);
  return crossentropy_loss(stats, lse);
}

void crossentropy_backward(const Tensor& logits, std::span<const std::int32_t> targets,
                           std::int64_t vocab_begin, const Tensor& lse, float grad_scale,
                           Tensor& dlogits) {
  const ops::OpTimer timer("cross-entropy backward");
  const std::int64_t n = check_logits(logits, targets, "crossentropy_backward");
  const std::int64_t vs = logits.dim(1);
  ops::check_operand(lse, "crossentropy_backward", "lse");
  detail::check_numel(lse, n, "crossentropy_backward", "lse");
  ops::check_operand(dlogits, "crossentropy_backward", "dlogits");
  ops::check_shape(dlogits, logits.shape(), "crossentropy_backward", "dlogits");
  detail::dispatch({&logits, &lse, &dlogits}, [&](auto tag) {
    using C = decltype(tag);
    const In<C> in(logits), l(lse);
    Out<C> o(dlogits, false);
    const C *pl = in.data(), *pse = l.data();
    C* pd = o.data();
    const C s = C(grad_scale) / C(n);  // d(mean)/d(row) times the loss scale, before rounding
    MIXPAR_PARALLEL_FOR_IF(n * vs >= detail::kParallelMinWork)
    for (std::int64_t i = 0; i < n; ++i) {
      ArrayMap<C> d(pd + i * vs, vs);
      // softmax * s (in place ok); exp whatever the row's alignment (ops/row_math.h)
      d = ConstArrayMap<C>(pl + i * vs, vs) - pse[i];
      ops::exp_in_place(d.data(), vs);
      d *= s;
      const std::int64_t j = local_row(targets[static_cast<std::size_t>(i)], vocab_begin, vs);
      if (j >= 0) d[j] -= s;
    }
    o.commit();
  });
}

}  // namespace mixpar::layers
