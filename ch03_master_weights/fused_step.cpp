#include "ch03_master_weights/fused_step.h"

#include <cmath>

#include "optim/clip.h"

namespace mixpar::ch03 {

StepReport fused_step(FusedStepEngine& engine, ch02::LossScaler& scaler, double max_grad_norm) {
  StepReport r;
  r.scale = scaler.scale();
  const double sum_sq = engine.scaled_sum_of_squares();
  r.found_inf = scaler.mode() != ch02::ScaleMode::kNone && !std::isfinite(sum_sq);
  const float inv_scale = scaler.inv_scale();
  if (!r.found_inf) {
    r.grad_norm = std::sqrt(sum_sq) * static_cast<double>(inv_scale);
    if (max_grad_norm > 0.0) r.clip_coef = clip_coefficient(r.grad_norm, max_grad_norm);
  }
  r.taken = scaler.update(r.found_inf);
  if (r.taken) engine.step(inv_scale, r.clip_coef);
  return r;
}

}  // namespace mixpar::ch03
