// build/bin/train_gpt: trains a GPT-2 on one CPU device (see README.md, "train_gpt today").
// Flags are trainer_config.cpp's; the run is train_loop.cpp's. Bad input: one line, exit 2.
#include <cstdio>

#include "train_loop.h"
#include "trainer.h"
#include "trainer_config.h"
#include "util/errors.h"

int main(int argc, char** argv) {
  return mixpar::run_main(argc, argv, [](int n, char** v) {
    mixpar::ArgParser args = mixpar::ch08::make_trainer_args();
    args.parse(n, v);
    const mixpar::ch08::TrainerConfig config = mixpar::ch08::trainer_config_from_args(args);
    mixpar::ch08::set_cpu_threads(config.threads);
    return mixpar::ch08::run_training(config, stdout);
  });
}
