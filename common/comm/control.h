// Small control messages between ranks, built on the Communicator's collectives so that every
// backend (local threads, MPI, NCCL) carries them: which rank is the first to report a
// condition, and a short text from one rank to all. The payload travels as FP32 elements that
// hold small whole numbers exactly (a flag, a byte, a length below 2^24), never as bit
// patterns reinterpreted as floats, so no backend's arithmetic or copying can alter it.
#pragma once

#include <cstddef>
#include <string>

#include "comm/communicator.h"

namespace mixpar {

// Collective: the lowest rank of comm for which `mine` is true, or -1 when it is false on
// every rank.
int lowest_rank_where(Communicator& comm, bool mine);

// Collective: root's text on every rank (the others' `text` is ignored). At most kMaxControlText
// bytes travel; a longer text is cut there and ends in "...".
inline constexpr std::size_t kMaxControlText = 4096;
std::string broadcast_text(Communicator& comm, int root, const std::string& text);

}  // namespace mixpar
