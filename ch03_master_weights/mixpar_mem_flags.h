// The flags of the tool mixpar-mem, read and checked in one place (the fuzz harness
// fuzz/fuzz_tool_flags.cpp calls it as mixpar-mem does): every bad value, and every layout
// the calculator cannot bill, is an InputError naming what is wrong.
#pragma once

#include <vector>

#include "ch03_master_weights/fp8_scaling.h"
#include "ch03_master_weights/memory_calculator.h"

namespace mixpar::mem {

struct MixparMemFlags {
  TrainingSetup setup;  // validated: compute_bill takes it
  bool json = false;
  // --precision fp8: the BF16 mixed-precision bill (setup.precision is kBf16) and, beside it,
  // the FP8 bill of each recipe in fp8_recipes (fp8_memory.h).
  bool fp8 = false;
  std::vector<fp8::Recipe> fp8_recipes;
  int amax_history = 1024;  // Transformer Engine's default amax_history_len
};

// Parses argv (--help prints the usage and exits 0), reads the setup and validates it.
MixparMemFlags parse_mixpar_mem_flags(int argc, char** argv);

}  // namespace mixpar::mem
