// AdamW: one chunked pass per parameter, in the operation order of PyTorch's single-tensor
// AdamW (torch/optim/adam.py, _single_tensor_adam with decoupled weight decay). The scalar
// factors are formed in double from t, as PyTorch does in Python, then used in FP32. The
// update of one element is adamw_element (optim/adamw_math.h), shared with the GPU kernel.
#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "ops/chunked.h"
#include "optim/adamw_math.h"
#include "optim/param_list.h"
#include "ops/op_profile.h"

namespace mixpar {

AdamScalars adam_scalars(const AdamWConfig& c, std::int64_t t) {
  const double td = static_cast<double>(t);
  const double bc1 = 1.0 - std::pow(c.beta1, td);
  const double bc2 = 1.0 - std::pow(c.beta2, td);
  return {static_cast<float>(1.0 - c.lr * c.weight_decay),
          static_cast<float>(1.0 - c.beta1),
          static_cast<float>(c.beta2),
          static_cast<float>(1.0 - c.beta2),
          static_cast<float>(c.lr / bc1),
          static_cast<float>(std::sqrt(bc2)),
          static_cast<float>(c.eps)};
}

namespace {

// theta [n], g [n] (any float dtype); m [n], v [n] FP32, updated in place.
void adamw_update(const Tensor& theta, const Tensor& g, const Tensor& m, const Tensor& v,
                  const AdamScalars& s) {
  const ops::OpTimer timer("AdamW update");
  float* pm = m.data_as<float>();
  float* pv = v.data_as<float>();
  // Elementwise, so splitting the tensor over threads changes no bit of the result.
  ops::parallel_for_chunk_ranges(theta.numel(), [&](std::int64_t first, std::int64_t last) {
    ops::ChunkReader<float> rg;
    ops::ChunkWriter<float> wp;
    for (std::int64_t begin = first; begin < last; begin += ops::kChunk) {
      const std::int64_t n = std::min(ops::kChunk, last - begin);
      const float* pg = rg.read(g, begin, n);
      float* pp = wp.open(theta, begin, n, /*load=*/true);
      float* mm = pm + begin;
      float* vv = pv + begin;
      for (std::int64_t i = 0; i < n; ++i) adamw_element(pp[i], mm[i], vv[i], pg[i], s);
      wp.commit();
    }
  });
}

}  // namespace

AdamW::AdamW(std::vector<Tensor> params, AdamWConfig config, std::vector<bool> decays)
    : params_(std::move(params)), decays_(std::move(decays)), config_(config) {
  check_params(params_, "AdamW");
  if (decays_.empty()) decays_.assign(params_.size(), true);
  if (decays_.size() != params_.size()) {
    throw std::invalid_argument("AdamW: " + std::to_string(decays_.size()) +
                                " weight-decay flags for " + std::to_string(params_.size()) +
                                " parameters");
  }
  m_ = zeros_like_fp32(params_, MemCategory::kOptimizerState);
  v_ = zeros_like_fp32(params_, MemCategory::kOptimizerState);
}

void AdamW::step(std::span<const Tensor> grads) {
  check_grads(params_, grads, "AdamW::step");
  ++step_;
  const AdamScalars s = adam_scalars(config_, step_);
  AdamScalars no_decay = s;
  no_decay.decay = 1.0f;  // theta * 1.0f == theta: the same pass, no decay
  for (std::size_t i = 0; i < params_.size(); ++i) {
    adamw_update(params_[i], grads[i], m_[i], v_[i], decays_[i] ? s : no_decay);
  }
}

}  // namespace mixpar
