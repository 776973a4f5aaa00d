#include "ch08_model_flops/model_flops.h"

namespace mixpar::exercises {

double step_model_flops(const FlopsLayout& l) {
  // Write this: FLOPs per token (the header's two terms) x tokens per step.
  (void)l;
  return 0.0;
}

double mfu(double flops_per_step, double step_seconds, double peak_flops_per_s) {
  // Write this: the share of the peak the step's model FLOPs reached.
  (void)flops_per_step;
  (void)step_seconds;
  (void)peak_flops_per_s;
  return 0.0;
}

}  // namespace mixpar::exercises
