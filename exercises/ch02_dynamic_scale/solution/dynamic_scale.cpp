#include "ch02_dynamic_scale/dynamic_scale.h"

#include <cmath>

namespace mixpar::exercises {

bool update_scale(DynamicScale& s, bool found_inf, std::int64_t growth_interval) {
  if (found_inf) {
    s.scale *= 0.5f;
    s.growth_tracker = 0;
    return false;
  }
  if (++s.growth_tracker == growth_interval) {
    const float grown = s.scale * 2.0f;
    if (std::isfinite(grown)) s.scale = grown;
    s.growth_tracker = 0;
  }
  return true;
}

}  // namespace mixpar::exercises
