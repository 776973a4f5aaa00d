// AdamW with PyTorch's semantics (torch.optim.AdamW; docs/REFERENCE.md, Clipping and AdamW),
// moments in FP32:
//   theta <- theta (1 - lr wd);  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;
//   theta <- theta - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps),  t = 1, 2, ...
// t advances only when step() runs: a step the loss scaler skips is a step() not called.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tensor/tensor.h"

namespace mixpar {

// Hyperparameters are doubles, as PyTorch's are Python floats: derived factors such as
// 1 - beta1 and lr / (1 - beta1^t) are formed in double, then rounded to FP32 for the update.
struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: multiplies theta, never enters m or v
};

class AdamW {
 public:
  // params: tensor handles sharing storage with what is trained (fp32 masters, or an fp32
  // model). A f16/bf16 parameter is allowed for the "pure 16-bit weights" lesson: its update
  // is computed in FP32 and rounded into the 16-bit value, where small updates vanish.
  // m and v are allocated here, zero, FP32, as MemCategory::kOptimizerState (8 B/param).
  // decays[i] false: parameter i is not decayed (biases and LayerNorm gains, the usual
  // "no_decay" param group of GPT-2 recipes); empty: every parameter is. The decayed ones see
  // exactly what a PyTorch param group with this weight_decay does.
  explicit AdamW(std::vector<Tensor> params, AdamWConfig config = {},
                 std::vector<bool> decays = {});

  // One update of every parameter with its gradient (grads[i] like params[i], any float
  // dtype, read as FP32: unscaled and clipped already). Increments step_count() first.
  void step(std::span<const Tensor> grads);

  std::int64_t step_count() const { return step_; }      // t of the last step, 0 before any
  void set_step_count(std::int64_t t) { step_ = t; }     // resuming from a checkpoint
  const AdamWConfig& config() const { return config_; }
  void set_lr(double lr) { config_.lr = lr; }            // schedules change lr between steps

  std::size_t size() const { return params_.size(); }
  const Tensor& param(std::size_t i) const { return params_.at(i); }
  const Tensor& exp_avg(std::size_t i) const { return m_.at(i); }     // m, FP32
  const Tensor& exp_avg_sq(std::size_t i) const { return v_.at(i); }  // v, FP32
  bool decays(std::size_t i) const { return decays_.at(i); }

 private:
  std::vector<Tensor> params_;
  std::vector<Tensor> m_;
  std::vector<Tensor> v_;
  std::vector<bool> decays_;  // per parameter
  AdamWConfig config_;
  std::int64_t step_ = 0;
};

}  // namespace mixpar
