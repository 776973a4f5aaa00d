// MixedPrecisionOptimizer: its buffers, and the CPU's StepEngine over them. The step's order
// (torch.amp's recipe, Megatron's MixedPrecisionOptimizer.step) and the bug switches are
// mixed_precision_step's; what is here is each operation done in place on the CPU.
#include "mixed_precision_optimizer.h"

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "ch03_master_weights/mixed_precision_step.h"
#include "ops/convert16.h"
#include "ops/elementwise.h"
#include "optim/clip.h"
#include "util/errors.h"

namespace mixpar::ch03 {
namespace {

constexpr std::string_view kBugNames[] = {"none", "clip-before-unscale", "no-unscale",
                                          "fp16-weights"};

// dst[i] <- src[i], rounded into dst's dtype. On the CPU through ops::convert16 (the vector
// units and the OpenMP threads, the bits of Tensor::copy_from's scalar conversion): the two
// copies of every parameter per step (gradients in, masters out) took 2% of a bf16 step.
// Entries marked in `skip` (FP32 parameters, their own masters) are the same tensor on both
// sides and are left alone.
void copy_all(const std::vector<Tensor>& src, const std::vector<Tensor>& dst,
              const std::vector<bool>& skip = {}) {
  for (std::size_t i = 0; i < src.size(); ++i) {
    if (i < skip.size() && skip[i]) continue;
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

// An FP32 tensor of each of ts, zeros; those marked in `own` (FP32 already) are ts' own.
std::vector<Tensor> fp32_like(const std::vector<Tensor>& ts, MemCategory category,
                              const std::vector<bool>& own = {}) {
  std::vector<Tensor> out;
  out.reserve(ts.size());
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const bool same = i < own.size() && own[i];
    out.push_back(same ? ts[i] : Tensor::zeros(ts[i].shape(), DType::kF32, category));
  }
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
    // An FP32 parameter may stand beside a 16-bit working copy (its own master).
    const bool dtype_ok = params[i].dtype() == working || params[i].dtype() == DType::kF32;
    if (!dtype_ok || grads[i].dtype() != params[i].dtype() ||
        grads[i].numel() != params[i].numel()) {
      throw InputError("MixedPrecisionOptimizer: parameter " + std::to_string(i) +
                       " and its gradient must share the working dtype (or both be f32) and "
                       "size");
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
  // FP32 parameters beside a 16-bit working copy (chapter 9's router and experts, kept in
  // FP32 and cast per use) are their own masters, their gradients their own FP32 copies.
  for (const Tensor& p : params_) own_fp32_.push_back(!fp32 && p.dtype() == DType::kF32);
  if (has_masters_) {
    stepped_ = fp32_like(params_, MemCategory::kMasterParams, own_fp32_);
    copy_all(params_, stepped_, own_fp32_);  // masters start as the working copy, widened exactly
  } else {
    stepped_ = params_;
  }
  grads32_ = copies_grads_ ? fp32_like(grads_, MemCategory::kGradients, own_fp32_) : grads_;
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

void MixedPrecisionOptimizer::prepare_fp32_grads() {
  if (copies_grads_) copy_all(grads_, grads32_, own_fp32_);
}

// GradScaler.unscale_ on the FP32 copies: chapter 2's LossScaler::unscale_and_check when the
// step asks for the scaler's own 1/S (the correct step). Any other factor (1: the no-unscale
// mistake's check alone) is the same check of the scaled values, then the multiply.
bool MixedPrecisionOptimizer::unscale_and_check(float inv_scale) {
  if (inv_scale == scaler_.inv_scale()) return scaler_.unscale_and_check(grads32_);
  const bool inf = ch02::LossScaler::found_inf(grads32_);
  if (inv_scale != 1.0f) {
    for (Tensor g : grads32_) ops::scale(g, inv_scale);  // a handle: scaled in place
  }
  return inf;
}

double MixedPrecisionOptimizer::grad_norm() {
  return grad_norm_fn_ ? grad_norm_fn_(grads32_) : global_grad_norm(grads32_);
}

void MixedPrecisionOptimizer::clip(double coef) { scale_grads(grads32_, coef); }

void MixedPrecisionOptimizer::optimizer_step() {
  if (adamw_)
    adamw_->step(grads32_);
  else
    sgd_->step(grads32_);
}

void MixedPrecisionOptimizer::recast() {
  if (has_masters_) copy_all(stepped_, params_, own_fp32_);
}

StepReport MixedPrecisionOptimizer::step() {
  return mixed_precision_step(engine(), scaler_,
                              {config_.max_grad_norm, config_.bug, found_inf_reducer_});
}

}  // namespace mixpar::ch03
