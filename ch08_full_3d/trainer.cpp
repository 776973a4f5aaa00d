// One training step in chapter 3's order: forward and backward of each micro-batch (loss scale on
// the seed gradient), then unscale -> inf check -> clip -> AdamW on the FP32 masters -> re-cast.
// The 2-D-only weight decay is applied here, just before that step: chapter 3's optimizer has one
// weight decay for all parameters (README.md, "What this chapter needs from chapters 2-3").
#include "trainer.h"

#include <Eigen/Core>
#include <chrono>
#include <stdexcept>
#include <utility>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "model/gpt_hf.h"
#include "util/errors.h"

namespace mixpar::ch08 {
namespace {

TrainerConfig validated(TrainerConfig c) {
  validate(c);
  return c;
}

GptOptions model_options(const TrainerConfig& c) {
  GptOptions o;
  o.dtype = c.dtype;
  o.seed = c.seed;
  o.recompute = c.recompute;
  return o;
}

ch03::MixedPrecisionConfig optimizer_config(const TrainerConfig& c) {
  ch03::MixedPrecisionConfig m;
  m.optimizer = ch03::OptimizerKind::kAdamW;
  // weight_decay 0: the trainer decays the 2-D weights itself (apply_weight_decay).
  m.adamw = AdamWConfig{c.schedule.lr, c.beta1, c.beta2, c.eps, 0.0};
  m.max_grad_norm = c.grad_clip;
  // Only fp16 needs a scaler: bf16 has FP32's exponent range, so small gradients survive.
  m.scaler = c.dtype == DType::kF16 ? ch02::pytorch_config() : ch02::no_scaling_config();
  if (c.dtype == DType::kF16) m.scaler.init_scale = c.loss_scale;
  return m;
}

}  // namespace

void set_cpu_threads(int threads) {
  if (threads <= 0) return;
#if defined(_OPENMP)
  omp_set_num_threads(threads);
#endif
  Eigen::setNbThreads(threads);
}

Trainer::Trainer(TrainerConfig config, TrainingData data)
    : config_(validated(std::move(config))),
      data_(std::move(data)),
      model_(config_.model, model_options(config_)),
      optimizer_(tensors_of(model_.parameters()), tensors_of(model_.gradients()),
                 optimizer_config(config_)),
      loader_(data_.tokens, config_.batch, config_.seq, config_.data_order, config_.seed) {
  for (const ParamEntry& e : model_.registry().entries()) decays_.push_back(e.weight_decay);
  if (!config_.init_from.empty()) load_initial_weights();
}

AdamW& Trainer::mutable_adamw() {
  // MixedPrecisionOptimizer hands out its AdamW read-only, but a schedule must set the learning
  // rate every step and a resume must set the step count and moments. The AdamW object is not
  // const (the optimizer owns it by unique_ptr), so casting the view is well defined.
  return const_cast<AdamW&>(*optimizer_.adamw());
}

std::vector<NamedTensor> Trainer::master_weights() const {
  std::vector<NamedTensor> out;
  const auto entries = model_.registry().entries();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    out.push_back({entries[i].name, optimizer_.stepped_params()[i]});
  }
  return out;
}

void Trainer::save_hf(const std::string& dir) const {
  save_gpt_hf(dir, config_.model, master_weights());
}

void Trainer::recast_working_copy() {
  if (!optimizer_.has_masters()) return;  // fp32: the masters are the model's own tensors
  const std::vector<NamedTensor> params = model_.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    Tensor p = params[i].tensor;
    p.copy_from(optimizer_.stepped_params()[i]);
  }
}

void Trainer::load_initial_weights() {
  // Into the FP32 masters, so a 16-bit run starting from FP32 weights keeps all their bits.
  load_gpt_hf_into(config_.init_from, config_.model, master_weights());
  recast_working_copy();
}

void Trainer::apply_weight_decay(double lr) {
  if (config_.weight_decay == 0.0) return;
  // The factor exactly as AdamW forms it (1 - lr wd in double, then FP32), applied first as
  // AdamW does: the result is bit-identical to an AdamW param group with this weight decay.
  const float decay = static_cast<float>(1.0 - lr * config_.weight_decay);
  const std::vector<Tensor>& masters = optimizer_.stepped_params();
  for (std::size_t i = 0; i < masters.size(); ++i) {
    if (!decays_[i]) continue;
    float* p = masters[i].data_as<float>();
    const std::int64_t n = masters[i].numel();
    // Memory-bound (GPT-2 124M: 0.5 GB read and written per step): spread over the threads.
    // Elementwise, so the result does not depend on how the range is split.
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
#endif
    for (std::int64_t j = 0; j < n; ++j) p[j] *= decay;
  }
}

ch03::StepReport Trainer::optimizer_step(double lr) {
  mutable_adamw().set_lr(lr);
  // Decay must happen only if the optimizer steps: ask the scaler's own check first.
  const Tensor grads[] = {model_.registry().flat_grads()};
  const bool will_skip =
      optimizer_.scaler().mode() != ch02::ScaleMode::kNone && ch02::LossScaler::found_inf(grads);
  if (!will_skip) apply_weight_decay(lr);
  const ch03::StepReport r = optimizer_.step();
  if (r.taken == will_skip) {
    throw std::logic_error("optimizer_step: the scaler's decision differs from the inf check");
  }
  return r;
}

StepStats Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  StepStats s;
  s.step = step_ + 1;
  s.loss_scale = optimizer_.loss_scale();
  // Each micro-batch's gradient is of its own mean loss; dividing the seed by grad_accum
  // makes the sum the gradient of the mean over the whole step.
  const float seed = s.loss_scale / static_cast<float>(config_.grad_accum);
  for (std::int64_t k = 0; k < config_.grad_accum; ++k) {
    const TokenBatch b = loader_.next();
    if (k == 0) {
      s.data_position = b.position;
      s.epoch = b.epoch;
    }
    s.loss += model_.forward(b.inputs, b.targets, b.B, b.T);
    model_.backward(seed, /*accumulate=*/k > 0);
  }
  s.loss /= static_cast<double>(config_.grad_accum);
  s.lr = config_.schedule.at(step_);
  const ch03::StepReport r = optimizer_step(s.lr);
  s.skipped = !r.taken;
  s.grad_norm = r.grad_norm;
  s.clip_coef = r.clip_coef;
  s.tokens = config_.tokens_per_step();
  ++step_;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace mixpar::ch08
