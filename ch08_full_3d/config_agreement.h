// Ranks that disagree on their configuration: under mpirun every process parses its own
// command line, and nothing forces them to be the same. Ranks with different --batch train
// different models while rank 0 logs its own; different --allreduce algorithms wait in
// different collectives until the watchdog fires. So at start-up every rank hashes each flag
// that must agree (and the tokens it read), the hashes are all-gathered, and a difference is
// one line naming the flags and the ranks, before any step.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "trainer_config.h"

namespace mixpar::ch08 {

// (flag, value as text) of everything the ranks of one run must share: shape, data and its
// tokens, batch layout, schedule, optimizer, precision, grid, gradient sync, ZeRO, which
// collective outputs are on (a log, a trace, a final model: each adds collectives), the
// checkpoint directory and cadence, the pre-flight's budget and --dry-run. Not
// rank_local_flags(). Each field's name starts with its flag ("--data (its tokens)").
std::vector<std::pair<std::string, std::string>> agreement_fields(const TrainerConfig& c,
                                                                  std::uint64_t data_fingerprint);

// The flags each rank may set for itself, each with why it changes no rank's computation
// ("--threads", "..."). Every flag of train_gpt's table is in agreement_fields or here
// (config_agreement_test.cpp enumerates the table).
std::vector<std::pair<std::string, std::string>> rank_local_flags();

// Collective over comm: InputError on every rank, with the same one-line message, when some
// rank's fields differ from rank 0's ("--batch differs on rank 1 from rank 0's").
void agree_on_config(Communicator& comm, const TrainerConfig& c, std::uint64_t data_fingerprint);

}  // namespace mixpar::ch08
