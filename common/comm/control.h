// Small control messages between ranks, with types, built on the Communicator's collectives so
// that every backend (local threads, MPI, NCCL) carries them alike: a yes/no every rank must
// say (all_true), 64-bit values compared or collected whole (all_agree, gather_u64), which
// rank is the first to report a condition, and short texts from one rank to all or from every
// rank to all. Callers say what they mean; none invents an encoding. Flags, lengths and bytes
// travel as FP32 elements holding small whole numbers (exact, whatever a reduction does to
// them); 64-bit values as the bytes of f64 elements, which all_gather copies and never
// computes on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace mixpar {

// Collective: the lowest rank of comm for which `mine` is true, or -1 when it is false on
// every rank.
int lowest_rank_where(Communicator& comm, bool mine);

// Collective: root's text on every rank (the others' `text` is ignored). At most kMaxControlText
// bytes travel; a longer text is cut there and ends in "...".
inline constexpr std::size_t kMaxControlText = 4096;
std::string broadcast_text(Communicator& comm, int root, const std::string& text);

// Collective: every rank's text, in rank order, on every rank (each cut as broadcast_text
// cuts it).
std::vector<std::string> gather_text(Communicator& comm, const std::string& mine);

// Collective: whether `mine` is true on every rank (one element each: a MAX of "not mine").
bool all_true(Communicator& comm, bool mine);

// Collective: every rank's values, all 64 bits of each: rank r's k-th value at
// [r * mine.size() + k]. Every rank passes the same number of values. Each value's bytes
// travel as one f64 element's (all_gather only copies): 8 bytes a value.
std::vector<std::uint64_t> gather_u64(Communicator& comm, std::span<const std::uint64_t> mine);
// Collective: whether every rank passed the same value, compared in all 64 bits.
bool all_agree(Communicator& comm, std::uint64_t mine);

}  // namespace mixpar
