// The ring all-reduce by hand: a reduce-scatter then an all-gather, written on sendrecv (and
// sendrecv_reduce, the reduce-scatter's hop), each rank sending 2(N-1)/N of the buffer; and the
// naive reduce-to-root + broadcast it replaces. Chunks follow ring_chunk() and the step
// convention of comm/communicator.h, so the bytes the ring's sendrecvs record equal, to the
// byte, what a backend charges its own all_reduce. all_reduce_with runs any of the three
// (backend, ring, naive) by AllReduceAlgo: the gradient buckets' and the benchmarks' choice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace mixpar::ch04 {

// How partial results of 16- and 8-bit buffers travel round the ring (f32, f64: no difference).
enum class RingAccumulation : std::uint8_t {
  // As NCCL does: each hop adds its own values to the incoming partial sum in FP32 and rounds
  // the result to the buffer's dtype before forwarding it. N-1 roundings instead of the
  // backend's one, so f16/bf16/fp8 sums can differ from Communicator::all_reduce by a few ulps
  // of the result, and a partial sum can overflow to inf on its way.
  kPerHop,
  // Partial results travel as FP32 (twice the bytes of f16/bf16, four times fp8's) and only the
  // chunk's owner rounds, once: the backend's "accumulate in FP32, round once", up to the order
  // of the FP32 additions.
  kFp32Partials,
};

// One hop of one rank, for the lesson's trace (small buffers: the values are copied).
struct RingEvent {
  std::string phase;  // "reduce-scatter" | "all-gather" | "reduce" | "broadcast"
  int step = 0;
  int rank = 0;
  int to = -1, from = -1;              // peers (-1: none)
  int sent_chunk = -1, got_chunk = -1;  // chunk indices (-1: none)
  std::vector<float> sent, got, result;  // values sent, received, and what the rank now holds
};

