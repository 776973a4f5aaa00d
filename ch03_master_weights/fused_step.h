// fused_step: the one correct step of mixed_precision_optimizer.h for an engine that fuses the
// unscale and the clip into its optimizer update (optim/fused_step.h: the GPU engine, on the
// device or offloaded). The same decisions in the same order, with chapter 2's scaler:
//   1. found-inf and the norm from one FP64 sum of squares of the scaled gradients
//   2. unscale: the norm times the scaler's inv_scale (1/S in FP64, rounded to FP32)
//   3. clip: clip_coefficient of the unscaled norm (max_grad_norm > 0)
//   4. the scaler decides: LossScaler::update backs off and skips on inf/NaN
//   5. a step taken: the engine's update, unscale and clip factors fused into it
// The CPU's MixedPrecisionOptimizer unscales and clips its FP32 gradients in place and sums
// the unscaled ones instead: the same step up to the rounding of those multiplies.
#pragma once

#include "ch02_loss_scaling/loss_scaler.h"
#include "ch03_master_weights/mixed_precision_optimizer.h"
#include "optim/fused_step.h"

namespace mixpar::ch03 {

// In ScaleMode::kNone nothing is checked (found_inf false, every step taken), as
// MixedPrecisionOptimizer::step; a skipped step reports no norm (NaN) and coefficient 1.
StepReport fused_step(FusedStepEngine& engine, ch02::LossScaler& scaler, double max_grad_norm);

}  // namespace mixpar::ch03
