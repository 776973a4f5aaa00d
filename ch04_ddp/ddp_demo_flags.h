// The flags of the chapter demo ch04_ddp, read and checked in one place (the fuzz harness
// fuzz/fuzz_tool_flags.cpp calls it as the demo does): every bad value is an InputError
// naming the flag, raised before the lesson prints or trains anything.
#pragma once

#include <string>

namespace mixpar::ch04 {

struct DdpDemoFlags {
  std::string bug;         // "all", "none" or one of bug_names()
  int ranks = 0;           // 2..8 rank threads
  int steps = 0;           // 2..1000 steps of each DDP run
  std::string trace_path;  // "" = no --trace
  std::string json_path;   // "" = no --json
};

// Parses argv (--help prints the usage and exits 0) and checks every value.
DdpDemoFlags parse_ddp_demo_flags(int argc, char** argv);

}  // namespace mixpar::ch04