struct RingOptions {
  // A chunk travels in slices of at most this many bytes of the buffer (0: whole chunks). Slice
  // j of step s depends only on slice j of step s-1, so each slice goes all the way round the
  // ring before the next starts: on a real network the next hop's link starts after one slice
  // instead of one chunk, and here the slice is still in cache when it is reduced and sent on.
  // Each slice costs every rank 2(N-1) hand-offs between threads, so slices must not be too
  // small either. Unset: 2 MiB on 2 ranks, 512 KiB on more, the fastest (or within 5% of it)
  // at 8 and 64 MiB on 2, 4 and 8 ranks on the 2-core EPYC. On 2 ranks each rank has a core
  // and its L2 (1 MiB) to itself; on more, ranks share a core, and 2 MiB slices took 2.5x
  // longer at 8 MiB on 4 ranks than 512 KiB ones (PERFORMANCE.md, "The ring's slices and
  // hops"). 0: whole chunks.
  std::optional<std::size_t> slice_bytes;
  static constexpr std::size_t kSliceBytesTwoRanks = std::size_t{2} << 20;
  static constexpr std::size_t kSliceBytesMoreRanks = std::size_t{512} << 10;
  RingAccumulation accumulation = RingAccumulation::kPerHop;
  // Buffers whose N copies (what each rank gathers) take at most this many bytes skip the
  // hops (ring_all_reduce, ring_reduce_scatter, ring_all_gather; not when tracing): every rank
  // gathers the N inputs at once (the backend's all_gather: on the local backend its one-shot
  // path) and adds them itself in the ring's own order, chunk by chunk, rounding where the hops
  // round. The ring's bits, on every rank, without its 2(N-1) sequential hand-offs; the
  // traffic is the all-gather's, (N-1) B per rank instead of 2(N-1)/N B. 0: always the hops.
  // Unset: 16 KiB on 2 ranks (buffers up to 8 KiB), 128 KiB on more (ring_oneshot_max_bytes).
  // Measured with scripts/bench_collectives.sh's switch-point table (ch04_ddp/PERFORMANCE.md holds
  // the latest run's; f32 all-reduce, each path forced, fastest of 5 repetitions, 2-core AMD
  // EPYC), in a run at load average 0.9-2.5: on 4 ranks 5.6 / 25 us at 1 KiB, 26 / 34 us at
  // 32 KiB, even at 64 KiB (44 / 43). A run under a load average of 6 agreed (4 ranks: faster up
  // to 32 KiB). On 2 ranks the hops are two hand-offs, each reading the neighbour's half in
  // place, where the gather path copies the whole of the neighbour's buffer and then writes
  // every line of its own that the neighbour has just read; gather / hops in us, 6 alternating
  // runs (bench_collectives --impl ring --ranks 2 --bind, the hops with --ring-oneshot-max 0):
  // 8 KiB 1.72-2.25 / 1.79-1.97, 16 KiB 3.46-3.57 / 2.93-3.27, 32 KiB 7.11-7.35 / 5.45-5.61,
  // 64 KiB 12.6-13.8 / 8.53-8.98.
  std::optional<std::size_t> oneshot_max_bytes;
  static constexpr std::size_t kOneShotMaxBytesTwoRanks = std::size_t{16} << 10;
  static constexpr std::size_t kOneShotMaxBytesMoreRanks = std::size_t{128} << 10;
  // Larger buffers of at most this many bytes skip the hops too, with the ring's traffic (not
  // when tracing), from 3 ranks (with 2 the hops are as few): the exchange path. One
  // all_to_all gives each rank the N ranks' values of one chunk, which it adds in that
  // chunk's ring order, rounding where the hops round, and one all_gather hands the reduced
  // chunks round: the ring's bits and its 2(N-1)/N B per rank in 2 hand-offs instead of
  // 2(N-1). ring_all_gather has a limit of its own (all_gather_exchange_max_bytes, below).
  // 0: the hops above the gather path.
  // Measured (PERFORMANCE.md, "The ring's exchange path": bench_collectives, f32, fastest of
  // 5 repetitions, 3 runs back to back, 2-core AMD EPYC, load average 2.8-3.1), exchange /
  // hops in us, all-reduce on 4 ranks: 70-120 / 351-548 at 256 KiB, 211-350 / 492-863 at
  // 1 MiB, 2805-4437 / 3045-5438 at 4 MiB; on 3 ranks 84-94 / 133-165 at 256 KiB, 246-379 /
  // 437-582 at 1 MiB, slower at 4 MiB (2393-4344 / 1806-2719); all-gather on 4 ranks 34-35 /
  // 253-275 at 256 KiB, 104 / 127-130 at 1 MiB. On the 2-core Xeon the hops are the faster
  // from 512 KiB, the median of 5 repetitions, three alternating runs (--ring-oneshot-max 0,
  // --ring-exchange-max 0 / 1073741824): 4 ranks 220-224 / 273-282 at 512 KiB, 424-453 /
  // 591-626 at 1 MiB; 3 ranks 145-149 / 353-363 and 323-328 / 776-790 (PERFORMANCE.md, "The
  // ring's exchange path"). Buffers of at most 512 KiB: on the Xeon the exchange's 1 MiB
  // all-reduce on 4 ranks fell behind Open MPI's (511 us against 484), where the EPYC's hops
  // at 1 MiB (492-863 us) were still ahead of Open MPI's there (1,050-3,990).
  std::size_t exchange_max_bytes = std::size_t{512} << 10;
  // The same for ring_reduce_scatter (its input's bytes). Its hops read their neighbour's
  // slice in place, so the exchange's copy of what it receives costs more there: exchange /
  // hops in us (runs of the same kind) on 4 ranks 25 / 27-121 at 64 KiB, 34-97 / 49-625 at 256 KiB,
  // slower from 512 KiB (120-183 / 92-143); on 3 ranks 17 / 33-92 at 64 KiB, 31-47 / 31-173
  // at 256 KiB, slower from 512 KiB (58-85 / 57-123). Inputs of at most 256 KiB.
  std::size_t reduce_scatter_exchange_max_bytes = std::size_t{256} << 10;
  // The same for ring_all_gather (its output's bytes), above the gather path: the backend's
  // all_gather, whose copies are the hops' bits at any size (an all-gather adds nothing, so
  // no order of additions is at stake). Unset: every size. Each hop is a message through the
  // backend, where the backend's all_gather copies straight out of the peers' buffers; hops /
  // backend / the local backend's own all-gather in us, two runs each, on the 2-core Xeon
  // (PERFORMANCE.md, "The ring's all-gather at every size"): 2 ranks 2 MiB 181-182 / 149-151 /
  // 147-151, 32 MiB 3289-3942 / 2383-2429 / 2432-2439; 4 ranks 2 MiB 394-417 / 309-314 /
  // 303-314, 32 MiB 9799-10516 / 6735-7934 / 7095-7500. 0: the hops above the gather path.
  std::size_t all_gather_exchange_max_bytes = std::numeric_limits<std::size_t>::max();
  int tag = 40;                         // tag of the ring's point-to-point messages
  std::vector<RingEvent>* trace = nullptr;  // this rank's events are appended when set
};

