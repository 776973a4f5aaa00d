// The hand-built ring equals the backend's all_reduce (N = 1..8, every dtype, sizes 0, 1 and
// not divisible by N): bit for bit on integer data and for N <= 2, within the stated rounding
// bound otherwise; every rank ends with the same bits; slicing changes nothing; the halves have
// Communicator's block semantics; the naive version adds in rank order.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "ch04_ddp/ring_allreduce.h"
#include "comm/local_backend.h"
#include "comm_local_test_util.h"
#include "tensor/ledger.h"

namespace mixpar::ch04 {
namespace {

using namespace comm_testing;

constexpr std::int64_t kSizes[] = {0, 1, 13, 1031};

std::string what(int n, DType dt, std::int64_t size, ReduceOp op) {
  return "N=" + std::to_string(n) + " " + std::string(dtype_name(dt)) + " size " +
         std::to_string(size) + " " + std::string(reduce_op_name(op));
}

// Small integers whose partial sums over 8 ranks are exact in every dtype (e5m2 holds the
// integers up to 8 exactly, e4m3 up to 16, bf16 up to 256): any summation order gives the
// same bits, so the ring must equal the backend exactly.
Tensor integer_data(int rank, std::int64_t n, DType dt) {
  const int range = dt == DType::kE5M2 ? 1 : 2;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    v[std::size_t(i)] = static_cast<float>((i * 7 + rank * 3) % (2 * range + 1) - range);
  }
  return Tensor::from_floats(v, {n}, dt);
}

// The gap between 1 and the next value: the relative rounding step of each dtype.
double epsilon(DType dt) {
  switch (dt) {
    case DType::kF32: return std::ldexp(1.0, -23);
    case DType::kF16: return std::ldexp(1.0, -10);
    case DType::kBF16: return std::ldexp(1.0, -7);
    case DType::kE4M3: return std::ldexp(1.0, -3);
    case DType::kE5M2: return std::ldexp(1.0, -2);
    case DType::kF64: return std::ldexp(1.0, -52);
  }
  return 1.0;
}

// The smallest subnormal: below it rounding is absolute, not relative.
double tiniest(DType dt) {
  switch (dt) {
    case DType::kF16: return std::ldexp(1.0, -24);
    case DType::kBF16: return std::ldexp(1.0, -133);
    case DType::kE4M3: return std::ldexp(1.0, -9);
    case DType::kE5M2: return std::ldexp(1.0, -16);
    default: return 0.0;
  }
}

// The bound between two sums of the same N values in different orders, each partial result
// rounded: N roundings on either side, each at most eps * sum|x| (plus a subnormal step).
double order_bound(int n, DType dt, double sum_abs) {
  return n * (epsilon(dt) * sum_abs + tiniest(dt));
}

std::vector<double> sum_abs(int n, std::int64_t size, DType dt) {
  std::vector<double> s(static_cast<std::size_t>(size), 0.0);
  for (int r = 0; r < n; ++r) {
    const std::vector<double> x = elements(rank_data(r, size, dt));
    for (std::size_t i = 0; i < s.size(); ++i) s[i] += std::abs(x[i]);
  }
  return s;
}

// On every rank: ring and backend on the same data, compared. `exact` asks for equal bits.
void compare_with_backend(Communicator& c, const Tensor& data, ReduceOp op, bool exact,
                          const std::vector<double>& bound, const std::string& label) {
  Tensor ring = data.clone(), backend = data.clone();
  ring_all_reduce(c, ring, op);
  c.all_reduce(backend, op);
  if (exact) {
    EXPECT_TRUE(same_bits(ring, backend)) << label << " rank " << c.rank();
    return;
  }
  const std::vector<double> a = elements(ring), b = elements(backend);
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_LE(std::abs(a[i] - b[i]), bound[i]) << label << " element " << i << ": ring " << a[i]
                                               << ", backend " << b[i];
  }
}

