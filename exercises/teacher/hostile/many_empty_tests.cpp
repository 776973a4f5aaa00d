// Forgery (c) of issue 38: 45 empty tests that pass, against the exercise's 5 failing ones
// (9/10 under per-test weighting when every test that ran was counted). Refused by name
// before compiling (TEST); and tests the rubric does not name earn nothing.
// grade: refused 'TEST'
#include "ch02_dynamic_scale/dynamic_scale.h"

#include <gtest/gtest.h>

namespace mixpar::exercises {

bool update_scale(DynamicScale&, bool, std::int64_t) { return true; }

TEST(Padding, Empty0) {}
TEST(Padding, Empty1) {}
TEST(Padding, Empty2) {}
TEST(Padding, Empty3) {}
TEST(Padding, Empty4) {}
TEST(Padding, Empty5) {}
TEST(Padding, Empty6) {}
TEST(Padding, Empty7) {}
TEST(Padding, Empty8) {}
TEST(Padding, Empty9) {}
TEST(Padding, Empty10) {}
TEST(Padding, Empty11) {}
TEST(Padding, Empty12) {}
TEST(Padding, Empty13) {}
TEST(Padding, Empty14) {}
TEST(Padding, Empty15) {}
TEST(Padding, Empty16) {}
TEST(Padding, Empty17) {}
TEST(Padding, Empty18) {}
TEST(Padding, Empty19) {}
TEST(Padding, Empty20) {}
TEST(Padding, Empty21) {}
TEST(Padding, Empty22) {}
TEST(Padding, Empty23) {}
TEST(Padding, Empty24) {}
TEST(Padding, Empty25) {}
TEST(Padding, Empty26) {}
TEST(Padding, Empty27) {}
TEST(Padding, Empty28) {}
TEST(Padding, Empty29) {}
TEST(Padding, Empty30) {}
TEST(Padding, Empty31) {}
TEST(Padding, Empty32) {}
TEST(Padding, Empty33) {}
TEST(Padding, Empty34) {}
TEST(Padding, Empty35) {}
TEST(Padding, Empty36) {}
TEST(Padding, Empty37) {}
TEST(Padding, Empty38) {}
TEST(Padding, Empty39) {}
TEST(Padding, Empty40) {}
TEST(Padding, Empty41) {}
TEST(Padding, Empty42) {}
TEST(Padding, Empty43) {}
TEST(Padding, Empty44) {}

}  // namespace mixpar::exercises
