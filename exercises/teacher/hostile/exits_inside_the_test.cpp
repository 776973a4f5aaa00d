// The graded function exits the process with code 0 in the middle of the test, before
// GoogleTest could record a failure. Compiles and runs; no verdict line comes back, so every
// test fails.
// grade: graded exited 0 without a verdict
#include "ch02_dynamic_scale/dynamic_scale.h"

#include <cstdlib>

namespace mixpar::exercises {
bool update_scale(DynamicScale&, bool, std::int64_t) { std::_Exit(0); }
}  // namespace mixpar::exercises
