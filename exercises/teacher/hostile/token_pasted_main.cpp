// 'main' made by token pasting in a macro. Refused by name before compiling (#define: the only
// directive a student file may use is #include).
// grade: refused (#define)
#include "ch02_dynamic_scale/dynamic_scale.h"

#define JOIN(a, b) a##b

namespace mixpar::exercises {
bool update_scale(DynamicScale&, bool, std::int64_t) { return true; }
}  // namespace mixpar::exercises

int JOIN(ma, in)() { return 0; }