TEST(Ring, AllReduceEqualsBackendExactlyOnIntegerDataForEveryDtypeAndSize) {
  for (int n = 1; n <= 8; ++n) {
    run_local(n, [&](Communicator& c) {
      for (DType dt : kAllDTypes) {
        for (std::int64_t size : kSizes) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
            compare_with_backend(c, integer_data(c.rank(), size, dt), op, true, {},
                                 what(n, dt, size, op));
          }
        }
      }
    });
  }
}

TEST(Ring, AllReduceOfRealDataIsWithinTheReorderingBoundAndExactForTwoRanksOrMax) {
  for (int n = 1; n <= 8; ++n) {
    for (DType dt : kAllDTypes) {
      for (std::int64_t size : kSizes) {
        std::vector<double> bound = sum_abs(n, size, dt);
        for (double& b : bound) b = order_bound(n, dt, b);
        run_local(n, [&](Communicator& c) {
          const Tensor data = rank_data(c.rank(), size, dt);
          // f32/f64 sums of two values commute exactly; so does max, whatever the order.
          const bool exact_sum = n <= 2 && dtype_size(dt) >= 4;
          compare_with_backend(c, data, ReduceOp::kSum, exact_sum, bound,
                               what(n, dt, size, ReduceOp::kSum));
          compare_with_backend(c, data, ReduceOp::kMax, true, bound,
                               what(n, dt, size, ReduceOp::kMax));
        });
      }
    }
  }
}

TEST(Ring, EveryRankEndsWithTheSameBits) {
  constexpr int n = 5;
  std::vector<Tensor> results(n);
  run_local(n, [&](Communicator& c) {
    Tensor t = rank_data(c.rank(), 1031, DType::kF16);
    ring_all_reduce(c, t);
    results[std::size_t(c.rank())] = t;
  });
  for (int r = 1; r < n; ++r) EXPECT_TRUE(same_bits(results[0], results[std::size_t(r)])) << r;
}

TEST(Ring, SlicingChangesNeitherBitsNorBytes) {
  for (int n : {2, 3, 7}) {
    run_local(n, [&](Communicator& c) {
      const Tensor data = rank_data(c.rank(), 1031, DType::kBF16);
      Tensor whole = data.clone(), sliced = data.clone();
      RingOptions o;
      o.slice_bytes = 0;
      ring_all_reduce(c, whole, ReduceOp::kSum, o);
      const TrafficTotals before = c.traffic().totals("sendrecv");
      o.slice_bytes = 6;  // 3 bf16 elements: many slices, the last ones short or empty
      ring_all_reduce(c, sliced, ReduceOp::kSum, o);
      const TrafficTotals after = c.traffic().totals("sendrecv");
      EXPECT_TRUE(same_bits(whole, sliced)) << "N=" << n;
      EXPECT_EQ(after.bytes_sent - before.bytes_sent, before.bytes_sent) << "N=" << n;
      EXPECT_EQ(after.bytes_received - before.bytes_received, before.bytes_received);
    });
  }
}

