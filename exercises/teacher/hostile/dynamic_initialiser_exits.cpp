// A global initialised by a lambda that exits 0 before main: no suspicious name anywhere.
// Refused before linking: the object has an .init_array section.
// grade: refused .init_array
#include "ch02_dynamic_scale/dynamic_scale.h"

#include <cstdlib>

namespace mixpar::exercises {
namespace {
const int early = [] {
  std::_Exit(0);
  return 0;
}();
}  // namespace
bool update_scale(DynamicScale&, bool, std::int64_t) { return early == 0; }
}  // namespace mixpar::exercises
