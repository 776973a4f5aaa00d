// The graded function never returns. Each test is stopped at --test-timeout and fails; the
// other exercises and students are still graded.
// grade: graded (--test-timeout)
#include "ch02_dynamic_scale/dynamic_scale.h"

#include <atomic>

namespace mixpar::exercises {
bool update_scale(DynamicScale& s, bool, std::int64_t) {
  std::atomic<float> spin{s.scale};
  for (;;) spin.store(spin.load() + 1.0f);
}
}  // namespace mixpar::exercises
