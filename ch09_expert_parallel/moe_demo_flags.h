// The flags of the chapter demo ch09_expert_parallel, read and checked in one place: a bad
// value is an InputError naming it, raised before the demo prints anything.
#pragma once

#include <string>

namespace mixpar::ch09 {

struct MoeDemoFlags {
  std::string bug;        // "all", "none" or one of bug_names()
  std::string json_path;  // "" = no --json (the figures' data, scripts/figures.py)
};

// Parses argv (--help prints the usage and exits 0) and checks every value.
MoeDemoFlags parse_moe_demo_flags(int argc, char** argv);

}  // namespace mixpar::ch09
