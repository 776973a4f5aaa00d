// The flags of the chapter demo ch02_loss_scaling, read and checked in one place (the fuzz
// harness fuzz/fuzz_tool_flags.cpp calls it as the demo does): every bad value is an
// InputError naming the flag, raised before the lesson prints or trains anything.
#pragma once

#include <string>

#include "scaling_lesson.h"

namespace mixpar::ch02 {

struct LossScalingDemoFlags {
  LessonConfig lesson;    // steps, loss weight, the static scales, growth interval, lr
  std::string json_path;  // "" = no --json
};

// Parses argv (--help prints the usage and exits 0) and checks every value, the loss
// scalers the lesson builds from them included.
LossScalingDemoFlags parse_loss_scaling_demo_flags(int argc, char** argv);

}  // namespace mixpar::ch02