// The hops' slice buffers are the thread's, kept from call to call: allocated on every call,
// glibc handed the heap's top back to the kernel and faulted it in again (30 us for a 2-rank
// 128 KiB all-reduce, against 17 us kept). A call after the first allocates nothing that the
// rank's ledger sees, whatever the op or the rank count.
TEST(Ring, HopsAllocateNoBufferAfterTheFirstCall) {
  RingOptions hops;
  hops.oneshot_max_bytes = hops.exchange_max_bytes = hops.all_gather_exchange_max_bytes = 0;
  hops.reduce_scatter_exchange_max_bytes = 0;
  for (int n : {2, 3}) {
    run_local(n, [&](Communicator& c) {
      const std::int64_t size = 32768 * n;  // 128 KiB of f32 a rank
      Tensor buf = rank_data(c.rank(), size, DType::kF32);
      Tensor block = Tensor::empty({size / n}, DType::kF32);
      ring_all_reduce(c, buf, ReduceOp::kSum, hops);
      ring_reduce_scatter(c, buf, block, ReduceOp::kSum, hops);
      const std::int64_t before = current_ledger().allocations();
      for (int call = 0; call < 3; ++call) {
        ring_all_reduce(c, buf, ReduceOp::kSum, hops);
        ring_reduce_scatter(c, buf, block, ReduceOp::kSum, hops);
        ring_reduce_scatter_inplace(c, buf, ReduceOp::kSum, hops);
      }
      EXPECT_EQ(current_ledger().allocations(), before) << "N=" << n << " rank "
                                                             << c.rank();
      // Slices larger than the default are the call's own, charged here and freed with it.
      RingOptions whole = hops;
      whole.slice_bytes = 0;
      Tensor big = rank_data(c.rank(), (RingOptions::kSliceBytesTwoRanks / 4) * n * 2,
                             DType::kF32);
      const std::size_t live = current_ledger().live(MemCategory::kCommBuffers);
      current_ledger().reset_peaks();
      ring_all_reduce(c, big, ReduceOp::kSum, whole);
      EXPECT_GE(current_ledger().peak(MemCategory::kCommBuffers),
                live + 3 * RingOptions::kSliceBytesTwoRanks * 2);
      EXPECT_EQ(current_ledger().live(MemCategory::kCommBuffers), live);
    });
  }
}

// A standalone all-gather on 2 ranks is one hop: unsliced by default (one message that the
// backend can stream past the cache), in slices only when the caller asks, with the same bits.
TEST(Ring, TwoRankAllGatherIsOneMessageUnlessSlicesAreAsked) {
  RingOptions hops;
  hops.oneshot_max_bytes = hops.exchange_max_bytes = hops.all_gather_exchange_max_bytes = 0;
  run_local(2, [&](Communicator& c) {
    const std::int64_t k = 3 << 20;  // 12 MiB a rank: 6 default 2-rank slices
    const Tensor in = rank_data(c.rank(), k, DType::kF32);
    Tensor whole = Tensor::empty({2 * k}, DType::kF32), sliced = whole.clone();
    const std::int64_t before = c.traffic().totals("sendrecv").calls;
    ring_all_gather(c, in, whole, hops);
    const std::int64_t after_whole = c.traffic().totals("sendrecv").calls;
    RingOptions in_slices = hops;
    in_slices.slice_bytes = RingOptions::kSliceBytesTwoRanks;
    ring_all_gather(c, in, sliced, in_slices);
    EXPECT_EQ(after_whole - before, 1);
    EXPECT_EQ(c.traffic().totals("sendrecv").calls - after_whole, 6);
    EXPECT_TRUE(same_bits(whole, sliced)) << "rank " << c.rank();
    EXPECT_TRUE(same_bits(whole.flat_slice((1 - c.rank()) * k, k).clone(),
                          rank_data(1 - c.rank(), k, DType::kF32)));
  });
}

TEST(Ring, Fp32PartialsRoundOnceAndTrackTheBackendCloserThanPerHopRounding) {
  constexpr int n = 8;
  constexpr std::int64_t size = 4096;
  std::vector<double> err_hop(n), err_fp32(n);
  run_local(n, [&](Communicator& c) {
    const Tensor data = rank_data(c.rank(), size, DType::kF16);
    Tensor hop = data.clone(), wide = data.clone(), backend = data.clone();
    RingOptions o;
    ring_all_reduce(c, hop, ReduceOp::kSum, o);
    o.accumulation = RingAccumulation::kFp32Partials;
    ring_all_reduce(c, wide, ReduceOp::kSum, o);
    c.all_reduce(backend);
    const auto b = elements(backend), h = elements(hop), w = elements(wide);
    for (std::size_t i = 0; i < b.size(); ++i) {
      err_hop[std::size_t(c.rank())] += std::abs(h[i] - b[i]);
      err_fp32[std::size_t(c.rank())] += std::abs(w[i] - b[i]);
      // One rounding of an FP32 sum taken in another order: at most one f16 step away.
      ASSERT_LE(std::abs(w[i] - b[i]), epsilon(DType::kF16) * std::abs(b[i]) + 1e-7) << i;
    }
  });
  EXPECT_GT(err_hop[0], 0.0) << "per-hop rounding should show on 4096 f16 sums of 8 ranks";
  EXPECT_LT(err_fp32[0], err_hop[0]);
}

