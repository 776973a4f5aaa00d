// The vocabulary-parallel head's two pieces (tensor_parallel.h): the padding mask and the loss
// whose statistics are combined by all-reduces instead of a gathered [N, V] row.
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "model/tensor_parallel.h"

namespace mixpar {
namespace {

// stats.sum_exp[i] <- sum_exp[i] exp(local_max[i] - global_max[i]); row_max <- global_max.
// A row whose local slice is all padding (-inf) contributes 0.
template <class S>
void rescale_to(layers::CrossEntropyStats& stats, const Tensor& global_max) {
  const std::int64_t n = stats.row_max.numel();
  S* mx = stats.row_max.data_as<S>();
  S* se = stats.sum_exp.data_as<S>();
  const S* gm = global_max.data_as<S>();
  for (std::int64_t i = 0; i < n; ++i) {
    se[i] = std::isinf(mx[i]) && mx[i] < 0 ? S(0) : se[i] * std::exp(mx[i] - gm[i]);
    mx[i] = gm[i];
  }
}

}  // namespace

void mask_vocab_padding(Tensor& logits, std::int64_t valid, const TensorParallelGroup& tp) {
  const std::int64_t n = logits.dim(0), vs = logits.dim(1);
  if (valid >= vs || !tp.mask_padded_logits()) return;
  if (valid < 0) valid = 0;
  for (std::int64_t r = 0; r < n; ++r) {
    logits.flat_slice(r * vs + valid, vs - valid).fill(-std::numeric_limits<float>::infinity());
  }
}

double vocab_parallel_loss(const Tensor& logits, std::span<const std::int32_t> targets,
                           std::int64_t vocab_begin, TensorParallelGroup& tp,
                           layers::CrossEntropyStats& stats, Tensor& lse) {
  // Local statistics of this rank's columns: max, sum of exp(l - local max), target logit.
  layers::crossentropy_stats(logits, targets, vocab_begin, stats);
  Tensor global_max = stats.row_max.clone();
  tp.loss_max(global_max);  // all-reduce MAX: every rank's max of the whole row
  if (stats.row_max.dtype() == DType::kF64) {
    rescale_to<double>(stats, global_max);
  } else if (stats.row_max.dtype() == DType::kF32) {
    rescale_to<float>(stats, global_max);
  } else {
    throw std::logic_error("vocab_parallel_loss: statistics in " +
                           std::string(dtype_name(stats.row_max.dtype())));
  }
  tp.loss_sum(stats.target_logit);  // the target lies on one rank; the others hold 0
  tp.loss_sum(stats.sum_exp);       // sum over the whole row of exp(l - global max)
  return layers::crossentropy_loss(stats, lse);
}

}  // namespace mixpar
