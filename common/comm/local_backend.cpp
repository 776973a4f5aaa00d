// LocalCommunicator's collectives (its sends and receives: local_point_to_point.cpp). Small
// ones go through the one-shot flags (comm/local_oneshot.h), staged or read in place; the
// rest meet in a rendezvous in the fabric, followed by this rank's share of the data movement
// (its ring chunk of an all-reduce, its own output otherwise), done without the lock so ranks
// work in parallel; the fabric keeps every rank in the call until all shares are done.
// Device tensors go through host copies.

#include "comm/local_backend.h"

#include <cstring>
#include <stdexcept>

#include "comm/local_checks.h"
#include "comm/local_fabric.h"
#include "comm/local_kernels.h"
#include "comm/local_oneshot.h"

namespace mixpar {
namespace {

using local::bytes_of;
using local::require_defined;
using local::require_same_dtype;


// Pointers to element `offset` of every rank's input (or output) buffer, in rank order.
std::vector<std::byte*> rank_pointers(const local::Slot& s, bool outputs, std::int64_t offset,
                                      DType dtype) {
  std::vector<std::byte*> p;
  p.reserve(s.arrivals.size());
  const std::size_t off = static_cast<std::size_t>(offset) * dtype_size(dtype);
  for (const auto& a : s.arrivals) p.push_back(bytes_of(outputs ? *a->out : *a->in) + off);
  return p;
}

static_assert(LocalOptions{}.oneshot_max_bytes == local::kOneShotMaxBytes);

using local::kStackRanks;  // up to this many ranks, the one-shot path's pointers on the stack

}  // namespace

LocalCommunicator::LocalCommunicator(local::Fabric& fabric, int group, std::vector<int> members,
                                     int rank)
    : fabric_(&fabric),
      oneshot_(&fabric.oneshot(group)),
      calls_(fabric.call_counter(group, rank)),
      group_(group),
      members_(std::move(members)),
      rank_(rank) {}

MemoryLedger& LocalCommunicator::ledger() { return fabric_->ledger(world_rank()); }

int LocalCommunicator::world_peer(int group_rank, const char* what) const {
  if (group_rank < 0 || group_rank >= size()) {
    throw std::invalid_argument(std::string(what) + ": rank " + std::to_string(group_rank) +
                                " is not in a group of " + std::to_string(size()) + " ranks");
  }
  return members_[static_cast<std::size_t>(group_rank)];
}

Tensor LocalCommunicator::host_buffer_like(const Tensor& t) const {
  return Tensor::empty(t.shape(), t.dtype(), MemCategory::kCommBuffers, Device::kCPU,
                       &fabric_->network_ledger());
}

Tensor LocalCommunicator::host_copy(const Tensor& t) const {
  Tensor h = host_buffer_like(t);
  if (t.numel() > 0) h.copy_from(t);
  return h;
}

// ---- Collectives

template <class Work>
void LocalCommunicator::collective(const local::Arrival& mine, Work&& work) {
  const local::Ticket ticket = fabric_->arrive(group_, rank_, mine);
  try {
    work(*ticket.slot);
  } catch (...) {
    fabric_->finish(ticket);  // the others must never wait for a share that will not come
    throw;
  }
  fabric_->finish(ticket);
}

bool LocalCommunicator::oneshot_fits(std::size_t bytes) const {
  return bytes * static_cast<std::size_t>(size()) <= fabric_->oneshot_max_bytes() &&
         size() <= static_cast<int>(kStackRanks);
}

// Ends this rank's part in a one-shot call however it leaves: raises its done flag; a rank
// that published in place leaves only once no peer touches its buffer (OneShotGroup::
// publish_done), withdrawing its flag first if it saw not every flag.
class LocalCommunicator::InPlaceExit {
 public:
  InPlaceExit(LocalCommunicator& c, std::int64_t seq, bool in_place)
      : c_(c), seq_(seq), in_place_(in_place) {}
  ~InPlaceExit() {
    if (!finished_) finish(true);
  }
  InPlaceExit(const InPlaceExit&) = delete;
  InPlaceExit& operator=(const InPlaceExit&) = delete;
  void publishing() { published_ = true; }
  void saw_every_flag() { saw_every_flag_ = true; }
  // Its reads are over; `read`: the ranks took the one-shot path (else the rendezvous, and
  // no rank read a published input).
  void done_reading(bool read) {
    finished_ = true;
    finish(read);
  }

