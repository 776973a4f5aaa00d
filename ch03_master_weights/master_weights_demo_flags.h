// The flags of the chapter demo ch03_master_weights, read and checked in one place (the fuzz
// harness fuzz/fuzz_tool_flags.cpp calls it as the demo does): every bad value is an
// InputError naming the flag, raised before the lesson prints or trains anything.
#pragma once

#include <string>

#include "order_lesson.h"

namespace mixpar::ch03 {

struct MasterWeightsDemoFlags {
  std::string bug;        // "all" or one mistake's name (bug_name, fp8_bug_names)
  bool fp8 = false;       // the FP8 part (--fp8, or an FP8 --bug)
  LessonConfig lesson;    // steps
  std::string json_path;  // "" = no --json
};

// Parses argv (--help prints the usage and exits 0) and checks every value.
MasterWeightsDemoFlags parse_master_weights_demo_flags(int argc, char** argv);

}  // namespace mixpar::ch03
