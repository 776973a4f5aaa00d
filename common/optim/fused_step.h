// FusedStepEngine: what a mixed-precision step asks of an engine that fuses unscaling and
// clipping into its optimizer update (the GPU engine, cuda/gpt_gpu.h, on the device or with its
// optimizer offloaded to the host). The step itself, its order and its decisions, is chapter
// 3's (ch03_master_weights/fused_step.h: the scaler's 1/S and verdict are chapter 2's
// LossScaler). Why the interface lives here and the step there: common/ never includes a
// chapter, so the engine in common/ can only offer what the step needs, through this class,
// and the chapter that owns the step drives it. Nothing device-specific crosses it: a sum and
// two factors.
#pragma once

namespace mixpar {

class FusedStepEngine {
 public:
  virtual ~FusedStepEngine() = default;
  // The sum over every gradient element of g^2 in FP64, of the gradients as backward left them
  // (still scaled by the loss scale). FP64 squares of finite floats cannot overflow a sum of
  // any model's size, so a non-finite sum means an inf or NaN gradient: the found-inf check
  // and the norm in one pass (one 8-byte read back on a GPU, like GradScaler's
  // found_inf.item()).
  virtual double scaled_sum_of_squares() = 0;
  // One optimizer step on the gradients multiplied by inv_scale and then by clip_coef (1: not
  // clipped), the working copy re-cast from the masters. Called only for a step to be taken.
  virtual void step(float inv_scale, double clip_coef) = 0;
};

}  // namespace mixpar
