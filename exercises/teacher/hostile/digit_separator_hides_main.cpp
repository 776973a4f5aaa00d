// Digit separators (1'000) read as character literals by a naive scanner would hide 'main'
// between two of them. The scanner knows separators, and the object check refuses a strong
// 'main' outside namespace mixpar::exercises anyway.
// grade: refused 'main'
#include "ch02_dynamic_scale/dynamic_scale.h"

namespace mixpar::exercises {
bool update_scale(DynamicScale&, bool, std::int64_t) { return true; }
}  // namespace mixpar::exercises

int main() { return 1'000 - 1'000; }
