// '%:' is the digraph of '#': an include written with it is an include. Refused by name
// before compiling like any include outside the exercise.
// grade: refused includes "/etc/passwd"
%:include "/etc/passwd"
#include "ch02_dynamic_scale/dynamic_scale.h"

namespace mixpar::exercises {
bool update_scale(DynamicScale&, bool, std::int64_t) { return true; }
}  // namespace mixpar::exercises
