#include "ch03_delayed_scaling/delayed_scaling.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mixpar::exercises {

float delayed_scaling_update(std::vector<float>& history, float step_amax, float previous_scale,
                             float fp8_max, int margin) {
  if (!history.empty()) {
    std::rotate(history.begin(), history.begin() + 1, history.end());
    history.back() = step_amax;
  }
  float amax = 0;
  for (float a : history) {
    if (std::isnan(a)) amax = a;
    if (!std::isnan(amax)) amax = std::max(amax, a);
  }
  if (!(amax > 0) || !std::isfinite(amax)) return previous_scale;
  const float scale = (fp8_max / amax) / std::ldexp(1.0f, margin);
  return std::isinf(scale) ? std::numeric_limits<float>::max() : scale;
}

}  // namespace mixpar::exercises
