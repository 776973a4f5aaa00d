// The flags of the chapter demo ch07_pipeline, read and checked in one place (the fuzz harness
// fuzz/fuzz_tool_flags.cpp calls it as the demo does): every bad value, and a --schedule whose
// layout cannot run (make_plan and the pre-flight play refuse it), is an InputError naming
// what is wrong, raised before the demo prints anything.
#pragma once

#include <optional>
#include <string>

#include "ch07_pipeline/pipeline_schedule.h"

namespace mixpar::ch07 {

struct PipelineDemoFlags {
  int pp = 0;              // p, 2..64
  int micro_batches = 0;   // m, 1..256
  int virtual_stages = 0;  // v, 1..16
  std::string bug;         // "all", "none" or one of bug_names()
  bool json = false;       // only with --schedule
  // --schedule NAME: that schedule's plan for (p, m, v), through the pre-flight play.
  std::optional<PipelinePlan> plan;
};

// Parses argv (--help prints the usage and exits 0) and checks every value.
PipelineDemoFlags parse_pipeline_demo_flags(int argc, char** argv);

}  // namespace mixpar::ch07
