// MixedPrecisionOptimizer: FP32 master weights behind a 16-bit working copy, and the one
// correct step: unscale -> check inf/NaN (skip) -> clip (global norm) -> step the masters ->
// re-cast the working copy. FP32 AdamW or SGD moments from common/optim, the scaler from ch02.
// The step's sequence is mixed_precision_step (mixed_precision_step.h), which the GPU engine
// runs too; this class is the CPU's StepEngine under it, every multiply in place on its FP32
// gradients. Bug switches reproduce the three classic mistakes so the lesson can show their
// symptoms.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "ch02_loss_scaling/loss_scaler.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "optim/step_engine.h"
#include "tensor/tensor.h"

namespace mixpar::ch03 {

enum class Bug : std::uint8_t {
  kNone,
  // Clip the still-scaled gradients, then unscale: the norm compared with max_norm is
  // scale x the true norm, so the true-norm threshold becomes max_norm / scale and the
  // gradients end at norm max_norm / scale (clipped every step, updates shrunk).
  kClipBeforeUnscale,
  // Never multiply by 1/scale: the optimizer sees scale x the gradient. SGD's step grows by
  // the scale (divergence); Adam's m / sqrt(v) cancels it, except that eps shrinks by it.
  kNoUnscale,
  // No FP32 masters: the optimizer updates the 16-bit weights in place, and every update
  // below half an ulp of the weight is rounded away (0.5 + 1e-7 == 0.5 in FP16).
  kFp16Weights,
};
std::string_view bug_name(Bug b);  // "none" | "clip-before-unscale" | "no-unscale" | "fp16-weights"
Bug parse_bug(std::string_view text);  // inverse of bug_name; InputError listing the choices

enum class OptimizerKind : std::uint8_t { kAdamW, kSgd };

struct MixedPrecisionConfig {
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  AdamWConfig adamw;
  // AdamW only: which parameters are decayed (empty: all). GPT-2 recipes decay the 2-D
  // weights (linear layers, embeddings) and never biases or LayerNorm gains.
  std::vector<bool> weight_decay_mask;
  SgdConfig sgd;
  double max_grad_norm = 0.0;  // > 0: clip_grad_norm_ on the unscaled FP32 gradients
  ch02::LossScalerConfig scaler = ch02::pytorch_config();  // no_scaling_config() for bf16/fp32
  Bug bug = Bug::kNone;
  // Optimizer offload (ZeRO-Offload, Ren et al. 2021): everything the optimizer allocates, the
  // FP32 masters, the FP32 gradient copy and the moments, is host memory (HostMemoryScope: the
  // ledger's host side); the model's working copy and its gradients stay on the device. The
  // step is the same arithmetic on the same values: bit-identical to no offload.
  bool offload = false;
};

// What one step did: the five-signals material of a training log.
struct StepReport {
  bool taken = false;  // false: skipped (inf/NaN), nothing changed but the scaler
  bool found_inf = false;
  float scale = 1.0f;  // the loss scale this step's gradients carried
  // The global norm of the gradients the optimizer would read, before clipping (scaled units
  // under kClipBeforeUnscale and kNoUnscale); NaN when not measured (a skipped step).
  double grad_norm = std::numeric_limits<double>::quiet_NaN();
  double clip_coef = 1.0;  // what the gradients were multiplied by (1: not clipped)
};

class MixedPrecisionOptimizer : private StepEngine {
 public:
  // params: the model's working copy (f32, f16 or bf16), which forward and backward use;
  // grads: the gradients backward writes, one per parameter, same shapes. With 16-bit params
  // the optimizer allocates FP32 masters (MemCategory::kMasterParams, copied from params) and
  // FP32 gradient buffers (kGradients: the unscaled values need FP32's range; Megatron's
  // main_grad). With f32 params the parameters are the masters and nothing is copied; so too
  // for an f32 parameter among 16-bit ones (the working dtype is params.front()'s).
  // The kFp16Weights mistake is about 16-bit masters: its f32 parameters step as themselves.
  // InputError on an inconsistent config (e.g. kFp16Weights with f32 params).
  MixedPrecisionOptimizer(std::vector<Tensor> params, std::vector<Tensor> grads,
                          MixedPrecisionConfig config);

