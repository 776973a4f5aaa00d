// The flags of the tool fpx, read and checked in one place (the fuzz harness
// fuzz/fuzz_tool_flags.cpp calls it as fpx does): every bad value is an InputError.
#pragma once

#include <vector>

#include "fp_report.h"

namespace mixpar::ch01 {

struct FpxFlags {
  std::vector<InputValue> values;  // the positionals, each as given and parsed
  bool table = false;
  bool json = false;
};

// Parses argv (--help prints the usage and exits 0); refuses a value that is not a number
// and a command line with neither a value nor --table.
FpxFlags parse_fpx_flags(int argc, char** argv);

}  // namespace mixpar::ch01
