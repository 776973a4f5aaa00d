// Exercise (chapter 3, last part): the delayed-scaling update of one FP8 tensor, Transformer
// Engine's DelayedScaling after a step. `history` holds the amaxes of the last steps, oldest
// first; the step's amax enters at the back and the oldest leaves (the length stays). Then
//   scale = (fp8_max / max(history)) / 2^margin,
// except that the previous scale stays when max(history) is 0 or not finite (a NaN anywhere in
// the history makes the max NaN), and a quotient beyond FP32 becomes FP32's largest value.
// Compute in FP32 (float). See ch03_master_weights/README.md, "FP8: a scale per tensor".
#pragma once

#include <vector>

namespace mixpar::exercises {

float delayed_scaling_update(std::vector<float>& history, float step_amax, float previous_scale,
                             float fp8_max, int margin);

}  // namespace mixpar::exercises