TEST(Ring, Fp32PartialsOfTwoRanksEqualTheBackendBitForBit) {
  run_local(2, [&](Communicator& c) {
    for (DType dt : {DType::kF16, DType::kBF16, DType::kE4M3, DType::kE5M2}) {
      const Tensor data = rank_data(c.rank(), 1031, dt);
      Tensor ring = data.clone(), backend = data.clone();
      RingOptions o;
      o.accumulation = RingAccumulation::kFp32Partials;
      ring_all_reduce(c, ring, ReduceOp::kSum, o);
      c.all_reduce(backend);
      EXPECT_TRUE(same_bits(ring, backend)) << dtype_name(dt);
    }
  });
}

TEST(Ring, ReduceScatterInPlaceCompletesOnlyTheOwnedChunk) {
  constexpr int n = 4;
  constexpr std::int64_t size = 13;
  run_local(n, [&](Communicator& c) {
    const Tensor data = integer_data(c.rank(), size, DType::kF32);
    Tensor buf = data.clone(), full = data.clone();
    ring_reduce_scatter_inplace(c, buf);
    c.all_reduce(full);
    const int owned = ring_owned_chunk(c.rank(), n);
    EXPECT_EQ(owned, (c.rank() + 1) % n);
    for (int k = 0; k < n; ++k) {
      const ChunkRange r = ring_chunk(size, n, k);
      const Tensor want = (k == owned ? full : data).flat_slice(r.begin, r.count);
      EXPECT_TRUE(same_bits(buf.flat_slice(r.begin, r.count), want)) << "chunk " << k;
    }
    ring_all_gather_inplace(c, buf);
    EXPECT_TRUE(same_bits(buf, full)) << "rank " << c.rank();
  });
}

TEST(Ring, BlockReduceScatterAndAllGatherHaveTheBackendsSemanticsAndTraffic) {
  for (int n = 1; n <= 6; ++n) {
    for (std::int64_t k : {0, 1, 5}) {
      run_local(n, [&](Communicator& c) {
        const Tensor in = integer_data(c.rank(), n * k, DType::kBF16);
        Tensor mine = Tensor::empty({k}, DType::kBF16), theirs = mine.clone();
        RingOptions hops;  // the hops' traffic: small blocks would take the gather path
        hops.oneshot_max_bytes = hops.exchange_max_bytes = 0;
        hops.all_gather_exchange_max_bytes = 0;
        hops.reduce_scatter_exchange_max_bytes = 0;
        ring_reduce_scatter(c, in, mine, ReduceOp::kSum, hops);
        c.reduce_scatter(in, theirs);
        EXPECT_TRUE(same_bits(mine, theirs)) << "N=" << n << " k=" << k;
        Tensor all = Tensor::empty({n * k}, DType::kBF16), all_backend = all.clone();
        ring_all_gather(c, mine, all, hops);
        c.all_gather(theirs, all_backend);
        EXPECT_TRUE(same_bits(all, all_backend)) << "N=" << n << " k=" << k;
        // Each half sends and receives (N-1) blocks, as the backend charges its collectives.
        const TrafficTotals ring = c.traffic().totals("sendrecv");
        const std::size_t blocks = std::size_t(n - 1) * std::size_t(k) * 2 * 2;  // 2 B each
        EXPECT_EQ(ring.bytes_sent, blocks);
        EXPECT_EQ(ring.bytes_received, blocks);
      });
    }
  }
}