 private:
  void finish(bool peers_may_read) noexcept {
    const bool asymmetric = c_.fabric_->asymmetric_fence();
    c_.oneshot_->publish_done(c_.rank_, seq_, asymmetric);
    c_.fabric_->oneshot_posted(c_.group_, *c_.oneshot_);
    if (!in_place_ || !published_ || !peers_may_read) return;
    if (!saw_every_flag_) c_.oneshot_->withdraw(c_.rank_, seq_, asymmetric);
    if (!c_.fabric_->poll([&] { return c_.oneshot_->readers_done(c_.rank_, seq_); })) {
      c_.fabric_->oneshot_wait_readers(c_.group_, c_.rank_, seq_);
    }
  }
  LocalCommunicator& c_;
  std::int64_t seq_;
  bool in_place_;
  bool published_ = false;
  bool saw_every_flag_ = false;
  bool finished_ = false;
};

template <class Write, class Read>
void LocalCommunicator::oneshot(const local::CallDesc& d, Write&& write, Read&& read,
                                std::span<const std::byte> in_line) {
  const std::int64_t seq = ++*calls_;
  write(oneshot_->stage(rank_, seq));
  oneshot_->publish(rank_, seq, d, fabric_->asymmetric_fence(), in_line);
  fabric_->oneshot_posted(group_, *oneshot_);
  if (!fabric_->poll([&] { return oneshot_->all_published(seq); })) {
    fabric_->oneshot_wait(group_, rank_, seq, d);
  }
  for (int p = 0; p < size(); ++p) {
    if (!oneshot_->desc(p, seq).agrees_with(d)) fabric_->oneshot_mismatch(group_, seq);
  }
  read(seq);
}

template <class Work>
void LocalCommunicator::in_place(const local::CallDesc& d, const std::byte* address, Work&& work) {
  const std::int64_t seq = ++*calls_;
  InPlaceExit exit(*this, seq, true);
  exit.publishing();
  oneshot_->publish(rank_, seq, d, fabric_->asymmetric_fence(),
                    std::as_bytes(std::span(&address, 1)));
  fabric_->oneshot_posted(group_, *oneshot_);
  if (!fabric_->poll([&] { return oneshot_->all_published(seq); })) {
    fabric_->oneshot_wait(group_, rank_, seq, d);
  }
  exit.saw_every_flag();
  for (int p = 0; p < size(); ++p) {
    if (!oneshot_->desc(p, seq).agrees_with(d)) fabric_->oneshot_mismatch(group_, seq);
  }
  work(seq);
  oneshot_->count_in_place(rank_);
  exit.done_reading(true);
}

void LocalCommunicator::barrier() {
  const local::CallDesc d{.op = local::CollOp::kBarrier};
  if (oneshot_fits(0)) {
    oneshot(d, [](std::byte*) {}, [](std::int64_t) {});
    traffic_.record("barrier", 0, 0);
    return;
  }
  collective({.desc = d}, [](const local::Slot&) {});
  traffic_.record("barrier", 0, 0);
}

void LocalCommunicator::broadcast(Tensor& t, int root) {
  require_defined(t, "broadcast");
  const int root_world = world_peer(root, "broadcast");
  if (!t.is_cpu()) {
    Tensor h = host_copy(t);
    broadcast(h, root);
    if (rank_ != root) t.copy_from(h);
    return;
  }
  const local::CallDesc d{
      .op = local::CollOp::kBroadcast, .dtype = t.dtype(), .count = t.numel(), .root = root_world};
  if (oneshot_fits(t.nbytes())) {
    oneshot(
        d,
        [&](std::byte* stage) {
          if (rank_ == root) local::copy_bytes(stage, bytes_of(t), t.nbytes());
        },
        [&](std::int64_t seq) {
          if (rank_ != root) {
            local::copy_bytes(bytes_of(t), oneshot_->data(root, seq), t.nbytes());
          }
        });
  } else collective({d, &t, &t}, [&](const local::Slot& s) {
    // Each receiver pulls from the root, so the copies run in parallel.
    if (rank_ != root) {
      local::copy_bytes(bytes_of(t), bytes_of(*s.arrivals[static_cast<std::size_t>(root)]->in),
                        t.nbytes());
    }
  });
  const bool moves = size() > 1;
  traffic_.record("broadcast", rank_ == root && moves ? t.nbytes() : 0,
                  rank_ == root ? 0 : t.nbytes());
}

void LocalCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  require_defined(t, "all_reduce");
  if (!t.is_cpu()) {
    Tensor h = host_copy(t);
    all_reduce(h, op);
    t.copy_from(h);
    return;
  }
  const local::CallDesc d{
      .op = local::CollOp::kAllReduce, .dtype = t.dtype(), .count = t.numel(), .reduce = op};
  if (local::stages(d.op, t.nbytes(), size(), fabric_->oneshot_max_bytes())) {
    // Every rank reduces the whole buffer from the staged inputs, in rank order: the bits the
    // chunked path below gives, each chunk being the same rank-order reduction.
    oneshot(
        d, [&](std::byte* stage) { local::copy_bytes(stage, bytes_of(t), t.nbytes()); },
        [&](std::int64_t seq) {
          const std::byte* srcs[kStackRanks];
          for (int p = 0; p < size(); ++p) srcs[p] = oneshot_->data(p, seq);
          std::byte* const dst = bytes_of(t);
          local::reduce_elements({srcs, static_cast<std::size_t>(size())}, {&dst, 1},
                                 t.numel(), t.dtype(), op);
        });
  } else if (oneshot_fits(0) && oneshot_->capacity() > 0) {
    // Past the limit, in place: this rank reduces its ring chunk out of every rank's buffer
    // and writes it into every rank's buffer, as the rendezvous below does (chunks are
    // disjoint, so no byte is read by one rank and written by another), without its mutex.
    in_place(d, bytes_of(t), [&](std::int64_t seq) {
      const ChunkRange c = ring_chunk(t.numel(), size(), rank_);
      const std::size_t at = static_cast<std::size_t>(c.begin) * dtype_size(t.dtype());
      const std::byte* srcs[kStackRanks];
      std::byte* dsts[kStackRanks];
      for (int p = 0; p < size(); ++p) {
        // The peer's buffer, which its owner lent for the call (it waits for our done flag).
        dsts[p] = const_cast<std::byte*>(read_in_place(p, seq, d)) + at;
        srcs[p] = dsts[p];
      }
      const auto n = static_cast<std::size_t>(size());
      local::reduce_elements({srcs, n}, {dsts, n}, c.count, t.dtype(), op);
    });
  } else collective({d, &t, &t}, [&](const local::Slot& s) {
    // This rank reduces its ring chunk for everyone: chunks are disjoint, so in place is safe.
    const ChunkRange c = ring_chunk(t.numel(), size(), rank_);
    const auto srcs = rank_pointers(s, false, c.begin, t.dtype());
    const auto dsts = rank_pointers(s, true, c.begin, t.dtype());
    local::reduce_elements({srcs.data(), srcs.size()}, dsts, c.count, t.dtype(), op);
  });
  const TrafficTotals v = all_reduce_traffic(t.numel(), t.dtype(), size(), rank_);
  traffic_.record("all_reduce", v.bytes_sent, v.bytes_received);
}

void LocalCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  require_defined(in, "reduce_scatter");
  require_defined(out, "reduce_scatter");
  require_same_dtype(in, out, "reduce_scatter");
  if (in.numel() != out.numel() * size()) {
    throw std::invalid_argument("reduce_scatter: input of " + std::to_string(in.numel()) +
                                " elements for " + std::to_string(size()) + " ranks x " +
                                std::to_string(out.numel()));
  }
  if (!in.is_cpu() || !out.is_cpu()) {
    const Tensor h_in = host_copy(in);
    Tensor h_out = host_copy(out);
    reduce_scatter(h_in, h_out, op);
    out.copy_from(h_out);
    return;
  }
  const std::int64_t k = out.numel();
  const local::CallDesc d{
      .op = local::CollOp::kReduceScatter, .dtype = out.dtype(), .count = k, .reduce = op};
  const std::size_t off = static_cast<std::size_t>(rank_ * k) * dtype_size(in.dtype());
  std::byte* const dst = bytes_of(out);
  if (local::stages(d.op, in.nbytes(), size(), fabric_->oneshot_max_bytes())) {
    oneshot(
        d, [&](std::byte* stage) { local::copy_bytes(stage, bytes_of(in), in.nbytes()); },
        [&](std::int64_t seq) {
          const std::byte* srcs[kStackRanks];
          for (int p = 0; p < size(); ++p) srcs[p] = oneshot_->data(p, seq) + off;
          local::reduce_elements({srcs, static_cast<std::size_t>(size())}, {&dst, 1}, k,
                                 out.dtype(), op);
        });
  } else if (oneshot_fits(0) && oneshot_->capacity() > 0) {
    // Past the limit, in place: this rank reduces its block out of every rank's input, as
    // the rendezvous below does, without its mutex. Inputs are only read, outputs only their
    // owner's.
    in_place(d, bytes_of(in), [&](std::int64_t seq) {
      const std::byte* srcs[kStackRanks];
      for (int p = 0; p < size(); ++p) srcs[p] = read_in_place(p, seq, d) + off;
      local::reduce_elements({srcs, static_cast<std::size_t>(size())}, {&dst, 1}, k,
                             out.dtype(), op);
    });
  } else collective({d, &in, &out}, [&](const local::Slot& s) {
    const auto srcs = rank_pointers(s, false, rank_ * k, in.dtype());
    local::reduce_elements({srcs.data(), srcs.size()}, {&dst, 1}, k, out.dtype(), op);
  });
  const std::size_t moved = in.nbytes() - out.nbytes();  // (N-1)/N of the input
  traffic_.record("reduce_scatter", moved, moved);
}

