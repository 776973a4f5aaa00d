// A function run before main by attribute: it exits 0 before any test ran. Refused by name
// before compiling (__attribute__, constructor).
// grade: refused '__attribute__'
#include "ch02_dynamic_scale/dynamic_scale.h"

#include <cstdlib>

namespace mixpar::exercises {
namespace {
__attribute__((constructor)) void leave() { std::_Exit(0); }
}  // namespace
bool update_scale(DynamicScale&, bool, std::int64_t) { return true; }
}  // namespace mixpar::exercises
