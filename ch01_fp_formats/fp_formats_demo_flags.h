// The flags of the chapter demo ch01_fp_formats, read and checked in one place (the fuzz
// harness fuzz/fuzz_tool_flags.cpp calls it as the demo does): every bad value is an
// InputError naming the flag, raised before the first line of the lesson is printed.
#pragma once

#include <string>

#include "gemm_lesson.h"

namespace mixpar::ch01 {

// The values as the sections take them (the defaults are the flags', in the .cpp).
struct FpFormatsDemoFlags {
  std::string json_path;  // "" = no --json
  double update = 0;      // section 5: added to the weight 0.5
  double acc_value = 0;   // section 6: summed acc_count times (stored in FP16)
  int acc_count = 0;
  int gemm_m = 0, gemm_n = 0, gemm_k = 0;  // section 7
  GemmInputs gemm_inputs = GemmInputs::kPositive;
};

// Parses argv (--help prints the usage and exits 0) and checks every value.
FpFormatsDemoFlags parse_fp_formats_demo_flags(int argc, char** argv);

}  // namespace mixpar::ch01
