#include "ch03_master_weights/mixed_precision_step.h"

#include "optim/clip.h"

namespace mixpar::ch03 {
namespace {

// clip_grad_norm_ over the engine: the norm as the gradients stand, the coefficient from it.
void clip(StepEngine& engine, double max_grad_norm, StepReport& r) {
  r.grad_norm = engine.grad_norm();
  r.clip_coef = clip_coefficient(r.grad_norm, max_grad_norm);
  engine.clip(r.clip_coef);
}

}  // namespace

StepReport mixed_precision_step(StepEngine& engine, ch02::LossScaler& scaler,
                                const StepRules& rules) {
  StepReport r;
  r.scale = scaler.scale();
  // 1. FP32 gradients: divided by the scale in 16 bits they would underflow again (PyTorch
  //    refuses to unscale FP16 gradients for this reason).
  engine.prepare_fp32_grads();
  const bool clipping = rules.max_grad_norm > 0.0;
  // The mistake: the norm compared with max_norm is the scaled one.
  if (rules.bug == Bug::kClipBeforeUnscale && clipping) clip(engine, rules.max_grad_norm, r);
  // 2. Unscale and check in one pass. The kNoUnscale mistake: the check still runs (the
  //    scaler would otherwise never skip), the multiplication by 1/scale is forgotten.
  if (scaler.mode() != ch02::ScaleMode::kNone) {
    r.found_inf =
        engine.unscale_and_check(rules.bug == Bug::kNoUnscale ? 1.0f : scaler.inv_scale());
  }
  if (rules.found_inf_vote) r.found_inf = rules.found_inf_vote(r.found_inf);
  // 3. Clip the unscaled gradients (skipped steps need no clipping: nothing is stepped).
  if (!r.found_inf && clipping && rules.bug != Bug::kClipBeforeUnscale) {
    clip(engine, rules.max_grad_norm, r);
  }
  if (!clipping && !r.found_inf) r.grad_norm = engine.grad_norm();
  // 4. The scaler decides; a skipped step leaves masters, moments, t and the working copy.
  r.taken = scaler.update(r.found_inf);
  if (!r.taken) return r;
  engine.optimizer_step();
  // 5. Re-cast: the working copy is the masters rounded to 16 bits, every step.
  engine.recast();
  return r;
}

}  // namespace mixpar::ch03
