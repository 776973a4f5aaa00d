// Exercise (chapter 2): the unscale step of dynamic loss scaling, as PyTorch's
// GradScaler.unscale_ does it (torch/amp/grad_scaler.py and the kernel
// _amp_foreach_non_finite_check_and_unscale_) before the optimizer reads the gradients:
//   - the result says whether ANY gradient element is inf or NaN (found_inf): the step is then
//     skipped and the scale backs off (the other exercise of this chapter, ch02_dynamic_scale);
//   - every element is multiplied, in FP32, by inv_scale: 1/scale computed in FP64 and rounded
//     to FP32 once (PyTorch computes the reciprocal in double: "FP32 division can be imprecise
//     for certain compile options"). Multiplying by the rounded reciprocal is not the same as
//     dividing by scale when the scale is not a power of two: the tests compare bit for bit;
//   - when inv_scale is exactly 1 the gradients are left alone (the kernel's shortcut);
//   - the gradients are unscaled whether or not an inf was found (a skipped step never reads
//     them, and the next backward overwrites them).
// See ch02_loss_scaling/README.md and chapter 2's LossScaler::unscale_and_check
// (ch02_loss_scaling/loss_scaler.h), which the tests compare with.
#pragma once

#include <vector>

namespace mixpar::exercises {

// grads: the model's FP32 gradients, one vector per parameter, scaled by `scale` (> 0); they are
// unscaled in place. Returns found_inf.
bool unscale_and_check(std::vector<std::vector<float>>& grads, float scale);

}  // namespace mixpar::exercises
