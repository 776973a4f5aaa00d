// Exercise (chapter 3): the clip coefficient of clipping by global norm, with PyTorch's
// clip_grad_norm_ semantics: max_norm / (total_norm + 1e-6), clamped to at most 1 (never
// scales gradients up), NaN staying NaN. It is only right on UNSCALED gradients: on scaled ones
// total_norm is S times too large. See ch03_master_weights/README.md, section 2.
#pragma once

namespace mixpar::exercises {

double clip_coefficient(double total_norm, double max_norm);

}  // namespace mixpar::exercises