void LocalCommunicator::all_gather(const Tensor& in, Tensor& out) {
  require_defined(in, "all_gather");
  require_defined(out, "all_gather");
  require_same_dtype(in, out, "all_gather");
  if (out.numel() != in.numel() * size()) {
    throw std::invalid_argument("all_gather: output of " + std::to_string(out.numel()) +
                                " elements for " + std::to_string(size()) + " ranks x " +
                                std::to_string(in.numel()));
  }
  if (!in.is_cpu() || !out.is_cpu()) {
    const Tensor h_in = host_copy(in);
    Tensor h_out = host_copy(out);
    all_gather(h_in, h_out);
    out.copy_from(h_out);
    return;
  }
  const local::CallDesc d{
      .op = local::CollOp::kAllGather, .dtype = in.dtype(), .count = in.numel()};
  if (local::stages(d.op, in.nbytes(), size(), fabric_->oneshot_max_bytes())) {
    oneshot(
        d, [&](std::byte* stage) { local::copy_bytes(stage, bytes_of(in), in.nbytes()); },
        [&](std::int64_t seq) {
          for (int p = 0; p < size(); ++p) {
            local::copy_bytes(bytes_of(out) + static_cast<std::size_t>(p) * in.nbytes(),
                              oneshot_->data(p, seq), in.nbytes());
          }
        });
  } else if (oneshot_fits(0) && oneshot_->capacity() > 0) {  // in place: no mutex, one copy
    in_place(d, bytes_of(in), [&](std::int64_t seq) {
      for (int p = 0; p < size(); ++p) {
        local::copy_bytes(bytes_of(out) + static_cast<std::size_t>(p) * in.nbytes(),
                          read_in_place(p, seq, d), in.nbytes(), out.nbytes());
      }
    });
  } else collective({d, &in, &out}, [&](const local::Slot& s) {
    const auto srcs = rank_pointers(s, false, 0, in.dtype());
    for (std::size_t r = 0; r < srcs.size(); ++r) {
      local::copy_bytes(bytes_of(out) + r * in.nbytes(), srcs[r], in.nbytes(), out.nbytes());
    }
  });
  const std::size_t moved = out.nbytes() - in.nbytes();  // (N-1)/N of the output
  traffic_.record("all_gather", moved, moved);
}

