// The local backend's one-shot path for small collectives (internal to the local backend).
// A large collective is a rendezvous under the fabric's mutex and then every rank moving its
// share (its ring chunk) of the data; below a few KiB that rendezvous (a mutex, a condition
// variable, a second rendezvous before leaving, since peers write into our buffer) is the
// whole cost. Here instead each rank copies its input into its own staging buffer, then
// raises a flag beside it: the call number, stored with release order after the data and the
// call's description (NCCL's LL protocol and vLLM's one-shot all-reduce keep a flag next to
// the data the same way, docs/REFERENCE.md). A rank that sees every flag of its group at its
// call number reads all N inputs itself and writes only its own output: one hand-off per call
// instead of two, and no lock when the peers are on time.
//
// Staging buffers alternate by call parity, which is what makes one flag enough: a rank writes
// buffer (seq mod 2) at call seq only after call seq-1 saw every flag at seq-1, that is after
// every peer finished call seq-2, the last one that read that buffer.
//
// Reductions read the inputs in rank order (reduce_elements, as the chunked path does), so
// the one-shot path gives the same bits as the large path, on every rank.
//
// All-to-all and all-gather also take these flags above the staging buffer's size,
// publishing their input in place (its address) instead of a copy, and then waiting for their
// readers' done flags (publish_done below): the rendezvous's single copy without its mutex.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "comm/cache_lines.h"
#include "comm/local_fabric.h"

