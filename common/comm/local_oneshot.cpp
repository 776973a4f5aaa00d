// The one-shot path's flags and staging buffers.
#include "comm/local_oneshot.h"

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>

#include "comm/asymmetric_fence.h"

namespace mixpar::local {

OneShotGroup::OneShotGroup(int size, std::size_t capacity)
    : capacity_(capacity), stride_((capacity + kCacheLine - 1) / kCacheLine * kCacheLine),
      ranks_(std::make_unique<Rank[]>(static_cast<std::size_t>(size))), size_(size) {}

std::byte* OneShotGroup::stage(int rank, std::int64_t seq) {
  Rank& r = ranks_[static_cast<std::size_t>(rank)];
  // Written before the first flag is raised, read by peers only after they saw one. Not
  // zeroed: a page is touched only once a call stages that much, so a large limit (the
  // bench's forced one-shot runs) costs no memory its calls do not use.
  if (!r.buffer) r.buffer = allocate_lines(2 * stride_);
  return r.buffer.get() + static_cast<std::size_t>(seq % 2) * stride_;
}

static_assert(OneShotGroup::kInLineBytes >= 16, "a 2-rank all-to-all's counts fit the line");

namespace {
std::atomic<std::uint64_t>& oneshot_count(CollOp op) {
  static std::atomic<std::uint64_t> counts[kCollOps]{};
  return counts[static_cast<std::size_t>(op)];
}
std::atomic<std::uint64_t>& in_place_count() {
  static std::atomic<std::uint64_t> count{0};
  return count;
}
}  // namespace

std::uint64_t oneshot_calls(CollOp op) {
  return oneshot_count(op).load(std::memory_order_relaxed);
}

std::uint64_t in_place_calls() { return in_place_count().load(std::memory_order_relaxed); }

OneShotGroup::~OneShotGroup() {
  for (int r = 0; r < size_; ++r) {
    for (std::size_t op = 0; op < kCollOps; ++op) {
      const std::uint64_t n = ranks_[static_cast<std::size_t>(r)].calls.by_op[op];
      if (n) oneshot_count(static_cast<CollOp>(op)).fetch_add(n, std::memory_order_relaxed);
    }
    const std::uint64_t in_place = ranks_[static_cast<std::size_t>(r)].calls.in_place;
    if (in_place) in_place_count().fetch_add(in_place, std::memory_order_relaxed);
  }
}

void OneShotGroup::publish(int rank, std::int64_t seq, const CallDesc& d, bool asymmetric,
                           std::span<const std::byte> in_line) {
  Half& h = ranks_[static_cast<std::size_t>(rank)].half[seq % 2];
  h.desc = d;
  if (in_line.size() > kInLineBytes) {
    throw std::logic_error("OneShotGroup::publish: " + std::to_string(in_line.size()) +
                           " bytes for a line that holds " + std::to_string(kInLineBytes));
  }
  if (!in_line.empty()) std::memcpy(h.in_line, in_line.data(), in_line.size());
  ++ranks_[static_cast<std::size_t>(rank)].calls.by_op[static_cast<std::size_t>(d.op)];
  // At least release: a peer that reads the flag sees the description and the staged bytes.
  // The fabric's oneshot_posted() reads `sleepers` after it (comm/asymmetric_fence.h).
  publish_flag(h.flag, seq, asymmetric);
}

// A rank's calls are published in order, each parity's flag rising by 2, so its last call is
// the larger of the two flags. The parity of `seq` is read first: where the rank is on time
// that is the one line the check needs.
bool OneShotGroup::published(int rank, std::int64_t seq) const {
  const Rank& r = at(rank);
  return r.half[seq % 2].flag.load(std::memory_order_acquire) >= seq ||
         r.half[(seq + 1) % 2].flag.load(std::memory_order_acquire) >= seq;
}

bool OneShotGroup::all_published(std::int64_t seq) const {
  for (int p = 0; p < size_; ++p) {
    if (!published(p, seq)) return false;
  }
  return true;
}

bool OneShotGroup::posted_call(int rank, std::int64_t seq) const {
  return at(rank).half[seq % 2].flag.load(std::memory_order_acquire) == seq;
}

bool reads_in_place(const CallDesc& d, int ranks, std::size_t limit) {
  switch (d.op) {
    case CollOp::kAllToAll: return true;
    case CollOp::kAllGather:
    case CollOp::kAllReduce:
      return !stages(d.op, static_cast<std::size_t>(d.count) * dtype_size(d.dtype), ranks, limit);
    case CollOp::kReduceScatter:  // count is one rank's block: the input is `ranks` of them
      return !stages(d.op, static_cast<std::size_t>(d.count * ranks) * dtype_size(d.dtype), ranks,
                     limit);
    default: return false;
  }
}

void OneShotGroup::publish_done(int rank, std::int64_t seq, bool asymmetric) {
  // Release: the owner's copies out of the peers' inputs come before it. The fabric's
  // oneshot_posted() reads `sleepers` after it, as after a flag.
  publish_flag(ranks_[static_cast<std::size_t>(rank)].done.seq, seq, asymmetric);
}

void OneShotGroup::withdraw(int rank, std::int64_t seq, bool asymmetric) {
  ranks_[static_cast<std::size_t>(rank)].half[seq % 2].flag.store(-seq, std::memory_order_seq_cst);
  heavy_fence(asymmetric);  // then readers_done() reads the peers' flags
}

bool OneShotGroup::still_published(int rank, std::int64_t seq, bool asymmetric) const {
  // The light half: after this rank's own flag, only the compiler's order is needed where
  // the withdrawal's fence is the membarrier; a sequentially consistent load either way.
  if (asymmetric) std::atomic_signal_fence(std::memory_order_seq_cst);
  return at(rank).half[seq % 2].flag.load(std::memory_order_seq_cst) == seq;
}

bool OneShotGroup::readers_done(int rank, std::int64_t seq) const {
  for (int p = 0; p < size_; ++p) {
    if (p == rank) continue;
    const Rank& r = at(p);
    if (r.done.seq.load(std::memory_order_acquire) >= seq) continue;
    // Not done: a reader only if it published as call `seq` a call that reads in place, and
    // stands by it. Those raise their done flag on every way out, so this wait ends.
    const Half& h = r.half[seq % 2];
    if (h.flag.load(std::memory_order_seq_cst) != seq) continue;
    if (reads_in_place(h.desc, size_, capacity_)) return false;
  }
  return true;
}

const CallDesc& OneShotGroup::desc(int rank, std::int64_t seq) const {
  return at(rank).half[seq % 2].desc;
}

const std::byte* OneShotGroup::in_line(int rank, std::int64_t seq) const {
  return at(rank).half[seq % 2].in_line;
}

const std::byte* OneShotGroup::data(int rank, std::int64_t seq) const {
  return at(rank).buffer.get() + static_cast<std::size_t>(seq % 2) * stride_;
}

}  // namespace mixpar::local
