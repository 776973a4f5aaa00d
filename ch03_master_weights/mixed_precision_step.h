// mixed_precision_step: the one correct step of a mixed-precision optimizer, run by both
// engines over optim/step_engine.h: the CPU's MixedPrecisionOptimizer::step (each multiply in
// place) and the GPU engine's (cuda/gpt_gpu.h's GpuAdamWStep: unscale and clip recorded and
// fused into its AdamW kernel). The order of torch.amp's recipe (scaler.unscale_,
// clip_grad_norm_, scaler.step, scaler.update) and of Megatron's MixedPrecisionOptimizer.step:
//   1. prepare: the backward's gradients in FP32
//   2. unscale by chapter 2's LossScaler::inv_scale and check for inf/NaN (no loss scaling:
//      nothing checked, GradScaler(enabled=False)); the replicas vote on the verdict
//   3. clip: clip_coefficient of the unscaled global norm (max_grad_norm > 0); the norm is
//      measured either way, for the log, unless the step is skipped (NaN)
//   4. the scaler decides: LossScaler::update backs off and skips on inf/NaN
//   5. a step taken: the optimizer's update of the FP32 masters, then the re-cast
// The lesson's mistakes (Bug) are made here, in the sequence, where each happens in real code:
// no engine knows about them.
#pragma once

#include "ch02_loss_scaling/loss_scaler.h"
#include "ch03_master_weights/mixed_precision_optimizer.h"
#include "optim/step_engine.h"

namespace mixpar::ch03 {

struct StepRules {
  double max_grad_norm = 0.0;  // > 0: clip the global norm to it
  Bug bug = Bug::kNone;        // kClipBeforeUnscale, kNoUnscale: the mistake made in the order
  // This rank's found-inf in, the step's verdict out (MixedPrecisionOptimizer's
  // set_found_inf_reducer: data parallelism's vote); empty: this rank decides alone.
  MixedPrecisionOptimizer::FoundInfReducer found_inf_vote = {};
};

StepReport mixed_precision_step(StepEngine& engine, ch02::LossScaler& scaler,
                                const StepRules& rules);

}  // namespace mixpar::ch03
