// SGD with momentum, PyTorch semantics (torch.optim.SGD, dampening 0, nesterov off):
//   g <- g + wd theta (coupled L2, when wd != 0);
//   buf <- g on the first step, else buf <- momentum buf + g;   theta <- theta - lr buf.
// With momentum 0 there is no buffer and theta <- theta - lr g.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tensor/tensor.h"

namespace mixpar {

// Doubles like PyTorch's Python-float hyperparameters; rounded to FP32 for the update.
struct SgdConfig {
  double lr = 1e-3;  // PyTorch's default since 2.0
  double momentum = 0.0;
  double weight_decay = 0.0;
};

class Sgd {
 public:
  // params as for AdamW (f32, or f16/bf16 for the pure 16-bit lesson). The momentum buffers
  // (FP32, MemCategory::kOptimizerState, 4 B/param) exist only when momentum != 0.
  explicit Sgd(std::vector<Tensor> params, SgdConfig config = {});

  void step(std::span<const Tensor> grads);  // grads[i] like params[i], any float dtype

  std::int64_t step_count() const { return step_; }
  void set_step_count(std::int64_t t) { step_ = t; }
  const SgdConfig& config() const { return config_; }
  void set_lr(double lr) { config_.lr = lr; }

  std::size_t size() const { return params_.size(); }
  const Tensor& param(std::size_t i) const { return params_.at(i); }
  // Undefined tensor when momentum == 0.
  const Tensor& momentum_buffer(std::size_t i) const { return buf_.at(i); }

 private:
  std::vector<Tensor> params_;
  std::vector<Tensor> buf_;
  SgdConfig config_;
  std::int64_t step_ = 0;
};

}  // namespace mixpar
