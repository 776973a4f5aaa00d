// The flags of mixpar-plan, read and checked in one place: the model (a preset, a GPT-2
// config.json or the shape flags), the cluster (a preset or a calibration file, each number
// overridable by a flag), the batch and the search space. Every bad value is an InputError
// naming the flag (exit code 2).
#pragma once

#include <string>

#include "cluster.h"
#include "layout_search.h"
#include "model_presets.h"

namespace mixpar::plan {

struct PlanFlags {
  PlanModel model;
  Cluster cluster;
  SearchSpace space;
  int top = 10;
  std::string json_path;  // checked: "" or a writable path (no existing file without --overwrite)
  // --calibrate: measure this machine and write calibration_path, then exit.
  bool calibrate = false;
  std::string calibration_path;
  int cores = 0;
};

// Parses argv (--help prints the usage and exits 0).
PlanFlags parse_plan_flags(int argc, char** argv);

}  // namespace mixpar::plan