// The gather path for small buffers (RingOptions::oneshot_max_bytes) adds in the hops' order
// and rounds where they round: the same bits as the hops for every N, dtype, op and
// accumulation, on every rank, for the all-reduce and both halves with block semantics.
TEST(Ring, GatherPathForSmallBuffersHasTheHopsBits) {
  RingOptions hops;
  hops.oneshot_max_bytes = hops.exchange_max_bytes = hops.all_gather_exchange_max_bytes = 0;
  hops.reduce_scatter_exchange_max_bytes = 0;
  for (int n = 2; n <= 5; ++n) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kE4M3, DType::kF64}) {
      for (RingAccumulation acc : {RingAccumulation::kPerHop, RingAccumulation::kFp32Partials}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
          // Up to 200 elements: 5 copies of a reduce-scatter's input of 5 x 200 x f64 stay
          // within the gather limit.
          for (std::int64_t size : {std::int64_t{1}, std::int64_t{13}, std::int64_t{200}}) {
            RingOptions gather, hop = hops;
            gather.accumulation = hop.accumulation = acc;
            ASSERT_LE(std::size_t(size * n * n) * dtype_size(dt), ring_oneshot_max_bytes(gather, n));
            const std::string label = what(n, dt, size, op) +
                                      (acc == RingAccumulation::kPerHop ? " per-hop" : " fp32");
            run_local(n, [&](Communicator& c) {
              Tensor a = rank_data(c.rank(), size, dt), b = a.clone();
              ring_all_reduce(c, a, op, gather);
              ring_all_reduce(c, b, op, hop);
              EXPECT_TRUE(same_bits(a, b)) << label << " rank " << c.rank();
              const Tensor in = rank_data(c.rank(), size * n, dt);
              Tensor ra = Tensor::empty({size}, dt), rb = ra.clone();
              ring_reduce_scatter(c, in, ra, op, gather);
              ring_reduce_scatter(c, in, rb, op, hop);
              EXPECT_TRUE(same_bits(ra, rb)) << label << " reduce-scatter rank " << c.rank();
              Tensor ga = Tensor::empty({size * n}, dt), gb = ga.clone();
              ring_all_gather(c, ra, ga, gather);
              ring_all_gather(c, ra, gb, hop);
              EXPECT_TRUE(same_bits(ga, gb)) << label << " all-gather rank " << c.rank();
            });
          }
        }
      }
    }
  }
}

