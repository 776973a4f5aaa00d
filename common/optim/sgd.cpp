// SGD with momentum: one chunked pass per parameter, FP32 arithmetic.
#include "optim/sgd.h"

#include <utility>

#include "ops/chunked.h"
#include "optim/param_list.h"

namespace mixpar {
namespace {

// theta [n], g [n] any float dtype; buf [n] FP32 or undefined (no momentum).
void sgd_update(const Tensor& theta, const Tensor& g, const Tensor& buf, const SgdConfig& c,
                bool first_step) {
  ops::ChunkReader<float> rg;
  ops::ChunkWriter<float> wp;
  float* pb = buf.defined() ? buf.data_as<float>() : nullptr;
  const float lr = static_cast<float>(c.lr);
  const float mom = static_cast<float>(c.momentum);
  const float wd = static_cast<float>(c.weight_decay);
  ops::for_chunks(theta.numel(), [&](std::int64_t begin, std::int64_t n) {
    const float* pg = rg.read(g, begin, n);
    float* pp = wp.open(theta, begin, n, /*load=*/true);
    for (std::int64_t i = 0; i < n; ++i) {
      float d = pg[i];
      if (wd != 0.0f) d += wd * pp[i];
      if (pb) {
        float& b = pb[begin + i];
        b = first_step ? d : mom * b + d;  // PyTorch: buf = clone(d_p) on first use
        d = b;
      }
      pp[i] += -lr * d;  // p.add_(d_p, alpha=-lr)
    }
    wp.commit();
  });
}

}  // namespace

Sgd::Sgd(std::vector<Tensor> params, SgdConfig config)
    : params_(std::move(params)), config_(config) {
  check_params(params_, "Sgd");
  if (config_.momentum != 0.0) buf_ = zeros_like_fp32(params_, MemCategory::kOptimizerState);
  else buf_.resize(params_.size());
}

void Sgd::step(std::span<const Tensor> grads) {
  check_grads(params_, grads, "Sgd::step");
  const bool first = step_ == 0;
  ++step_;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    sgd_update(params_[i], grads[i], buf_[i], config_, first);
  }
}

}  // namespace mixpar
