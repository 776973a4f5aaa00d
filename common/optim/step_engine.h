// StepEngine: the operations a mixed-precision optimizer step is made of, offered by an engine
// over its own buffers. The step itself, its order and its decisions (found-inf, the replicas'
// vote, the clip coefficient, the scaler's verdict, the lesson's mistakes) is chapter 3's
// mixed_precision_step (ch03_master_weights/mixed_precision_step.h, with chapter 2's
// LossScaler), which both engines run: the CPU's MixedPrecisionOptimizer and the GPU engine
// (cuda/gpt_gpu.h's GpuAdamWStep, on the device or offloaded). Why the interface lives here
// and the step there: common/ never includes a chapter, so an engine in common/ can only offer
// what the step needs, and the chapter that owns the step drives it.
//
// Nothing device-specific crosses it: factors, a norm and a flag. An engine may do each
// multiply in place when asked (the CPU, as torch.amp's unscale_ and clip_grad_norm_ do) or
// record it and fuse it into its update (the GPU's AdamW kernel reads g * inv_scale * clip_coef,
// one pass over the gradients instead of three); either way grad_norm() reports the norm of the
// gradients as the calls so far have left them.
#pragma once

namespace mixpar {

class StepEngine {
 public:
  virtual ~StepEngine() = default;
  // Starts a step: the gradients backward left, in FP32 where the optimizer reads them (16-bit
  // gradients widened, exactly: divided by the scale in 16 bits they would underflow again;
  // Megatron's main_grad). Forgets any factor recorded by an earlier, skipped, step.
  virtual void prepare_fp32_grads() = 0;
  // Multiplies every gradient by inv_scale (left alone when it is exactly 1) and returns
  // whether one of them was inf or NaN before: GradScaler.unscale_'s found_inf. The caller
  // decides whether to check at all (no loss scaling: never).
  virtual bool unscale_and_check(float inv_scale) = 0;
  // The global L2 norm of the gradients as they now stand (FP64 sum of squares), the one the
  // clip compares with max_norm and the log reports.
  virtual double grad_norm() = 0;
  // Multiplies every gradient by coef (exactly 1: nothing), clip_grad_norm_'s second half.
  virtual void clip(double coef) = 0;
  // The optimizer's update of the FP32 masters (or of the parameters themselves) from the
  // gradients as they now stand. Called only for a step to be taken.
  virtual void optimizer_step() = 0;
  // The working copy re-cast from the masters (rounded to 16 bits); nothing without masters.
  // An engine may have done it inside optimizer_step.
  virtual void recast() = 0;
};

}  // namespace mixpar
