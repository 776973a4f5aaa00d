// MixedPrecisionOptimizer::step is the order of torch.amp's recipe (scaler.unscale_,
// clip_grad_norm_, scaler.step, scaler.update) and of Megatron's MixedPrecisionOptimizer.step
// (copy model grads to main grads, unscale and check, clip, step, copy main params to model
// params), with the bug switches inserted where each mistake happens in real code.
#include "mixed_precision_optimizer.h"

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "ops/convert16.h"
#include "optim/clip.h"
#include "util/errors.h"

namespace mixpar::ch03 {
namespace {

constexpr std::string_view kBugNames[] = {"none", "clip-before-unscale", "no-unscale",
                                          "fp16-weights"};

// dst[i] <- src[i], rounded into dst's dtype. On the CPU through ops::convert16 (the vector
// units and the OpenMP threads, the bits of Tensor::copy_from's scalar conversion): the two
// copies of every parameter per step (gradients in, masters out) took 2% of a bf16 step.
void copy_all(const std::vector<Tensor>& src, const std::vector<Tensor>& dst) {
  for (std::size_t i = 0; i < src.size(); ++i) {
    Tensor d = dst[i];
    if (src[i].device() == Device::kCPU && d.device() == Device::kCPU &&
        src[i].numel() == d.numel() && src[i].dtype() != d.dtype()) {
      ops::convert16(src[i].data(), src[i].dtype(), d.data(), d.dtype(),
                     static_cast<std::size_t>(d.numel()));
    } else {
      d.copy_from(src[i]);
    }
  }
}

std::vector<Tensor> fp32_like(const std::vector<Tensor>& ts, MemCategory category) {
  std::vector<Tensor> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(Tensor::zeros(t.shape(), DType::kF32, category));
  return out;
}

void check_inputs(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                  const MixedPrecisionConfig& c) {
  if (params.empty()) throw InputError("MixedPrecisionOptimizer: no parameters");
  if (grads.size() != params.size()) {
    throw InputError("MixedPrecisionOptimizer: " + std::to_string(grads.size()) +
                     " gradients for " + std::to_string(params.size()) + " parameters");
  }
  const DType working = params.front().dtype();
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i].dtype() != working || grads[i].dtype() != working ||
        grads[i].numel() != params[i].numel()) {
      throw InputError("MixedPrecisionOptimizer: parameter " + std::to_string(i) +
                       " and its gradient must share the working dtype and size");
    }
  }
  if (working != DType::kF32 && working != DType::kF16 && working != DType::kBF16) {
    throw InputError("MixedPrecisionOptimizer: working dtype must be f32, f16 or bf16");
  }
  if (c.bug == Bug::kFp16Weights && working == DType::kF32) {
    throw InputError("MixedPrecisionOptimizer: the fp16-weights mistake needs 16-bit params");
  }
  if (!(c.max_grad_norm >= 0.0)) throw InputError("MixedPrecisionOptimizer: max_grad_norm < 0");
}

}  // namespace

std::string_view bug_name(Bug b) { return kBugNames[static_cast<int>(b)]; }

Bug parse_bug(std::string_view text) {
  for (int i = 0; i < 4; ++i) {
    if (text == kBugNames[i]) return static_cast<Bug>(i);
  }
  throw InputError("unknown bug '" + std::string(text) +
                   "': one of none|clip-before-unscale|no-unscale|fp16-weights");
}

MixedPrecisionOptimizer::MixedPrecisionOptimizer(std::vector<Tensor> params,
                                                 std::vector<Tensor> grads,
                                                 MixedPrecisionConfig config)
    : config_(std::move(config)),
      params_(std::move(params)),
      grads_(std::move(grads)),
      scaler_(config_.scaler) {
  check_inputs(params_, grads_, config_);
  std::optional<HostMemoryScope> host;  // offload: every buffer below billed to the host
  if (config_.offload) host.emplace();
  const bool fp32 = params_.front().dtype() == DType::kF32;
  has_masters_ = !fp32 && config_.bug != Bug::kFp16Weights;
  copies_grads_ = !fp32;
  if (has_masters_) {
    stepped_ = fp32_like(params_, MemCategory::kMasterParams);
    copy_all(params_, stepped_);  // masters start as the working copy, widened exactly
  } else {
    stepped_ = params_;
  }
  grads32_ = copies_grads_ ? fp32_like(params_, MemCategory::kGradients) : grads_;
  if (config_.optimizer == OptimizerKind::kAdamW) {
    adamw_ = std::make_unique<AdamW>(stepped_, config_.adamw, config_.weight_decay_mask);
  } else {
    sgd_ = std::make_unique<Sgd>(stepped_, config_.sgd);
  }
}

std::int64_t MixedPrecisionOptimizer::step_count() const {
  return adamw_ ? adamw_->step_count() : sgd_->step_count();
}

void MixedPrecisionOptimizer::set_lr(double lr) {
  if (adamw_)
    adamw_->set_lr(lr);
  else
    sgd_->set_lr(lr);
}

double MixedPrecisionOptimizer::grad_norm() const {
  return grad_norm_fn_ ? grad_norm_fn_(grads32_) : global_grad_norm(grads32_);
}

void MixedPrecisionOptimizer::clip(StepReport& r) {
  r.grad_norm = grad_norm();
  r.clip_coef = clip_to_norm(grads32_, r.grad_norm, config_.max_grad_norm);
}

void MixedPrecisionOptimizer::optimizer_step() {
  if (adamw_)
    adamw_->step(grads32_);
  else
    sgd_->step(grads32_);
}

StepReport MixedPrecisionOptimizer::step() {
  StepReport r;
  r.scale = scaler_.scale();
  // 1. The backward's 16-bit gradients into FP32: divided by the scale in 16 bits they would
  //    underflow again (PyTorch refuses to unscale FP16 gradients for this reason).
  if (copies_grads_) copy_all(grads_, grads32_);
  const bool clipping = config_.max_grad_norm > 0.0;
  if (config_.bug == Bug::kClipBeforeUnscale && clipping) clip(r);  // the mistake: scaled norm
  // 2. Unscale and check for inf/NaN in one pass.
  if (config_.bug == Bug::kNoUnscale) {
    // The mistake: the check still runs (the scaler would otherwise never skip), the
    // multiplication by 1/scale is forgotten.
    r.found_inf = scaler_.mode() != ch02::ScaleMode::kNone && ch02::LossScaler::found_inf(grads32_);
  } else {
    r.found_inf = scaler_.unscale_and_check(grads32_);
  }
  if (found_inf_reducer_) r.found_inf = found_inf_reducer_(r.found_inf);
  // 3. Clip the unscaled gradients (skipped steps need no clipping: nothing is stepped).
  if (!r.found_inf && clipping && config_.bug != Bug::kClipBeforeUnscale) clip(r);
  if (!clipping && !r.found_inf) r.grad_norm = grad_norm();
  // 4. The scaler decides; a skipped step leaves masters, moments, t and the working copy.
  r.taken = scaler_.update(r.found_inf);
  if (!r.taken) return r;
  optimizer_step();
  // 5. Re-cast: the working copy is the masters rounded to 16 bits, every step.
  if (has_masters_) copy_all(stepped_, params_);
  return r;
}

}  // namespace mixpar::ch03