// The gather path's default limit follows the ring's size: on 2 ranks buffers up to 8 KiB
// gather (16 KiB for both copies) and larger ones take the hops, whose two hand-offs each read
// the neighbour's half in place (measured: RingOptions::oneshot_max_bytes); from 3 ranks the
// gather path runs to 128 KiB of copies. Told by the ops each call records.
TEST(Ring, DefaultGatherLimitIsSixteenKiBOnTwoRanksAndMoreOnMore) {
  EXPECT_EQ(ring_oneshot_max_bytes({}, 2), RingOptions::kOneShotMaxBytesTwoRanks);
  EXPECT_EQ(ring_oneshot_max_bytes({}, 3), RingOptions::kOneShotMaxBytesMoreRanks);
  RingOptions set;
  set.oneshot_max_bytes = 0;
  EXPECT_EQ(ring_oneshot_max_bytes(set, 2), 0u);
  struct Case {
    int ranks;
    std::int64_t bytes;
    bool gathers;
  };
  for (const Case k : {Case{2, 8 << 10, true}, Case{2, (8 << 10) + 4, false},
                       Case{2, 64 << 10, false}, Case{3, 16 << 10, true},
                       Case{4, 32 << 10, true}, Case{4, (32 << 10) + 4, false}}) {
    run_local(k.ranks, [&](Communicator& c) {
      Tensor buf = rank_data(c.rank(), k.bytes / 4, DType::kF32), hopped = buf.clone();
      const auto calls = [&](const char* op) { return c.traffic().totals(op).calls; };
      const std::int64_t gathers = calls("all_gather"), exchanges = calls("all_to_all");
      const std::int64_t hops = calls("sendrecv");
      ring_all_reduce(c, buf);
      // The exchange path (from 3 ranks, above the gather limit) ends in an all_gather too.
      const bool gathered =
          calls("all_gather") > gathers && calls("all_to_all") == exchanges;
      const bool hopped_calls = calls("sendrecv") > hops;
      const std::string label = "N=" + std::to_string(k.ranks) + " " +
                                std::to_string(k.bytes) + " B rank " + std::to_string(c.rank());
      EXPECT_EQ(gathered, k.gathers) << label;
      if (k.ranks == 2) {
        EXPECT_EQ(hopped_calls, !k.gathers) << label;
      }
      RingOptions forced;
      forced.oneshot_max_bytes = forced.exchange_max_bytes = 0;
      forced.all_gather_exchange_max_bytes = 0;
      ring_all_reduce(c, hopped, ReduceOp::kSum, forced);
      EXPECT_TRUE(same_bits(buf, hopped)) << label;
    });
  }
}

// A standalone all-gather adds nothing, so the backend's all_gather gives the hops' bits at any
// size, and by default ring_all_gather takes it at every size, above the exchange limit of the
// reductions too (measured: RingOptions::all_gather_exchange_max_bytes); a limit of 0 keeps
// the hops above the gather path. Told by the ops each call records.
TEST(Ring, AllGatherTakesTheBackendsAllGatherAtEverySizeUnlessTheHopsAreAsked) {
  RingOptions hops;
  hops.all_gather_exchange_max_bytes = 0;
  for (int n : {2, 3}) {
    run_local(n, [&](Communicator& c) {
      const std::int64_t k = (std::int64_t{1} << 20) / 4 + 1;  // each block just over 1 MiB
      const Tensor in = rank_data(c.rank(), k, DType::kF32);
      Tensor out = Tensor::empty({n * k}, DType::kF32), hopped = out.clone();
      ASSERT_GT(out.nbytes(), RingOptions{}.exchange_max_bytes);
      const auto calls = [&](const char* op) { return c.traffic().totals(op).calls; };
      const std::int64_t gathers = calls("all_gather"), sends = calls("sendrecv");
      ring_all_gather(c, in, out);
      const std::string label = "N=" + std::to_string(n) + " rank " + std::to_string(c.rank());
      EXPECT_EQ(calls("all_gather"), gathers + 1) << label;
      EXPECT_EQ(calls("sendrecv"), sends) << label;
      ring_all_gather(c, in, hopped, hops);
      EXPECT_EQ(calls("all_gather"), gathers + 1) << label;
      EXPECT_GT(calls("sendrecv"), sends) << label;
      EXPECT_TRUE(same_bits(out, hopped)) << label;
    });
  }
}

