// train_gpt's run from start to end: data, a pre-flight summary, the step loop with progress
// lines, JSONL, held-out evaluation and checkpoints, then the final model, accuracy and sample.
// A function of the config and an output stream, so tests can drive it without a process.
#pragma once

#include <cstdio>
#include <functional>

#include <string>

#include "comm/communicator.h"
#include "util/errors.h"
#include "trainer_config.h"

namespace mixpar::ch08 {

// Returns the process exit code (0). Bad input anywhere is an InputError. A data-parallel
// config on the local backend starts config.ranks threads, one rank each; rank 0 prints.
int run_training(const TrainerConfig& config, std::FILE* out);

// One rank of a run whose ranks are started elsewhere (mpirun): every rank calls it with its
// communicator; rank 0 prints to out, the others train silently. ranks_on_this_machine shares
// the cores among the ranks that run beside this one. setup_done is called before the first
// step: until then every rank has read the same flags and files, so a bad input fails on all
// of them alike; after it, a failure on one rank leaves the others inside a collective.
// A bad flag, file or checkpoint found on any rank before the first step: ReportedInputError
// on every rank, the message printed once by agree_on_setup.
int run_training_rank(const TrainerConfig& config, Communicator& comm, int ranks_on_this_machine,
                      std::FILE* out, const std::function<void()>& setup_done = {});

// Collective, at the end of every rank's setup (flags, data, checkpoint) or in place of it when
// the rank's setup failed (my_error: its message, "" when it succeeded): true when every rank
// got through. Otherwise the lowest failing rank prints its message as one line on stderr
// ("train_gpt: error: ..."), every rank waits until it has (so that a launcher which kills the
// job at the first non-zero exit cannot cut it off), and every rank gets false.
bool agree_on_setup(Communicator& comm, const std::string& my_error);

// An input error that agree_on_setup has printed already (on whichever rank it occurred):
// exit with code 2 and print nothing more.
class ReportedInputError : public InputError {
 public:
  using InputError::InputError;
};

}  // namespace mixpar::ch08
