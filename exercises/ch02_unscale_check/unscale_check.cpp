#include "ch02_unscale_check/unscale_check.h"

namespace mixpar::exercises {

bool unscale_and_check(std::vector<std::vector<float>>& grads, float scale) {
  // Write this: the check and the multiplication of the header.
  (void)grads;
  (void)scale;
  return false;
}

}  // namespace mixpar::exercises