namespace mixpar::local {

// The default limit of the one-shot path (LocalOptions::oneshot_max_bytes) on N x the bytes
// one rank publishes: the bytes each rank reads, which is what grows the one-shot's cost with
// N. Measured with scripts/bench_collectives.sh's switch-point table (ch04_ddp/PERFORMANCE.md holds
// the latest run's; f32 all-reduce, each path forced, fastest of 5 repetitions, 2-core AMD
// EPYC), in a run at load average 0.9-2.5: one-shot / chunked 1.7 / 15 us at 1 KiB and 14 / 17 us at 16 KiB on 2 ranks,
// slower from 32 KiB (24 / 21); on 4 ranks 4.5 / 8.0 us at 1 KiB, 7.0 / 8.4 at 4 KiB, about
// even at 8 KiB (10.3 / 9.4), slower from 16 KiB (17 / 8.4). A run under a load average of
// 6 put the 2-rank crossing at 32 KiB and the 4-rank one at 8 KiB: N x bytes <= 32 KiB.
// On 4 ranks (more than the cores: yielding polls) the crossing moves most between runs: one
// on an idle machine had the one-shot no faster even at 1 KiB (7.1 / 6.5 us).
inline constexpr std::size_t kOneShotMaxBytes = std::size_t{32} << 10;

// How many times a call's input counts against that limit: an all-reduce 16 times on 2 ranks
// and twice on more, an all-gather twice on 2 ranks, once otherwise.
//
// All-reduce: past the limit it reduces in place, each rank its ring chunk out of every
// rank's buffer into every rank's buffer (the rendezvous's work, with flags for its mutex),
// where the staged path has every rank copy its input and reduce the whole buffer. Median us,
// 2-core Xeon, bench_collectives --impl local --bind --ops all-reduce, staged (the limit at
// 32 KiB) / in place (--oneshot-max 64) / rendezvous (--oneshot-max 0), two alternating runs:
// 2 ranks 128 B 0.66-0.69 / 0.62-0.65, 512 B 0.83-0.86 / 0.84-0.85, 1 KiB 1.06-1.28 /
// 0.86-0.99 / 3.2-3.8, 4 KiB 2.10-2.48 / 1.01-1.12 / 3.5-3.7, 8 KiB 3.46-3.86 / 1.04-1.20 /
// 3.5-3.6; 4 ranks 2 KiB 4.3-4.5 / 5.1-5.6 / 12.0-13.1, 4 KiB 6.1-6.5 / 5.8-6.2 / 12.7-13.6,
// 8 KiB 9.3-9.9 / 6.1-7.5 / 13.6-15.3. So it stages up to 1 KiB of N x bytes on 2 ranks
// (512 B a rank) and 16 KiB on 4. An all-reduce rewrites its buffer every call, so the
// benchmark's figures are a training step's: no line of it sits clean in the peer's cache.
//
// All-gather: The one-shot all-gather copies every byte twice (into the staging
// buffer, then out of it) where the rendezvous copies the peer's block once, and 2 ranks, a
// core each, reach the rendezvous in about 3.5 us (comm/polled_lock.h). One-shot / rendezvous
// in us, 2-core Xeon, three alternating runs (bench_collectives --impl local --ranks 2 --bind
// --ops all-gather, --oneshot-max 0 for the rendezvous): output 16 KiB 3.3-3.6 / 4.0-4.6,
// 32 KiB 5.8-6.2 / 4.6-4.8. On 4 ranks, which share the cores and yield, the rendezvous costs
// 10 us and the one-shot path stays ahead up to the limit (32 KiB 7.6-7.9 / 12.0-12.7). The
// same bytes either way. Past the limit an all-gather now reads its peers' inputs in place
// (the rendezvous's copies without its mutex, OneShotGroup::publish_done); the weight was
// chosen against the rendezvous. In the benchmark the in-place path is flattered below the
// limit (ch04_ddp/PERFORMANCE.md, "All-to-all and all-gather in place"), so the limit stays.
constexpr std::size_t oneshot_weight(CollOp op, int ranks) {
  if (op == CollOp::kAllReduce) return ranks == 2 ? 16 : 2;
  return op == CollOp::kAllGather && ranks == 2 ? 2 : 1;
}

// Whether a call of `input_bytes` a rank on `ranks` ranks stages its input (the one-shot
// limit, LocalOptions::oneshot_max_bytes, on N x the input, weighted); past it an all-gather
// or an all-reduce publishes its buffers in place (or takes the rendezvous past kStackRanks,
// or where the limit is 0). The decision every rank of the call makes alike, and which
// OneShotGroup::readers_done() makes again for a peer (reads_in_place).
inline constexpr std::size_t kStackRanks = 16;  // the one-shot path keeps its pointers on the stack
constexpr bool stages(CollOp op, std::size_t input_bytes, int ranks, std::size_t limit) {
  return oneshot_weight(op, ranks) * input_bytes * static_cast<std::size_t>(ranks) <= limit &&
         ranks <= static_cast<int>(kStackRanks);
}
// Whether a one-shot call `d` on `ranks` ranks may touch a peer's buffers in place: any
// all-to-all (whatever it voted, it raises its done flag), an all-gather, all-reduce or
// reduce-scatter past the staging limit.
bool reads_in_place(const CallDesc& d, int ranks, std::size_t limit);

// How many times a rank has taken the one-shot path for `op`, every rank of every group of the
// process together, counted as each group is destroyed (when its world's run ends): one per
// rank per call. The two paths leave the same bits, so tests tell by it which one a call took.
// Each rank counts in a line of its own while the group lives: one counter that every rank
// incremented would be a cache line crossing between the cores on every small call, the very
// cost the one-shot path exists to save.
std::uint64_t oneshot_calls(CollOp op);
// Of those, the all-to-all and all-gather calls that read at least one peer's block where it
// lies (OneShotGroup::publish_done), counted the same way.
std::uint64_t in_place_calls();
inline constexpr std::size_t kCollOps = static_cast<std::size_t>(CollOp::kAllToAll) + 1;

class OneShotGroup {
 public:
  OneShotGroup(int size, std::size_t capacity);
  ~OneShotGroup();  // adds its ranks' counts to oneshot_calls()
  OneShotGroup(const OneShotGroup&) = delete;
  OneShotGroup& operator=(const OneShotGroup&) = delete;
  std::size_t capacity() const { return capacity_; }

  // The owner's staging buffer for call `seq` (allocated on its first use). Owner only.
  std::byte* stage(int rank, std::int64_t seq);
  // The owner publishes call `seq`: its description and `in_line` (at most kInLineBytes),
  // then the flag (release; sequentially consistent where the fabric's fence is not
  // asymmetric, Fabric::asymmetric_fence()).
  void publish(int rank, std::int64_t seq, const CallDesc& d, bool asymmetric,
               std::span<const std::byte> in_line = {});
  // Whether every rank of the group has published call `seq` (acquire: their data is visible).
  bool all_published(std::int64_t seq) const;
  bool published(int rank, std::int64_t seq) const;
  // Whether `rank`'s call `seq` was a one-shot call it published (for the mismatch reports).
  bool posted_call(int rank, std::int64_t seq) const;
  // After published(rank, seq): what it published.
  const CallDesc& desc(int rank, std::int64_t seq) const;
  const std::byte* data(int rank, std::int64_t seq) const;
  // After published(rank, seq): the bytes it published in its flag's line (kInLineBytes of
  // them, the first ones those it passed). A reader that polled the flag has them already: no
  // trip between cores. All-to-all puts its counts there, which say where each reader's block
  // lies in the staged data: read from the staging buffer, the counts and then the block
  // were two trips in a row.
  const std::byte* in_line(int rank, std::int64_t seq) const;

