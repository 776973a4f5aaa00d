// The flags of the tool mixpar-mem, read and checked in one place (the fuzz harness
// fuzz/fuzz_tool_flags.cpp calls it as mixpar-mem does): every bad value, and every layout
// the calculator cannot bill, is an InputError naming what is wrong.
#pragma once

#include "ch03_master_weights/memory_calculator.h"

namespace mixpar::mem {

struct MixparMemFlags {
  TrainingSetup setup;  // validated: compute_bill takes it
  bool json = false;
};

// Parses argv (--help prints the usage and exits 0), reads the setup and validates it.
MixparMemFlags parse_mixpar_mem_flags(int argc, char** argv);

}  // namespace mixpar::mem