const std::byte* LocalCommunicator::read_in_place(int p, std::int64_t seq,
                                                  const local::CallDesc& d,
                                                  const std::byte* address) const {
  // A withdrawn flag: the peer left on an error; the wait ends in the world's failure.
  if (!oneshot_->still_published(p, seq, fabric_->asymmetric_fence())) {
    fabric_->oneshot_wait(group_, rank_, seq, d);
  }
  if (!address) address = oneshot_->in_line(p, seq);
  const std::byte* input = nullptr;
  std::memcpy(&input, address, sizeof input);  // the published bytes need no alignment
  return input;
}

void LocalCommunicator::all_to_all(const Tensor& in, std::span<const std::int64_t> send_counts,
                                   Tensor& out, std::span<const std::int64_t> recv_counts) {
  require_defined(in, "all_to_all");
  require_defined(out, "all_to_all");
  require_same_dtype(in, out, "all_to_all");
  const TrafficTotals v = all_to_all_traffic(send_counts, recv_counts, in.numel(), out.numel(),
                                             in.dtype(), size(), rank_);
  if (!in.is_cpu() || !out.is_cpu()) {
    const Tensor h_in = host_copy(in);
    Tensor h_out = host_copy(out);
    all_to_all(h_in, send_counts, h_out, recv_counts);
    out.copy_from(h_out);
    return;
  }
  const std::size_t elem = dtype_size(in.dtype());
  // Copies rank p's block for this rank (p sends `counts`, its input starting at `input`)
  // to where it lands in out, `at`, after checking its count against ours.
  std::int64_t at = 0;
  const auto take_block = [&](std::size_t p, const std::int64_t* counts, const std::byte* input) {
    std::int64_t from = 0;  // where p's block for this rank starts in p's input
    for (int q = 0; q < rank_; ++q) from += counts[q];
    const std::int64_t n = counts[rank_];
    if (n != recv_counts[p]) {
      throw CommError("all_to_all: rank " + std::to_string(members_[p]) + " sends " +
                      std::to_string(n) + " elements to rank " + std::to_string(world_rank()) +
                      ", which expects " + std::to_string(recv_counts[p]));
    }
    if (n > 0) {
      local::copy_bytes(bytes_of(out) + static_cast<std::size_t>(at) * elem,
                        input + static_cast<std::size_t>(from) * elem,
                        static_cast<std::size_t>(n) * elem, out.nbytes());
    }
    at += n;
  };
  // The one-shot path (comm/local_oneshot.h): each rank publishes its counts and its input
  // and copies its blocks out of the others'. The counts differ by rank, so no rank can tell
  // from its own call how the others publish: the path is a vote, seen after the flags (the
  // description's count). 1, staged (a copy of its input: small inputs); 2, in place (its
  // input's address; it then waits for its readers, OneShotGroup::publish_done); 0, neither
  // (counts and address fit nowhere). None against, each reads; any against, all go to the
  // rendezvous below as their next call, a rank that voted no without waiting for the flags.
  const auto counts_bytes = static_cast<std::size_t>(size()) * sizeof(std::int64_t);
  const std::size_t capacity = oneshot_->capacity();
  // Where they fit (2 and 3 ranks), the counts travel in the flag's line too, a reader
  // fetching its block at once; the address follows them where it fits (2 ranks).
  const bool counts_in_line = counts_bytes <= local::OneShotGroup::kInLineBytes;
  const std::size_t address_bytes = counts_bytes + sizeof(const std::byte*);
  const bool address_in_line = address_bytes <= local::OneShotGroup::kInLineBytes;
  // Read from there when the staged input spans lines (judged by ours: an all-to-all's inputs
  // are usually alike); within one line, the staged counts come with the block.
  const bool read_in_line = counts_in_line && counts_bytes + in.nbytes() > 64;
  std::int64_t vote_seq = 0;  // a vote published without waiting: arrive() checks it
  if (oneshot_fits(0) && capacity > 0) {
    const bool stages = counts_bytes + in.nbytes() <= capacity && out.nbytes() <= capacity;
    const int vote = stages ? 1 : address_in_line || address_bytes <= capacity ? 2 : 0;
    const local::CallDesc vote_desc{.op = local::CollOp::kAllToAll, .dtype = in.dtype(),
                                    .count = vote};
    const std::int64_t seq = ++*calls_;
    InPlaceExit exit(*this, seq, vote == 2);
    // What goes in the flag's line: the counts, and an in-place voter's address after them.
    std::byte in_line[local::OneShotGroup::kInLineBytes];
    std::size_t in_line_bytes = vote != 0 && counts_in_line ? counts_bytes : 0;
    const std::byte* address = bytes_of(in);
    if (vote == 1) {
      std::byte* stage = oneshot_->stage(rank_, seq);
      std::memcpy(stage, send_counts.data(), counts_bytes);
      local::copy_bytes(stage + counts_bytes, address, in.nbytes());
    } else if (vote == 2) {
      std::byte* place = address_in_line ? in_line : oneshot_->stage(rank_, seq);
      std::memcpy(place, send_counts.data(), counts_bytes);
      std::memcpy(place + counts_bytes, &address, sizeof address);
      if (address_in_line) in_line_bytes = address_bytes;
    }
    if (in_line_bytes) std::memcpy(in_line, send_counts.data(), counts_bytes);
    exit.publishing();
    oneshot_->publish(rank_, seq, vote_desc, fabric_->asymmetric_fence(),
                      std::span<const std::byte>(in_line, in_line_bytes));
    fabric_->oneshot_posted(group_, *oneshot_);
    bool all_read = false;
    if (vote == 0) {  // neither stages nor waits for the flags
      vote_seq = seq;
    } else {
      if (!fabric_->poll([&] { return oneshot_->all_published(seq); })) {
        fabric_->oneshot_wait(group_, rank_, seq, vote_desc);
      }
      exit.saw_every_flag();
      bool any_against = false;
      for (int p = 0; p < size(); ++p) {
        if (!oneshot_->desc(p, seq).agrees_with(vote_desc)) fabric_->oneshot_mismatch(group_, seq);
        any_against |= oneshot_->desc(p, seq).count == 0;
      }
      if (!any_against) {
        bool any_in_place = false;
        for (int p = 0; p < size(); ++p) {
          const std::byte* staged = oneshot_->data(p, seq);
          std::int64_t counts[kStackRanks];  // a copy: the published bytes need no alignment
          const std::byte* input = nullptr;
          if (oneshot_->desc(p, seq).count == 1) {
            std::memcpy(counts, read_in_line ? oneshot_->in_line(p, seq) : staged,
                        counts_bytes);
            input = staged + counts_bytes;
          } else {
            const std::byte* place = address_in_line ? oneshot_->in_line(p, seq) : staged;
            std::memcpy(counts, counts_in_line ? oneshot_->in_line(p, seq) : place,
                        counts_bytes);
            input = read_in_place(p, seq, vote_desc, place + counts_bytes);
            any_in_place = true;
          }
          take_block(static_cast<std::size_t>(p), counts, input);
        }
        if (any_in_place) oneshot_->count_in_place(rank_);
        all_read = true;
      }
    }
    exit.done_reading(all_read);
    if (all_read) {
      traffic_.record("all_to_all", v.bytes_sent, v.bytes_received);
      return;
    }
  }
  const local::CallDesc d{.op = local::CollOp::kAllToAll, .dtype = in.dtype()};
  collective({.desc = d, .in = &in, .out = &out, .send_counts = send_counts.data(),
              .after_vote = vote_seq},
             [&](const local::Slot& s) {
               for (std::size_t p = 0; p < s.arrivals.size(); ++p) {
                 take_block(p, s.arrivals[p]->send_counts, bytes_of(*s.arrivals[p]->in));
               }
             });
  traffic_.record("all_to_all", v.bytes_sent, v.bytes_received);
}