  // An all-to-all or all-gather whose input is too large to stage publishes where it lies
  // instead (its address, with an all-to-all's counts) and peers copy their blocks straight
  // out of it: each byte copied once, as in the rendezvous, with flags instead of the
  // fabric's mutex. The input is the caller's, so its owner may not leave the call while a
  // peer may still read it. Every call that may read a peer's input in place (any one-shot
  // all-to-all, whatever it voted, and an all-gather past the staging limit) raises its
  // `done` flag to the call number once it will read nothing more of that call (after its
  // copies, on any exception, or at once when it reads nothing); a rank that published in
  // place then waits for readers_done().
  //
  // A rank leaving on an exception before it saw every flag does not know which peers saw
  // its flag, so it withdraws it first (the flag goes to -seq, then heavy_fence) and waits
  // only for the peers whose flag it sees: a peer that published before the withdrawal is
  // seen, and one that publishes after it sees the withdrawal in still_published() and reads
  // nothing (the Dekker pattern of comm/asymmetric_fence.h, the withdrawal its heavy half).
  void publish_done(int rank, std::int64_t seq, bool asymmetric);
  void withdraw(int rank, std::int64_t seq, bool asymmetric);
  // After published(rank, seq) and this rank's own flag: whether `rank` still stands by call
  // `seq` (false once it withdrew it). Sequentially consistent, as the Dekker pattern needs.
  bool still_published(int rank, std::int64_t seq, bool asymmetric) const;
  // Whether no peer of `rank` will read its input of call `seq` any more: each either raised
  // its done flag to `seq`, or did not publish as call `seq` a call that may read in place
  // (a staged all-gather or any other op, which reads only staging buffers, is a mismatch
  // here and raises no done flag), or withdrew it.
  bool readers_done(int rank, std::int64_t seq) const;
  // A call of `rank` that read at least one block in place (for in_place_calls()).
  void count_in_place(int rank) { ++ranks_[static_cast<std::size_t>(rank)].calls.in_place; }

  // Ranks asleep in the fabric waiting for a flag: a publisher wakes them only when this is
  // non-zero. The publisher stores its flag and then reads this; a sleeper counts itself here
  // and then reads the flags: the two halves of comm/asymmetric_fence.h, so one of the two
  // always sees the other.
  std::atomic<int> sleepers{0};

 private:
  // One parity's call: its flag and its description in one cache line, so a peer that sees
  // the flag finds the description in the same line it just fetched (a second line is a
  // second trip between cores, which is what a small collective's time is made of).
  struct alignas(64) Half {
    std::atomic<std::int64_t> flag{0};  // the last call published in this parity
    CallDesc desc;
    std::byte in_line[64 - sizeof(std::atomic<std::int64_t>) - sizeof(CallDesc)];
  };

 public:
  static constexpr std::size_t kInLineBytes = sizeof(Half::in_line);

 private:
  // Staging buffers start on a cache line, each parity's too (stride_: the capacity rounded up
  // to whole lines). operator new[] aligns to 16 bytes only: a 2-rank all-to-all of 32 B staged
  // its counts and input, 48 bytes, across two lines, and the reader, which finds its block
  // from the counts, fetched the second line only after the first, a second trip between the
  // cores (0.24 us a call against 0.16 at 8 B and 0.20 at 128 B; ch04_ddp/PERFORMANCE.md).
  struct alignas(64) Calls {  // the owner's one-shot calls by op; no peer reads them
    std::uint64_t by_op[kCollOps] = {};
    std::uint64_t in_place = 0;
  };
  struct alignas(64) Done {  // the last call whose reads the owner finished: read by peers
    std::atomic<std::int64_t> seq{0};
  };
  struct alignas(64) Rank {
    Half half[2];
    LineBytes buffer;  // 2 x stride_, by parity; set before the first flag
    Calls calls;
    Done done;
  };
  const Rank& at(int rank) const { return ranks_[static_cast<std::size_t>(rank)]; }
  std::size_t capacity_;
  std::size_t stride_;
  std::unique_ptr<Rank[]> ranks_;
  int size_;
};

}  // namespace mixpar::local
