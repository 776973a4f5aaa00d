// Forgery (b) of issue 38: the file defines its own main, which runs a test of its own (or
// none) and exits 0. Refused by name before compiling ('main', 'testing', '#include <gtest>').
// grade: refused 'main'
#include "ch02_dynamic_scale/dynamic_scale.h"

#include <gtest/gtest.h>

namespace mixpar::exercises {
bool update_scale(DynamicScale&, bool, std::int64_t) { return true; }
}  // namespace mixpar::exercises

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  testing::GTEST_FLAG(filter) = "Nothing.*";
  return RUN_ALL_TESTS();
}
