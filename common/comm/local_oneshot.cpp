// The one-shot path's flags and staging buffers.
#include "comm/local_oneshot.h"

namespace mixpar::local {

OneShotGroup::OneShotGroup(int size, std::size_t capacity)
    : capacity_(capacity), ranks_(std::make_unique<Rank[]>(static_cast<std::size_t>(size))),
      size_(size) {}

std::byte* OneShotGroup::stage(int rank, std::int64_t seq) {
  Rank& r = ranks_[static_cast<std::size_t>(rank)];
  // Written before the first flag is raised, read by peers only after they saw one. Not
  // zeroed: a page is touched only once a call stages that much, so a large limit (the
  // bench's forced one-shot runs) costs no memory its calls do not use.
  if (!r.buffer) r.buffer = std::make_unique_for_overwrite<std::byte[]>(2 * capacity_);
  return r.buffer.get() + static_cast<std::size_t>(seq % 2) * capacity_;
}

void OneShotGroup::publish(int rank, std::int64_t seq, const CallDesc& d) {
  Rank& r = ranks_[static_cast<std::size_t>(rank)];
  r.seq[seq % 2] = seq;
  r.desc[seq % 2] = d;
  r.flag.store(seq, std::memory_order_seq_cst);  // pairs with `sleepers` (see the header)
}

bool OneShotGroup::published(int rank, std::int64_t seq) const {
  return at(rank).flag.load(std::memory_order_acquire) >= seq;
}

bool OneShotGroup::all_published(std::int64_t seq) const {
  for (int p = 0; p < size_; ++p) {
    if (at(p).flag.load(std::memory_order_seq_cst) < seq) return false;
  }
  return true;
}

bool OneShotGroup::posted_call(int rank, std::int64_t seq) const {
  return published(rank, seq) && at(rank).seq[seq % 2] == seq;
}

const CallDesc& OneShotGroup::desc(int rank, std::int64_t seq) const {
  return at(rank).desc[seq % 2];
}

const std::byte* OneShotGroup::data(int rank, std::int64_t seq) const {
  return at(rank).buffer.get() + static_cast<std::size_t>(seq % 2) * capacity_;
}

}  // namespace mixpar::local
