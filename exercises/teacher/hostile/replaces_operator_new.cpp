// A global operator new of its own (it could count, or rewrite, what the tests allocate):
// a symbol outside namespace mixpar::exercises, refused before linking.
// grade: refused _Znwm
#include "ch02_dynamic_scale/dynamic_scale.h"

#include <cstdlib>
#include <new>

void* operator new(std::size_t n) {
  if (void* p = std::malloc(n)) return p;
  throw std::bad_alloc();
}

namespace mixpar::exercises {
bool update_scale(DynamicScale&, bool, std::int64_t) { return true; }
}  // namespace mixpar::exercises