// The exchange path for mid-sized buffers (RingOptions::exchange_max_bytes): one all_to_all,
// each rank adding the N values of its chunk in the ring's order, then one all_gather. The
// same bits as the hops for every N, dtype, op and accumulation, on every rank, whether the
// chunks are even or not (sizes below N leave some ranks an empty chunk), for the all-reduce
// and both halves with block semantics; and the ring's traffic.
TEST(Ring, ExchangePathHasTheHopsBitsAndTraffic) {
  RingOptions hops, exchange;
  hops.oneshot_max_bytes = hops.exchange_max_bytes = hops.all_gather_exchange_max_bytes = 0;
  hops.reduce_scatter_exchange_max_bytes = 0;
  exchange.oneshot_max_bytes = 0;  // no gather path: the exchange from the first byte
  for (int n = 2; n <= 5; ++n) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kE4M3, DType::kF64}) {
      for (RingAccumulation acc : {RingAccumulation::kPerHop, RingAccumulation::kFp32Partials}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
          // 520: a 2-rank reduce-scatter's input of at least 1 KiB in every dtype, which
          // takes the exchange there (smaller ones the gather path, off here: the hops).
          for (std::int64_t size : {std::int64_t{1}, std::int64_t{13}, std::int64_t{60},
                                    std::int64_t{520}}) {
            RingOptions ex = exchange, hop = hops;
            ex.accumulation = hop.accumulation = acc;
            const std::string label = what(n, dt, size, op) +
                                      (acc == RingAccumulation::kPerHop ? " per-hop" : " fp32");
            run_local(n, [&](Communicator& c) {
              Tensor a = rank_data(c.rank(), size, dt), b = a.clone();
              ring_all_reduce(c, a, op, ex);
              ring_all_reduce(c, b, op, hop);
              EXPECT_TRUE(same_bits(a, b)) << label << " rank " << c.rank();
              const Tensor in = rank_data(c.rank(), size * n, dt);
              Tensor ra = Tensor::empty({size}, dt), rb = ra.clone();
              ring_reduce_scatter(c, in, ra, op, ex);
              ring_reduce_scatter(c, in, rb, op, hop);
              EXPECT_TRUE(same_bits(ra, rb)) << label << " reduce-scatter rank " << c.rank();
              Tensor ga = Tensor::empty({size * n}, dt), gb = ga.clone();
              ring_all_gather(c, ra, ga, ex);
              ring_all_gather(c, ra, gb, hop);
              EXPECT_TRUE(same_bits(ga, gb)) << label << " all-gather rank " << c.rank();
            });
          }
        }
      }
    }
  }
  // Traffic, 3 ranks of 300 f32 (even chunks): the all_to_all and the all_gather each move
  // (N-1)/N of the buffer, together the hops' 2(N-1)/N, and no sendrecv.
  run_local(3, [&](Communicator& c) {
    Tensor buf = rank_data(c.rank(), 300, DType::kF32);
    ring_all_reduce(c, buf, ReduceOp::kSum, exchange);
    const TrafficTotals all = c.traffic().total();
    EXPECT_EQ(all.bytes_sent, all_reduce_traffic(300, DType::kF32, 3, c.rank()).bytes_sent);
    EXPECT_EQ(all.bytes_received,
              all_reduce_traffic(300, DType::kF32, 3, c.rank()).bytes_received);
    EXPECT_EQ(c.traffic().totals("sendrecv").bytes_sent, 0u);
  });
}

TEST(Ring, NaiveAllReduceAddsInRankOrderLikeTheBackend) {
  for (int n = 1; n <= 8; ++n) {
    run_local(n, [&](Communicator& c) {
      for (std::int64_t size : kSizes) {
        const Tensor data = rank_data(c.rank(), size, DType::kF32);
        Tensor naive = data.clone(), backend = data.clone();
        naive_all_reduce(c, naive);
        c.all_reduce(backend);
        EXPECT_TRUE(same_bits(naive, backend)) << what(n, DType::kF32, size, ReduceOp::kSum);
        // With an FP32 accumulator at the root, narrow dtypes round once, as the backend does.
        const Tensor half = rank_data(c.rank(), size, DType::kF16);
        Tensor naive16 = half.clone(), backend16 = half.clone();
        RingOptions o;
        o.accumulation = RingAccumulation::kFp32Partials;
        naive_all_reduce(c, naive16, ReduceOp::kSum, o);
        c.all_reduce(backend16);
        EXPECT_TRUE(same_bits(naive16, backend16)) << what(n, DType::kF16, size, ReduceOp::kSum);
      }
    });
  }
}

