#include "ch03_clip_coefficient/clip_coefficient.h"

namespace mixpar::exercises {

double clip_coefficient(double total_norm, double max_norm) {
  const double coef = max_norm / (total_norm + 1e-6);
  return coef < 1.0 ? coef : (coef >= 1.0 ? 1.0 : coef);  // NaN fails both: stays NaN
}

}  // namespace mixpar::exercises