  // The factor to multiply the loss by before backward (Mlp::backward's loss_scale).
  float loss_scale() const { return scaler_.scale(); }
  // One optimizer step from the gradients backward left in `grads`: mixed_precision_step over
  // engine(), with this config's max_grad_norm and bug and the installed found-inf reducer.
  StepReport step();
  // The CPU engine step() runs the sequence over: these tensors, unscaled (by scaler()'s
  // unscale_and_check: run the sequence with scaler()), measured (through the installed
  // GradNormFn), clipped, stepped and re-cast in place.
  StepEngine& engine() { return *this; }
  // The learning rate of the next step (a schedule sets it before each step).
  void set_lr(double lr);

  // Decides, with the other replicas, whether this step is skipped: called with this rank's
  // inf/NaN check between unscaling and the scaler's update, its answer is what the scaler and
  // the step obey. Data parallelism installs a boolean vote here (comm/control.h's any_true),
  // so that one rank's overflow skips every rank's step and the scales stay equal (chapter 4).
  // Default: none.
  using FoundInfReducer = std::function<bool(bool local_found_inf)>;
  void set_found_inf_reducer(FoundInfReducer reducer) { found_inf_reducer_ = std::move(reducer); }
  // Measures the global gradient norm from this rank's FP32 gradients (unscaled). Default:
  // global_grad_norm over all of them. Split models install one that sums each element's
  // square once over the ranks that hold it (common/parallel/count_once.h) and all-reduces.
  using GradNormFn = std::function<double(std::span<const Tensor> grads32)>;
  void set_grad_norm_fn(GradNormFn fn) { grad_norm_fn_ = std::move(fn); }

  const MixedPrecisionConfig& config() const { return config_; }
  bool has_masters() const { return has_masters_; }
  // The tensors the optimizer updates: FP32 masters, or the params themselves (f32 params,
  // or kFp16Weights), and the FP32 gradients it reads.
  const std::vector<Tensor>& stepped_params() const { return stepped_; }
  const std::vector<Tensor>& fp32_grads() const { return grads32_; }
  std::int64_t step_count() const;  // the optimizer's t (skipped steps do not count)
  const AdamW* adamw() const { return adamw_.get(); }  // null unless OptimizerKind::kAdamW
  AdamW* adamw() { return adamw_.get(); }  // resuming: step count and moments
  const Sgd* sgd() const { return sgd_.get(); }
  ch02::LossScaler& scaler() { return scaler_; }
  const ch02::LossScaler& scaler() const { return scaler_; }

 private:
  // StepEngine, on the CPU: the FP32 copy by ops::convert16, unscale and check by chapter 2's
  // LossScaler, the clip's multiply by scale_grads in place, the norm by grad_norm_fn_
  // (default global_grad_norm), AdamW or SGD, the re-cast by ops::convert16.
  void prepare_fp32_grads() override;
  bool unscale_and_check(float inv_scale) override;
  double grad_norm() override;
  void clip(double coef) override;
  void optimizer_step() override;
  void recast() override;
  MixedPrecisionConfig config_;
  std::vector<Tensor> params_, grads_;  // the model's working copy and its gradients
  std::vector<Tensor> stepped_;         // what the optimizer updates
  std::vector<Tensor> grads32_;         // what the optimizer reads
  bool has_masters_ = false;
  bool copies_grads_ = false;  // grads_ are 16-bit: copied into grads32_ each step
  std::vector<bool> own_fp32_;  // by parameter: FP32 beside 16-bit ones, its own master
  ch02::LossScaler scaler_;
  FoundInfReducer found_inf_reducer_;
  GradNormFn grad_norm_fn_;
  std::unique_ptr<AdamW> adamw_;
  std::unique_ptr<Sgd> sgd_;
};

}  // namespace mixpar::ch03