TEST(Ring, WorksOnASplitGroup) {
  run_local(6, [&](Communicator& world) {
    auto group = world.split(world.rank() % 2, world.rank());
    Tensor t = integer_data(world.rank(), 7, DType::kF32), want = t.clone();
    ring_all_reduce(*group, t);
    group->all_reduce(want);
    EXPECT_TRUE(same_bits(t, want)) << "rank " << world.rank();
  });
}

// A backend without its own sendrecv_reduce (as MPI's): every call goes to the local one,
// except that the reduce-scatter hop takes Communicator's default, receive then add.
class ReceiveThenAdd final : public Communicator {
 public:
  explicit ReceiveThenAdd(Communicator& c) : c_(c) {}
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  std::string backend() const override { return c_.backend(); }
  void send(const Tensor& t, int dst, int tag) override { c_.send(t, dst, tag); }
  void recv(Tensor& t, int src, int tag) override { c_.recv(t, src, tag); }
  void sendrecv(const Tensor& s, int dst, Tensor& r, int src, int tag) override {
    c_.sendrecv(s, dst, r, src, tag);
  }
  void barrier() override { c_.barrier(); }
  void broadcast(Tensor& t, int root) override { c_.broadcast(t, root); }
  void all_reduce(Tensor& t, ReduceOp op) override { c_.all_reduce(t, op); }
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    c_.reduce_scatter(in, out, op);
  }
  void all_gather(const Tensor& in, Tensor& out) override { c_.all_gather(in, out); }
  void all_to_all(const Tensor& in, std::span<const std::int64_t> sc, Tensor& out,
                  std::span<const std::int64_t> rc) override {
    c_.all_to_all(in, sc, out, rc);
  }
  bool all_reduce_or(bool flag) override { return c_.all_reduce_or(flag); }
  void broadcast_bytes(std::span<std::byte> b, int root) override { c_.broadcast_bytes(b, root); }
  void all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) override {
    c_.all_gather_bytes(in, out);
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    return c_.split(color, key);
  }

 private:
  Communicator& c_;
};

// The local backend adds as it receives, the default receives then adds, a traced run takes
// the second path too: the same bits every way, for per-hop rounding and FP32 partials.
TEST(Ring, SameBitsWhetherTheHopAddsInPlaceOrAfterReceiving) {
  for (int n : {2, 3, 5}) {
    run_local(n, [&](Communicator& c) {
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF64}) {
        for (RingAccumulation acc : {RingAccumulation::kPerHop, RingAccumulation::kFp32Partials}) {
          const Tensor data = rank_data(c.rank(), 1031, dt);
          Tensor in_place = data.clone(), received = data.clone(), traced = data.clone();
          RingOptions o;
          o.accumulation = acc;
          o.slice_bytes = 64;  // several slices per chunk
          ring_all_reduce(c, in_place, ReduceOp::kSum, o);
          ReceiveThenAdd plain(c);
          ring_all_reduce(plain, received, ReduceOp::kSum, o);
          std::vector<RingEvent> events;
          o.trace = &events;
          ring_all_reduce(c, traced, ReduceOp::kSum, o);
          EXPECT_TRUE(same_bits(in_place, received)) << "N=" << n << " " << dtype_name(dt);
          EXPECT_TRUE(same_bits(in_place, traced)) << "N=" << n << " " << dtype_name(dt);
        }
      }
    });
  }
}

TEST(Ring, RefusesMismatchedBlocks) {
  run_local(2, [&](Communicator& c) {
    const Tensor in = Tensor::zeros({5}, DType::kF32);
    Tensor out = Tensor::zeros({2}, DType::kF32);
    EXPECT_THROW(ring_reduce_scatter(c, in, out), std::invalid_argument);
    Tensor wrong = Tensor::zeros({4}, DType::kF16);
    EXPECT_THROW(ring_all_gather(c, out, wrong), std::invalid_argument);
  });
}

}  // namespace
}  // namespace mixpar::ch04
