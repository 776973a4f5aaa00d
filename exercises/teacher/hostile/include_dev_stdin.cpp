// Issue 38's hang: the compile reads /dev/stdin, which blocks as long as stdin is open.
// Refused by name before compiling (an include outside the exercise's, the project's and the
// standard headers); the grader's compiles also run with stdin closed and a time limit.
// grade: refused includes "/dev/stdin"
#include "/dev/stdin"
#include "ch02_dynamic_scale/dynamic_scale.h"

namespace mixpar::exercises {
bool update_scale(DynamicScale&, bool, std::int64_t) { return true; }
}  // namespace mixpar::exercises
