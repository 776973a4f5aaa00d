// The flags of the chapter demo ch05_zero, read and checked in one place (the fuzz harness
// fuzz/fuzz_tool_flags.cpp calls it as the demo does): every bad value is an InputError
// naming the flag, raised before the lesson prints or trains anything.
#pragma once

#include <string>

namespace mixpar::ch05 {

struct ZeroDemoFlags {
  std::string bug;  // "all", "none" or one failure mode's name (bug_name)
  int ranks = 0;    // 2..8 rank threads of the failure modes
};

// Parses argv (--help prints the usage and exits 0) and checks every value.
ZeroDemoFlags parse_zero_demo_flags(int argc, char** argv);

}  // namespace mixpar::ch05