// ---- Control collectives: each rank reads the others' bytes and writes only its own.

bool LocalCommunicator::all_reduce_or(bool flag) {
  const std::byte mine{flag};
  std::byte any{0};
  const local::CallDesc d{.op = local::CollOp::kAllReduceOr, .count = 1};
  if (oneshot_fits(1)) {
    oneshot(d, [&](std::byte* stage) { *stage = mine; },
            [&](std::int64_t seq) {
              for (int p = 0; p < size(); ++p) any |= *oneshot_->data(p, seq);
            });
  } else {
    collective({.desc = d, .in_bytes = &mine, .out_bytes = &any}, [&](const local::Slot& s) {
      for (const auto& a : s.arrivals) any |= *a->in_bytes;
    });
  }
  const TrafficTotals v = all_reduce_traffic(1, std::size_t{1}, size(), rank_);
  traffic_.record("all_reduce_or", v.bytes_sent, v.bytes_received);
  return any != std::byte{0};
}

void LocalCommunicator::broadcast_bytes(std::span<std::byte> bytes, int root) {
  const local::CallDesc d{.op = local::CollOp::kBroadcastBytes,
                          .count = static_cast<std::int64_t>(bytes.size()),
                          .root = world_peer(root, "broadcast_bytes")};
  if (oneshot_fits(bytes.size())) {
    oneshot(
        d,
        [&](std::byte* stage) {
          if (rank_ == root) local::copy_bytes(stage, bytes.data(), bytes.size());
        },
        [&](std::int64_t seq) {
          if (rank_ != root) local::copy_bytes(bytes.data(), oneshot_->data(root, seq), bytes.size());
        });
  } else collective({.desc = d, .in_bytes = bytes.data(), .out_bytes = bytes.data()},
             [&](const local::Slot& s) {
               if (rank_ == root) return;
               local::copy_bytes(bytes.data(), s.arrivals[static_cast<std::size_t>(root)]->in_bytes,
                                 bytes.size());
             });
  const bool moves = size() > 1;
  traffic_.record("broadcast_bytes", rank_ == root && moves ? bytes.size() : 0,
                  rank_ == root ? 0 : bytes.size());
}

