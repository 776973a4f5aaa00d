// control.h over the Communicator's control collectives: flags, lengths, texts and 64-bit
// values all travel as their own bytes, so nothing is rounded, clamped or reinterpreted.
#include "comm/control.h"

#include <algorithm>
#include <cstdint>

namespace mixpar {

int lowest_rank_where(Communicator& comm, bool mine) {
  const std::byte flag{mine};
  std::vector<std::byte> all(static_cast<std::size_t>(comm.size()));
  comm.all_gather_bytes(std::span(&flag, 1), all);
  const auto first = std::find(all.begin(), all.end(), std::byte{1});
  return first == all.end() ? -1 : static_cast<int>(first - all.begin());
}

std::string broadcast_text(Communicator& comm, int root, const std::string& text) {
  std::string sent = text;
  if (sent.size() > kMaxControlText) sent = sent.substr(0, kMaxControlText - 3) + "...";
  std::uint64_t length = sent.size();
  comm.broadcast_bytes(std::as_writable_bytes(std::span(&length, 1)), root);
  sent.resize(static_cast<std::size_t>(length));  // root's own length on the root
  if (length > 0) comm.broadcast_bytes(std::as_writable_bytes(std::span(sent)), root);
  return sent;
}

std::vector<std::string> gather_text(Communicator& comm, const std::string& mine) {
  std::vector<std::string> out;
  for (int r = 0; r < comm.size(); ++r) out.push_back(broadcast_text(comm, r, mine));
  return out;
}

bool broadcast_flag(Communicator& comm, int root, bool flag) {
  std::byte b{flag};
  comm.broadcast_bytes(std::span(&b, 1), root);
  return b != std::byte{0};
}

bool any_true(Communicator& comm, bool mine) { return comm.all_reduce_or(mine); }

bool all_true(Communicator& comm, bool mine) { return !comm.all_reduce_or(!mine); }

std::vector<std::uint64_t> gather_u64(Communicator& comm, std::span<const std::uint64_t> mine) {
  std::vector<std::uint64_t> out(static_cast<std::size_t>(comm.size()) * mine.size());
  if (mine.empty()) return out;
  comm.all_gather_bytes(std::as_bytes(mine), std::as_writable_bytes(std::span(out)));
  return out;
}

bool all_agree(Communicator& comm, std::uint64_t mine) {
  const std::vector<std::uint64_t> all = gather_u64(comm, std::span(&mine, 1));
  return std::all_of(all.begin(), all.end(), [&](std::uint64_t v) { return v == all.front(); });
}

}  // namespace mixpar
