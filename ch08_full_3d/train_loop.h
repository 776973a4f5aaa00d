// train_gpt's run from start to end: data, a pre-flight summary, the step loop with progress
// lines, JSONL, held-out evaluation and checkpoints, then the final model, accuracy and sample.
// A function of the config and an output stream, so tests can drive it without a process.
#pragma once

#include <cstdio>

#include "trainer_config.h"

namespace mixpar::ch08 {

// Returns the process exit code (0). Bad input anywhere is an InputError.
int run_training(const TrainerConfig& config, std::FILE* out);

}  // namespace mixpar::ch08
