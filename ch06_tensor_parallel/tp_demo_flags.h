// The flags of the chapter demo ch06_tensor_parallel, read and checked in one place (the fuzz
// harness fuzz/fuzz_tool_flags.cpp calls it as the demo does): every bad value is an
// InputError naming the flag, raised before the lesson prints or trains anything.
#pragma once

#include <string>
#include <vector>

namespace mixpar::ch06 {

// The failure modes the demo shows (--bug NAME), in the order it shows them: tensor
// parallelism's, then context parallelism's (cp_report.h's cp_demo_bugs()).
const std::vector<std::string>& tp_demo_bugs();

struct TpDemoFlags {
  std::string bug;        // "all", "none" or one of tp_demo_bugs()
  int steps = 0;          // 2..200 training steps of each run
  std::string json_path;  // "" = no --json
};

// Parses argv (--help prints the usage and exits 0) and checks every value.
TpDemoFlags parse_tp_demo_flags(int argc, char** argv);

}  // namespace mixpar::ch06
