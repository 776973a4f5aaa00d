// MSE and softmax cross-entropy: one pass that returns the loss and writes the (scaled)
// gradient, computed in FP32 (f64 in reference mode) and rounded once into the gradient dtype.
#include "ops/loss.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "ops/checks.h"
#include "ops/chunked.h"
#include "ops/matrix_view.h"

namespace mixpar::ops {
namespace {

template <class C>
double mse_impl(const Tensor& pred, const Tensor& target, Tensor* dpred, float grad_scale) {
  const std::int64_t total = pred.numel();
  // d/dpred of mean (p - t)^2 is 2 (p - t) / numel; grad_scale folds in the loss scale.
  const C g = static_cast<C>(2.0 * grad_scale / static_cast<double>(total));
  ChunkReader<C> rp, rt;
  ChunkWriter<C> wd;
  double sum = 0.0;
  for_chunks(total, [&](std::int64_t begin, std::int64_t n) {
    const C* p = rp.read(pred, begin, n);
    const C* t = rt.read(target, begin, n);
    C* d = dpred ? wd.open(*dpred, begin, n) : nullptr;
    for (std::int64_t i = 0; i < n; ++i) {
      const C diff = p[i] - t[i];
      sum += static_cast<double>(diff) * static_cast<double>(diff);
      if (d) d[i] = g * diff;
    }
    if (d) wd.commit();
  });
  return sum / static_cast<double>(total);
}

// One row: returns logsumexp(z) - z[label]; writes scale * (softmax(z) - onehot) into dz.
template <class C>
double cross_entropy_row(const C* z, std::int64_t v, std::int32_t label, C* dz, C scale) {
  C zmax = z[0];
  for (std::int64_t j = 1; j < v; ++j) zmax = std::max(zmax, z[j]);
  double sum_exp = 0.0;
  for (std::int64_t j = 0; j < v; ++j) sum_exp += std::exp(static_cast<double>(z[j] - zmax));
  // Read before dz is written: dz may be z itself (an in-place gradient).
  const double loss = std::log(sum_exp) + static_cast<double>(zmax) - static_cast<double>(z[label]);
  if (dz) {
    const C inv = static_cast<C>(1.0 / sum_exp);
    for (std::int64_t j = 0; j < v; ++j) {
      const C p = std::exp(z[j] - zmax) * inv;
      dz[j] = scale * (j == label ? p - C(1) : p);
    }
  }
  return loss;
}

template <class C>
double cross_entropy_impl(const Tensor& logits, std::span<const std::int32_t> labels,
                          Tensor* dlogits, float grad_scale) {
  const std::int64_t b = logits.dim(0), v = logits.dim(1);
  const MatrixIn<C> in(logits);
  const C* z = in.map().data();
  std::optional<MatrixOut<C>> out;
  if (dlogits) out.emplace(*dlogits, false);
  C* dz = out ? out->map().data() : nullptr;
  const C scale = static_cast<C>(static_cast<double>(grad_scale) / static_cast<double>(b));
  double sum = 0.0;
  for (std::int64_t r = 0; r < b; ++r) {
    sum += cross_entropy_row<C>(z + r * v, v, labels[static_cast<std::size_t>(r)],
                                dz ? dz + r * v : nullptr, scale);
  }
  if (out) out->store();
  return sum / static_cast<double>(b);
}

void check_labels(std::span<const std::int32_t> labels, std::int64_t b, std::int64_t v) {
  if (static_cast<std::int64_t>(labels.size()) != b) {
    throw std::invalid_argument("cross_entropy_loss: " + std::to_string(labels.size()) +
                                " labels for " + std::to_string(b) + " rows of logits");
  }
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= v) {
      throw std::out_of_range("cross_entropy_loss: label " + std::to_string(labels[i]) +
                              " at row " + std::to_string(i) + " is outside [0, " +
                              std::to_string(v) + ")");
    }
  }
}

}  // namespace

double mse_loss(const Tensor& pred, const Tensor& target, Tensor* dpred, float grad_scale) {
  check_operand(pred, "mse_loss", "pred");
  check_operand(target, "mse_loss", "target");
  check_same_numel(target, pred, "mse_loss", "target", "pred");
  if (dpred) {
    check_operand(*dpred, "mse_loss", "dpred");
    check_same_numel(*dpred, pred, "mse_loss", "dpred", "pred");
  }
  if (pred.numel() == 0) throw std::invalid_argument("mse_loss: 'pred' is empty");
  return with_compute_type(any_f64({&pred, &target, dpred}), [&](auto tag) {
    return mse_impl<decltype(tag)>(pred, target, dpred, grad_scale);
  });
}

double cross_entropy_loss(const Tensor& logits, std::span<const std::int32_t> labels,
                          Tensor* dlogits, float grad_scale) {
  check_operand(logits, "cross_entropy_loss", "logits");
  check_2d(logits, "cross_entropy_loss", "logits");
  if (logits.dim(0) == 0 || logits.dim(1) == 0) {
    throw std::invalid_argument("cross_entropy_loss: 'logits' " + shape_str(logits.shape()) +
                                " is empty");
  }
  check_labels(labels, logits.dim(0), logits.dim(1));
  if (dlogits) {
    check_operand(*dlogits, "cross_entropy_loss", "dlogits");
    check_shape(*dlogits, logits.shape(), "cross_entropy_loss", "dlogits");
  }
  return with_compute_type(any_f64({&logits, dlogits}), [&](auto tag) {
    return cross_entropy_impl<decltype(tag)>(logits, labels, dlogits, grad_scale);
  });
}

}  // namespace mixpar::ops