void LocalCommunicator::all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) {
  if (out.size() != in.size() * static_cast<std::size_t>(size())) {
    throw std::invalid_argument("all_gather_bytes: output of " + std::to_string(out.size()) +
                                " bytes for " + std::to_string(size()) + " ranks x " +
                                std::to_string(in.size()));
  }
  const local::CallDesc d{.op = local::CollOp::kAllGatherBytes,
                          .count = static_cast<std::int64_t>(in.size())};
  if (oneshot_fits(in.size())) {
    oneshot(
        d, [&](std::byte* stage) { local::copy_bytes(stage, in.data(), in.size()); },
        [&](std::int64_t seq) {
          for (int p = 0; p < size(); ++p) {
            local::copy_bytes(out.data() + static_cast<std::size_t>(p) * in.size(),
                              oneshot_->data(p, seq), in.size());
          }
        });
  } else collective({.desc = d, .in_bytes = in.data(), .out_bytes = out.data()},
             [&](const local::Slot& s) {
               for (std::size_t r = 0; r < s.arrivals.size(); ++r) {
                 local::copy_bytes(out.data() + r * in.size(), s.arrivals[r]->in_bytes, in.size());
               }
             });
  const std::size_t moved = out.size() - in.size();  // (N-1)/N of the output
  traffic_.record("all_gather_bytes", moved, moved);
}

std::unique_ptr<Communicator> LocalCommunicator::split(int color, int key) {
  const local::CallDesc d{.op = local::CollOp::kSplit, .color = color, .key = key};
  local::SplitResult mine;
  collective({.desc = d}, [&](const local::Slot& s) {
    mine = s.split[static_cast<std::size_t>(rank_)];
  });
  traffic_.record("split", 0, 0);
  if (mine.group < 0) return nullptr;
  return std::make_unique<LocalCommunicator>(*fabric_, mine.group, fabric_->members(mine.group),
                                             mine.rank);
}

std::unique_ptr<Communicator> LocalCommunicator::dup() {
  local::Fabric* lane = nullptr;
  collective({.desc = {.op = local::CollOp::kDup}}, [&](const local::Slot& s) { lane = s.lane; });
  traffic_.record("split", 0, 0);
  return std::make_unique<LocalCommunicator>(*lane, 0, lane->members(0), rank_);
}

}  // namespace mixpar
