// 'main' spelled across a line splice (a backslash-newline the preprocessor removes) to get
// past a search for the word. Refused by name before compiling: lines are joined first, as the
// compiler joins them.
// grade: refused 'main'
#include "ch02_dynamic_scale/dynamic_scale.h"

namespace mixpar::exercises {
bool update_scale(DynamicScale&, bool, std::int64_t) { return true; }
}  // namespace mixpar::exercises

int ma\
in() { return 0; }
