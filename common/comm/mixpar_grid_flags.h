// The flags of the tool mixpar-grid, read and checked in one place (the fuzz harness
// fuzz/fuzz_tool_flags.cpp calls it as mixpar-grid does): a bad degree, or a shape that does
// not fill the world, is an InputError naming it.
#pragma once

#include "comm/parallel_grid.h"

namespace mixpar {

struct MixparGridFlags {
  GridShape shape;  // validated against world: shape.world() == world, at most 4096 ranks
  int world = 1;
  bool json = false;
};

// Parses argv (--help prints the usage and exits 0) and checks every value.
MixparGridFlags parse_mixpar_grid_flags(int argc, char** argv);

}  // namespace mixpar
