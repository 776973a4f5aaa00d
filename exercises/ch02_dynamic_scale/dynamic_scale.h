// Exercise (chapter 2): the dynamic loss scaler's update rule, as PyTorch's GradScaler
// applies it after every step (torch/amp/grad_scaler.py, _amp_update_scale_):
//   found_inf: the step is skipped; scale <- scale x 0.5; growth_tracker <- 0
//   clean:     growth_tracker <- growth_tracker + 1; when it reaches growth_interval:
//              scale <- scale x 2 (unless that is inf in FP32); growth_tracker <- 0
// See ch02_loss_scaling/README.md, section 3.
#pragma once

#include <cstdint>

namespace mixpar::exercises {

struct DynamicScale {
  float scale = 65536.0f;  // 2^16, PyTorch's initial scale
  std::int64_t growth_tracker = 0;
};

// Applies one step's outcome to s; returns whether the step is taken (false: skipped).
bool update_scale(DynamicScale& s, bool found_inf, std::int64_t growth_interval);

}  // namespace mixpar::exercises
