// Small control messages between ranks, with types, built on the Communicator's control
// collectives (all_reduce_or, broadcast_bytes, all_gather_bytes) so that every backend (local
// threads, MPI, NCCL) carries them alike: a yes/no any or every rank may say (any_true,
// all_true), a yes/no from one rank (broadcast_flag), 64-bit values compared or collected whole
// (all_agree, gather_u64), which rank is the first to report a condition, and short texts from
// one rank to all or from every rank to all. Callers say what they mean; none invents an
// encoding. A flag travels as one byte, a text as its bytes, a 64-bit value as its 8 bytes:
// nothing is ever carried in a floating-point number.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace mixpar {

// Collective: the lowest rank of comm for which `mine` is true, or -1 when it is false on
// every rank (one byte from each rank).
int lowest_rank_where(Communicator& comm, bool mine);

// Collective: root's text on every rank (the others' `text` is ignored). At most kMaxControlText
// bytes travel; a longer text is cut there and ends in "...".
inline constexpr std::size_t kMaxControlText = 4096;
std::string broadcast_text(Communicator& comm, int root, const std::string& text);

// Collective: every rank's text, in rank order, on every rank (each cut as broadcast_text
// cuts it).
std::vector<std::string> gather_text(Communicator& comm, const std::string& mine);

// Collective: root's flag on every rank (the others' `flag` is ignored): one byte.
bool broadcast_flag(Communicator& comm, int root, bool flag);

// Collective: whether `mine` is true on any rank (all_reduce_or: one byte each).
bool any_true(Communicator& comm, bool mine);
// Collective: whether `mine` is true on every rank (not any rank's "not mine").
bool all_true(Communicator& comm, bool mine);

// Collective: every rank's values, all 64 bits of each: rank r's k-th value at
// [r * mine.size() + k]. Every rank passes the same number of values: 8 bytes a value.
std::vector<std::uint64_t> gather_u64(Communicator& comm, std::span<const std::uint64_t> mine);
// Collective: whether every rank passed the same value, compared in all 64 bits.
bool all_agree(Communicator& comm, std::uint64_t mine);

}  // namespace mixpar
