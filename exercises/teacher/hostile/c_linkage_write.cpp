// A C-linkage write() of its own would replace the C library's and see (and rewrite) the
// grader's main's verdict. Refused by name before compiling (extern), and its symbol before
// linking.
// grade: refused 'extern'
#include "ch02_dynamic_scale/dynamic_scale.h"

#include <cstddef>

extern "C" long write(int, const void*, std::size_t) { return 0; }

namespace mixpar::exercises {
bool update_scale(DynamicScale&, bool, std::int64_t) { return true; }
}  // namespace mixpar::exercises