// The gather path's limit on `ranks` ranks (RingOptions::oneshot_max_bytes, or its default).
std::size_t ring_oneshot_max_bytes(const RingOptions& opts, int ranks);

// The chunk rank r holds complete after the reduce-scatter, and circulates in the all-gather:
// (r + 1) mod N, the convention of communicator.h.
int ring_owned_chunk(int rank, int size);

// In place on buf (same numel and dtype on every rank). Ring all-reduce = reduce-scatter, after
// which rank r's chunk ring_owned_chunk(r) holds the reduction, then all-gather of those chunks.
// Each element's sum starts at the rank its chunk starts from and goes round: chunk c adds
// x_c + x_(c+1) + ... + x_(c-1). FP32 results therefore equal the backend's rank-order sums
// exactly for N <= 2 (a + b == b + a) and within FP32 rounding of them for N >= 3; every rank
// ends with the same bits. Traffic: sendrecvs totalling all_reduce_traffic() (kPerHop, or any
// f32/f64 buffer; FP32 partials of narrower dtypes make the reduce-scatter's bytes larger).
void ring_all_reduce(Communicator& comm, Tensor& buf, ReduceOp op = ReduceOp::kSum,
                     const RingOptions& opts = {});

// The two halves on their own, in place, with the ring's chunking (chapter 5 builds on them).
// After ring_reduce_scatter_inplace, chunk ring_owned_chunk(rank) of buf holds the reduction
// and the other chunks are untouched; ring_all_gather_inplace sends each rank's owned chunk to
// every other rank.
void ring_reduce_scatter_inplace(Communicator& comm, Tensor& buf, ReduceOp op = ReduceOp::kSum,
                                 const RingOptions& opts = {});
void ring_all_gather_inplace(Communicator& comm, Tensor& buf, const RingOptions& opts = {});

// The same halves with Communicator's block semantics: reduce_scatter's in has size()*k
// elements and out (k) receives the reduction of block rank(); all_gather's out (size()*k)
// receives block r from rank r. Traffic: (N-1)/N of the blocked buffer each, as the backend's.
void ring_reduce_scatter(Communicator& comm, const Tensor& in, Tensor& out,
                         ReduceOp op = ReduceOp::kSum, const RingOptions& opts = {});
void ring_all_gather(Communicator& comm, const Tensor& in, Tensor& out,
                     const RingOptions& opts = {});

// The naive all-reduce: every rank sends its buffer to rank 0, which adds them in rank order
// (so f32 sums equal the backend's bit for bit; 16-bit ones too with kFp32Partials, which
// keeps the root's accumulator in FP32), then sends the result to each rank in turn. Rank 0
// receives and sends (N-1) buffers, every other rank one each way: the root's link carries
// N-1 times what the ring puts on any link.
void naive_all_reduce(Communicator& comm, Tensor& buf, ReduceOp op = ReduceOp::kSum,
                      const RingOptions& opts = {});

// Which all-reduce a caller (the gradient buckets, the benchmarks, the lesson) runs: the
// backend's own, the ring above, or the naive one.
enum class AllReduceAlgo : std::uint8_t { kBackend, kRing, kNaive };
std::string algo_name(AllReduceAlgo a);  // "backend" | "ring" | "naive"

// Runs one all-reduce through `algo` (ring and naive with opts).
void all_reduce_with(AllReduceAlgo algo, Communicator& comm, Tensor& buf, ReduceOp op,
                     const RingOptions& opts = {});

}  // namespace mixpar::ch04
