// The local communicator does what the Communicator header promises: every collective equals
// its serial definition bit for bit (N = 1..8, every dtype, sizes 0, 1 and not divisible by
// N), runs are bit-reproducible, traffic is charged exactly as documented, split groups work,
// and each rank's allocations land on its own ledger.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>
#include <string>
#include <thread>
#include <vector>

#include "comm/local_backend.h"
#include "comm/local_kernels.h"
#include "comm/polled_lock.h"
#include "comm_local_test_util.h"

namespace mixpar {
namespace {

using namespace comm_testing;

constexpr int kMaxRanks = 8;
// 13 and 1031 are prime (not divisible by any N > 1 here); 1031 spans two 1024-blocks.
constexpr std::int64_t kSizes[] = {0, 1, 13, 1031};

std::string what(int n, DType dt, std::int64_t size) {
  return "N=" + std::to_string(n) + " " + std::string(dtype_name(dt)) + " size " +
         std::to_string(size);
}

TEST(LocalComm, RankAndSizeNumberTheThreads) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    std::vector<int> seen(static_cast<std::size_t>(n), 0);
    run_local(n, [&](Communicator& c) {
      EXPECT_EQ(c.size(), n);
      EXPECT_EQ(c.backend(), "local");
      ++seen[static_cast<std::size_t>(c.rank())];  // each rank writes only its own slot
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(seen[static_cast<std::size_t>(r)], 1) << "rank " << r;
  }
}

// The serial results for every dtype, size and op, computed once on the test's thread; the
// rank threads only read them.
using SerialKey = std::tuple<DType, std::int64_t, ReduceOp>;
std::map<SerialKey, Tensor> serial_results(int n, std::int64_t size_factor) {
  std::map<SerialKey, Tensor> out;
  for (DType dt : kAllDTypes) {
    for (std::int64_t size : kSizes) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        out[{dt, size, op}] = serial_reduce(n, size * size_factor, dt, op);
      }
    }
  }
  return out;
}

TEST(LocalComm, AllReduceEqualsSerialSumAndMaxForEveryDtypeAndSize) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    const auto want = serial_results(n, 1);
    run_local(n, [&](Communicator& c) {
      for (const auto& [key, expected] : want) {
        const auto& [dt, size, op] = key;
        Tensor t = rank_data(c.rank(), size, dt);
        c.all_reduce(t, op);
        EXPECT_TRUE(same_bits(t, expected))
            << what(n, dt, size) << " " << reduce_op_name(op) << " rank " << c.rank();
      }
    });
  }
}

TEST(LocalComm, ReduceScatterGivesEachRankItsBlockOfTheSerialReduction) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    const auto want = serial_results(n, n);
    run_local(n, [&](Communicator& c) {
      for (const auto& [key, full] : want) {
        const auto& [dt, k, op] = key;
        const Tensor in = rank_data(c.rank(), n * k, dt);
        Tensor out = Tensor::empty({k}, dt);
        c.reduce_scatter(in, out, op);
        EXPECT_TRUE(same_bits(out, full.flat_slice(c.rank() * k, k).clone()))
            << what(n, dt, k) << " " << reduce_op_name(op) << " rank " << c.rank();
      }
    });
  }
}

TEST(LocalComm, AllGatherPutsRankRsBlockAtBlockR) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    run_local(n, [&](Communicator& c) {
      for (DType dt : kAllDTypes) {
        for (std::int64_t k : kSizes) {
          const Tensor in = rank_data(c.rank(), k, dt);
          Tensor out = Tensor::empty({n * k}, dt);
          c.all_gather(in, out);
          for (int r = 0; r < n; ++r) {
            EXPECT_TRUE(same_bits(out.flat_slice(r * k, k).clone(), rank_data(r, k, dt)))
                << what(n, dt, k) << " block " << r << " on rank " << c.rank();
          }
        }
      }
    });
  }
}

// Lowers local::copy_bytes' streaming threshold for one scope (it is process-wide).
class StreamedCopies {
 public:
  explicit StreamedCopies(std::size_t from) : old_(local::set_streaming_copy_min_bytes(from)) {}
  ~StreamedCopies() { local::set_streaming_copy_min_bytes(old_); }
  StreamedCopies(const StreamedCopies&) = delete;
  StreamedCopies& operator=(const StreamedCopies&) = delete;

 private:
  std::size_t old_;
};

// A streamed copy (non-temporal stores past the cache) copies the destination's unaligned head
// plainly, then 64-byte lines in 16-byte stores, then the tail: every alignment of either side
// and every length around those boundaries must give memcpy's bytes, and the bytes on either
// side of the destination must not change.
TEST(LocalKernels, StreamedCopiesEqualMemcpyAtEveryAlignmentAndLength) {
  const StreamedCopies streamed(1);
  std::vector<std::byte> src(4200), dst(4300), want(4300);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = std::byte((i * 37 + 11) & 0xff);
  for (std::size_t d = 0; d < 20; ++d) {
    for (std::size_t s = 0; s < 20; ++s) {
      for (std::size_t len : {1, 15, 16, 17, 63, 64, 65, 79, 80, 127, 128, 129, 1000, 4096 + 7}) {
        std::fill(dst.begin(), dst.end(), std::byte{0xa5});
        want = dst;
        std::memcpy(want.data() + d, src.data() + s, len);
        local::copy_bytes(dst.data() + d, src.data() + s, len);
        ASSERT_TRUE(dst == want) << "dst offset " << d << ", src offset " << s << ", " << len
                                 << " bytes";
      }
    }
  }
}

// Whether a copy streams is the whole call's output, not the copy's own size: a call whose
// output outgrows the cache evicts its own blocks however it cuts them.
TEST(LocalKernels, ACopyStreamsWhenItOrItsCallsOutputReachesTheThreshold) {
  const StreamedCopies streamed(1000);
  EXPECT_FALSE(local::copy_streams(999, 999));
  EXPECT_FALSE(local::copy_streams(10, 0));
  EXPECT_TRUE(local::copy_streams(10, 1000));
  EXPECT_TRUE(local::copy_streams(1000, 0));
  const StreamedCopies never(0);
  EXPECT_FALSE(local::copy_streams(std::size_t{1} << 30, std::size_t{1} << 30));
}

// An all-to-all's and an all-gather's blocks stream once the output reaches the threshold,
// each block smaller than it; below it none does. Every rank's every block, its own too.
TEST(LocalComm, AllToAllAndAllGatherStreamTheirBlocksOnceTheOutputReachesTheThreshold) {
  const StreamedCopies streamed(std::size_t{64} << 10);
  for (int n : {2, 3}) {
    for (std::int64_t k : {std::int64_t{1024}, std::int64_t{12288}}) {  // 4 / 48 KiB blocks
      const std::size_t out_bytes = static_cast<std::size_t>(n * k) * 4;
      const bool streams = out_bytes >= (std::size_t{64} << 10);
      const std::uint64_t before = local::streamed_copy_bytes();
      run_local(n, [&](Communicator& c) {
        const std::vector<std::int64_t> counts(static_cast<std::size_t>(n), k);
        const Tensor send = rank_data(c.rank(), n * k, DType::kF32);
        Tensor recv = Tensor::empty({n * k}, DType::kF32);
        c.all_to_all(send, counts, recv, counts);
        const Tensor in = rank_data(c.rank(), k, DType::kF32);
        Tensor out = Tensor::empty({n * k}, DType::kF32);
        c.all_gather(in, out);
        for (int r = 0; r < n; ++r) {
          EXPECT_TRUE(same_bits(out.flat_slice(r * k, k).clone(), rank_data(r, k, DType::kF32)));
        }
      });
      const std::uint64_t streamed_bytes = local::streamed_copy_bytes() - before;
      EXPECT_EQ(streamed_bytes, streams ? 2 * n * out_bytes : 0) << "N=" << n << " k=" << k;
    }
  }
}

// The collectives' copies streamed (from 64 bytes): gathers, broadcasts, sends and
// exchanges deliver the same bits, so each streamed copy is fenced before the flag or
// hand-off that tells the reader it is done.
TEST(LocalComm, CollectivesDeliverTheSameBitsWithStreamedCopies) {
  const StreamedCopies streamed(64);
  for (int n : {2, 3, 4}) {
    run_local(n, [&](Communicator& c) {
      const int next = (c.rank() + 1) % n, prev = (c.rank() + n - 1) % n;
      for (std::int64_t k : {std::int64_t{13}, std::int64_t{1031}, std::int64_t{70001}}) {
        const Tensor in = rank_data(c.rank(), k, DType::kF32);
        Tensor out = Tensor::empty({n * k}, DType::kF32);
        c.all_gather(in, out);
        for (int r = 0; r < n; ++r) {
          EXPECT_TRUE(same_bits(out.flat_slice(r * k, k).clone(), rank_data(r, k, DType::kF32)))
              << "all_gather N=" << n << " size " << k << " block " << r;
        }
        Tensor b = rank_data(c.rank(), k, DType::kF32);
        c.broadcast(b, n - 1);
        EXPECT_TRUE(same_bits(b, rank_data(n - 1, k, DType::kF32))) << "broadcast " << k;
        Tensor got = Tensor::empty({k}, DType::kF32);
        c.sendrecv(in, prev, got, next);
        EXPECT_TRUE(same_bits(got, rank_data(next, k, DType::kF32))) << "sendrecv " << k;
        const std::vector<std::int64_t> counts(static_cast<std::size_t>(n), k);
        const Tensor send = rank_data(c.rank(), n * k, DType::kF32);
        Tensor recv = Tensor::empty({n * k}, DType::kF32);
        c.all_to_all(send, counts, recv, counts);
        for (int r = 0; r < n; ++r) {
          EXPECT_TRUE(same_bits(recv.flat_slice(r * k, k).clone(),
                                rank_data(r, n * k, DType::kF32).flat_slice(c.rank() * k, k).clone()))
              << "all_to_all N=" << n << " size " << k << " from " << r;
        }
      }
    });
  }
}

TEST(LocalComm, BroadcastCopiesTheRootsTensorToEveryRank) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    run_local(n, [&](Communicator& c) {
      for (DType dt : kAllDTypes) {
        for (std::int64_t size : kSizes) {
          for (int root = 0; root < n; ++root) {
            Tensor t = rank_data(c.rank(), size, dt);
            c.broadcast(t, root);
            EXPECT_TRUE(same_bits(t, rank_data(root, size, dt)))
                << what(n, dt, size) << " root " << root << " on rank " << c.rank();
          }
        }
      }
    });
  }
}

TEST(LocalComm, SendRecvAroundARingDeliversEveryDtypeAndSize) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    run_local(n, [&](Communicator& c) {
      const int next = (c.rank() + 1) % n, prev = (c.rank() + n - 1) % n;
      for (DType dt : kAllDTypes) {
        for (std::int64_t size : kSizes) {
          Tensor got = Tensor::empty({size}, dt);
          c.send(rank_data(c.rank(), size, dt), next, 7);
          c.recv(got, prev, 7);
          EXPECT_TRUE(same_bits(got, rank_data(prev, size, dt))) << what(n, dt, size);
          Tensor got2 = Tensor::empty({size}, dt);
          c.sendrecv(rank_data(c.rank(), size, dt), prev, got2, next);
          EXPECT_TRUE(same_bits(got2, rank_data(next, size, dt))) << what(n, dt, size);
        }
      }
    });
  }
}

TEST(LocalComm, BufferedSendsLetBothRanksSendFirst) {
  run_local(2, [](Communicator& c) {
    Tensor t = Tensor::from_floats(std::vector{1.0f * c.rank()}, {1});
    c.send(t, 1 - c.rank());
    c.recv(t, 1 - c.rank());
    EXPECT_EQ(t.item(), 1.0f - c.rank());
  });
}

TEST(LocalComm, SendrecvRingCompletesWithSynchronousSends) {
  LocalOptions opts;
  opts.synchronous_sends = true;
  for (int n = 1; n <= kMaxRanks; ++n) {
    run_local(
        n,
        [&](Communicator& c) {
          Tensor got = Tensor::empty({13}, DType::kBF16);
          c.sendrecv(rank_data(c.rank(), 13, DType::kBF16), (c.rank() + 1) % n, got,
                     (c.rank() + n - 1) % n);
          EXPECT_TRUE(same_bits(got, rank_data((c.rank() + n - 1) % n, 13, DType::kBF16)));
          if (c.rank() % 2 == 0 && c.rank() + 1 < n) c.send(got, c.rank() + 1, 3);
          if (c.rank() % 2 == 1) c.recv(got, c.rank() - 1, 3);
        },
        opts);
  }
}

TEST(LocalComm, MessagesOfOneTagArriveInOrderAndTagsAreSeparateQueues) {
  run_local(2, [](Communicator& c) {
    if (c.rank() == 0) {
      for (float v : {1.0f, 2.0f, 3.0f}) c.send(Tensor::from_floats(std::vector{v}, {1}), 1, 0);
      c.send(Tensor::from_floats(std::vector{9.0f}, {1}), 1, 5);
      return;
    }
    Tensor t = Tensor::empty({1}, DType::kF32);
    c.recv(t, 0, 5);  // the later message of another tag can be taken first
    EXPECT_EQ(t.item(), 9.0f);
    for (float want : {1.0f, 2.0f, 3.0f}) {
      c.recv(t, 0, 0);
      EXPECT_EQ(t.item(), want);
    }
  });
}

TEST(LocalComm, SixteenBitSumsAccumulateInFp32AndRoundOnce) {
  // fp16 spacing at 2048 is 2: adding 1 three times in fp16 stays at 2048 each time, while
  // the FP32 sum 2051 rounds once to 2052 (the tie goes to the even significand).
  run_local(4, [](Communicator& c) {
    Tensor t = Tensor::from_floats(std::vector{c.rank() == 0 ? 2048.0f : 1.0f}, {1}, DType::kF16);
    c.all_reduce(t);
    EXPECT_EQ(t.item(), 2052.0f);
  });
}

TEST(LocalComm, OverflowingSumsBecomeInfOrNanNotTheLargestFiniteValue) {
  run_local(4, [](Communicator& c) {
    Tensor h = Tensor::from_floats(std::vector{30000.0f}, {1}, DType::kF16);
    c.all_reduce(h);
    EXPECT_EQ(h.item(), std::numeric_limits<float>::infinity());
    Tensor e4 = Tensor::from_floats(std::vector{256.0f}, {1}, DType::kE4M3);
    c.all_reduce(e4);  // 1024 > 448: E4M3 has no inf, so NaN
    EXPECT_TRUE(std::isnan(e4.item()));
  });
}

TEST(LocalComm, MaxPropagatesNanFromAnyRank) {
  run_local(3, [](Communicator& c) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    Tensor t = Tensor::from_floats(std::vector{c.rank() == 1 ? nan : 5.0f, 1.0f * c.rank()}, {2});
    c.all_reduce(t, ReduceOp::kMax);
    EXPECT_TRUE(std::isnan(t.to_floats()[0]));
    EXPECT_EQ(t.to_floats()[1], 2.0f);
  });
}

TEST(LocalComm, AllReduceIsBitIdenticalAcrossRanksAndRuns) {
  constexpr int kRanks = 8;
  constexpr std::int64_t kN = 4099;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<std::vector<std::byte>> first;
    for (int run = 0; run < 5; ++run) {
      std::vector<std::vector<std::byte>> got(kRanks);
      run_local(kRanks, [&](Communicator& c) {
        Tensor t = rank_data(c.rank(), kN, dt);
        c.all_reduce(t);
        got[static_cast<std::size_t>(c.rank())] = bytes_of(t);
      });
      for (int r = 1; r < kRanks; ++r) EXPECT_EQ(got[static_cast<std::size_t>(r)], got[0]);
      if (run == 0) first = got;
      EXPECT_EQ(got, first) << dtype_name(dt) << " run " << run;
    }
  }
}

// ---- Traffic: exactly the documented per-rank volumes.

TEST(LocalComm, AllReduceChargesTheRingsBytesAndTwoNMinusOneBuffersInTotal) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (const std::int64_t size : std::vector<std::int64_t>{0, 1, 13, 840}) {
      LocalWorld world(n);
      world.run([&](Communicator& c) {
        Tensor t = rank_data(c.rank(), size, DType::kBF16);
        c.all_reduce(t);
      });
      const std::size_t bytes = static_cast<std::size_t>(size) * 2;
      std::size_t sent = 0, received = 0;
      for (int r = 0; r < n; ++r) {
        const TrafficTotals t = world.comm(r).traffic().totals("all_reduce");
        const TrafficTotals want = all_reduce_traffic(size, DType::kBF16, n, r);
        EXPECT_EQ(t.calls, 1);
        EXPECT_EQ(t.bytes_sent, want.bytes_sent) << "N=" << n << " size " << size << " rank " << r;
        EXPECT_EQ(t.bytes_received, want.bytes_received);
        if (size % n == 0) {  // 840 = 3 * 5 * 7 * 8: every N here divides it
          EXPECT_EQ(t.bytes_sent, 2 * (n - 1) * bytes / n);
        }
        sent += t.bytes_sent;
        received += t.bytes_received;
      }
      EXPECT_EQ(sent, 2 * static_cast<std::size_t>(n - 1) * bytes) << "N=" << n << " size " << size;
      EXPECT_EQ(received, sent);
    }
  }
}

TEST(LocalComm, OtherCallsChargeTheDocumentedVolumes) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    constexpr std::int64_t k = 10;
    LocalWorld world(n);
    world.run([&](Communicator& c) {
      const Tensor in = rank_data(c.rank(), n * k, DType::kF32);
      Tensor block = Tensor::empty({k}, DType::kF32);
      c.reduce_scatter(in, block);
      Tensor all = Tensor::empty({n * k}, DType::kF32);
      c.all_gather(block, all);
      c.broadcast(all, n - 1);
      c.barrier();
      c.split(0, 0);
      Tensor got = Tensor::empty({k}, DType::kF32);
      c.sendrecv(block, (c.rank() + 1) % n, got, (c.rank() + n - 1) % n);
    });
    const std::size_t kb = k * 4, moved = static_cast<std::size_t>(n - 1) * kb;
    for (int r = 0; r < n; ++r) {
      const TrafficRecorder& t = world.comm(r).traffic();
      EXPECT_EQ(t.totals("reduce_scatter").bytes_sent, moved) << "N=" << n;
      EXPECT_EQ(t.totals("reduce_scatter").bytes_received, moved);
      EXPECT_EQ(t.totals("all_gather").bytes_sent, moved);
      EXPECT_EQ(t.totals("all_gather").bytes_received, moved);
      const bool root = r == n - 1;
      EXPECT_EQ(t.totals("broadcast").bytes_sent, root && n > 1 ? n * kb : 0u);
      EXPECT_EQ(t.totals("broadcast").bytes_received, root ? 0u : n * kb);
      EXPECT_EQ(t.totals("sendrecv").bytes_sent, kb);
      EXPECT_EQ(t.totals("sendrecv").bytes_received, kb);
      for (const char* op : {"barrier", "split"}) {
        EXPECT_EQ(t.totals(op).calls, 1);
        EXPECT_EQ(t.totals(op).bytes_sent + t.totals(op).bytes_received, 0u);
      }
      EXPECT_EQ(t.total().calls, 6);
    }
  }
}

// Chapter 4 builds all-reduce from sendrecv with the documented ring; it must be charged
// exactly what the built-in all_reduce is charged, on every rank.
TEST(LocalComm, RingOverSendrecvIsChargedLikeAllReduce) {
  for (int n = 2; n <= kMaxRanks; ++n) {
    constexpr std::int64_t kN = 101;
    LocalWorld world(n);
    world.run([&](Communicator& c) {
      const int r = c.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
      const auto chunk = [&](Tensor& t, int i) {
        const ChunkRange cr = ring_chunk(kN, n, ((i % n) + n) % n);
        return t.flat_slice(cr.begin, cr.count);
      };
      std::vector<float> mine(kN);  // small integers: every summation order is exact
      for (std::int64_t i = 0; i < kN; ++i) mine[static_cast<std::size_t>(i)] = float(r * 100 + i);
      Tensor t = Tensor::from_floats(mine, {kN});
      for (int s = 0; s < n - 1; ++s) {  // reduce-scatter
        Tensor out = chunk(t, r - s), in = chunk(t, r - s - 1);
        Tensor got = Tensor::empty({in.numel()}, DType::kF32);
        c.sendrecv(out, next, got, prev);
        for (std::int64_t i = 0; i < in.numel(); ++i) {
          in.data_as<float>()[i] += got.data_as<float>()[i];
        }
      }
      for (int s = 0; s < n - 1; ++s) {  // all-gather
        Tensor out = chunk(t, r + 1 - s), in = chunk(t, r - s);
        c.sendrecv(out, next, in, prev);
      }
      for (std::int64_t i = 0; i < kN; ++i) {
        ASSERT_EQ(element(t, i), 100.0 * n * (n - 1) / 2 + double(n * i)) << "element " << i;
      }
    });
    for (int r = 0; r < n; ++r) {
      const TrafficTotals ring = world.comm(r).traffic().totals("sendrecv");
      const TrafficTotals want = all_reduce_traffic(kN, DType::kF32, n, r);
      EXPECT_EQ(ring.bytes_sent, want.bytes_sent) << "N=" << n << " rank " << r;
      EXPECT_EQ(ring.bytes_received, want.bytes_received) << "N=" << n << " rank " << r;
    }
  }
}

TEST(LocalComm, RingChunksCoverTheBufferLongestFirst) {
  EXPECT_EQ(ring_chunk(10, 4, 0).begin, 0);
  EXPECT_EQ(ring_chunk(10, 4, 0).count, 3);
  EXPECT_EQ(ring_chunk(10, 4, 1).begin, 3);
  EXPECT_EQ(ring_chunk(10, 4, 1).count, 3);
  EXPECT_EQ(ring_chunk(10, 4, 2).begin, 6);
  EXPECT_EQ(ring_chunk(10, 4, 2).count, 2);
  EXPECT_EQ(ring_chunk(10, 4, 3).begin, 8);
  EXPECT_EQ(ring_chunk(3, 8, 7).count, 0);
  EXPECT_THROW(ring_chunk(10, 4, 4), std::invalid_argument);
}

// ---- Split groups

TEST(LocalComm, SplitIntoRowsAndColumnsOfA2x4GridReducesWithinEachGroup) {
  run_local(8, [](Communicator& c) {
    const int row = c.rank() / 4, col = c.rank() % 4;
    const auto rows = c.split(row, col);
    const auto cols = c.split(col, row);
    ASSERT_EQ(rows->size(), 4);
    ASSERT_EQ(cols->size(), 2);
    EXPECT_EQ(rows->rank(), col);
    EXPECT_EQ(cols->rank(), row);
    Tensor r = Tensor::from_floats(std::vector{1.0f * c.rank()}, {1});
    rows->all_reduce(r);
    EXPECT_EQ(r.item(), row == 0 ? 0 + 1 + 2 + 3 : 4 + 5 + 6 + 7);
    Tensor k = Tensor::from_floats(std::vector{1.0f * c.rank()}, {1});
    cols->all_reduce(k, ReduceOp::kMax);
    EXPECT_EQ(k.item(), 4.0f + col);
    Tensor b = Tensor::from_floats(std::vector{1.0f * c.rank()}, {1});
    rows->broadcast(b, 3);
    EXPECT_EQ(b.item(), 4.0f * row + 3);
    Tensor gathered = Tensor::empty({2}, DType::kF32);
    cols->all_gather(Tensor::from_floats(std::vector{1.0f * c.rank()}, {1}), gathered);
    EXPECT_EQ(gathered.to_floats(), (std::vector<float>{1.0f * col, 4.0f + col}));
    Tensor got = Tensor::empty({1}, DType::kF32);
    rows->sendrecv(Tensor::from_floats(std::vector{1.0f * c.rank()}, {1}), (col + 1) % 4, got,
                   (col + 3) % 4);
    EXPECT_EQ(got.item(), 4.0f * row + (col + 3) % 4);
    EXPECT_EQ(rows->traffic().totals("all_reduce").calls, 1);  // each group keeps its own
    EXPECT_EQ(c.traffic().totals("all_reduce").calls, 0);
  });
}

TEST(LocalComm, SplitOrdersByKeyThenParentRankAndNegativeColorGetsNoGroup) {
  run_local(6, [](Communicator& c) {
    const auto reversed = c.split(0, -c.rank());
    EXPECT_EQ(reversed->rank(), 5 - c.rank());
    const auto same_key = c.split(c.rank() % 2, 0);
    EXPECT_EQ(same_key->rank(), c.rank() / 2);
    const auto some = c.split(c.rank() < 2 ? -1 : 1, 0);
    EXPECT_EQ(some == nullptr, c.rank() < 2);
    if (some) {
      const auto nested = some->split(some->rank() % 2, 0);  // {2, 4} and {3, 5}
      Tensor t = Tensor::from_floats(std::vector{1.0f * c.rank()}, {1});
      nested->all_reduce(t);
      EXPECT_EQ(t.item(), c.rank() % 2 == 0 ? 6.0f : 8.0f);
    }
  });
}

// ---- Memory: each rank charges its own ledger; the network holds messages in flight.

TEST(LocalComm, EachRankChargesItsOwnLedgerAndMessagesChargeTheNetwork) {
  LocalWorld world(4);
  world.run([&](Communicator& c) {
    EXPECT_EQ(&current_ledger(), &world.ledger(c.rank()));
    const Tensor g = Tensor::zeros({(c.rank() + 1) * 100}, DType::kF32, MemCategory::kGradients);
    c.send(g.flat_slice(0, 100), (c.rank() + 1) % 4);
    Tensor got = Tensor::empty({100}, DType::kF32, MemCategory::kCommBuffers);
    c.recv(got, (c.rank() + 3) % 4);
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(world.ledger(r).peak(MemCategory::kGradients), (r + 1) * 400u) << "rank " << r;
    EXPECT_EQ(world.ledger(r).peak(MemCategory::kCommBuffers), 400u);
    EXPECT_EQ(world.ledger(r).live_total(), 0u);
  }
  EXPECT_GE(world.network_ledger().peak(MemCategory::kCommBuffers), 400u);
  EXPECT_EQ(world.network_ledger().live_total(), 0u);
}

TEST(LocalComm, TensorsAllocatedOnARankMayOutliveTheWorld) {
  std::vector<Tensor> kept(3);
  run_local(3, [&](Communicator& c) {
    Tensor t = Tensor::from_floats(std::vector{1.0f}, {1});
    c.all_reduce(t);
    kept[static_cast<std::size_t>(c.rank())] = t;
  });
  for (const Tensor& t : kept) EXPECT_EQ(t.item(), 3.0f);
  kept.clear();  // frees into the parked ledgers, not into freed memory
}

TEST(LocalComm, ACleanWorldCanRunAgainAndKeepsCounting) {
  LocalWorld world(2);
  for (int i = 0; i < 3; ++i) {
    world.run([](Communicator& c) { c.barrier(); });
  }
  EXPECT_EQ(world.comm(1).traffic().totals("barrier").calls, 3);
}

// lock_polling (comm/polled_lock.h) returns the mutex locked, whether it was free or held by
// another thread that releases it later, with polls and without: the holder's writes, made
// under the lock, are all there once it returns, and no one else can take the mutex then.
TEST(LocalPolledLock, ReturnsTheMutexLockedWhetherFreeOrReleasedByItsHolder) {
  for (const int polls : {0, 1, local::kLockPolls}) {
    std::mutex mu;
    {
      std::unique_lock<std::mutex> free_lock = local::lock_polling(mu, polls);
      ASSERT_TRUE(free_lock.owns_lock()) << polls;
      bool taken_elsewhere = true;
      std::thread([&] {
        taken_elsewhere = mu.try_lock();
        if (taken_elsewhere) mu.unlock();
      }).join();
      EXPECT_FALSE(taken_elsewhere) << polls;
    }
    constexpr int kWrites = 200000;
    int written = 0;  // plain int: only the mutex orders the holder's writes and the reads
    std::atomic<bool> holding{false};
    std::thread holder([&] {
      const std::lock_guard<std::mutex> hold(mu);
      holding.store(true, std::memory_order_release);
      for (int i = 0; i < kWrites; ++i) {
        written = written + 1;
        // A compiler barrier now and then: the loop cannot fold into one add, so the holder
        // keeps the mutex while the main thread asks for it.
        if (i % 1024 == 0) std::atomic_signal_fence(std::memory_order_seq_cst);
      }
    });
    while (!holding.load(std::memory_order_acquire)) std::this_thread::yield();
    std::unique_lock<std::mutex> lock = local::lock_polling(mu, polls);
    EXPECT_TRUE(lock.owns_lock()) << polls;
    EXPECT_EQ(written, kWrites) << polls;
    lock.unlock();
    holder.join();
  }
}

}  // namespace
}  // namespace mixpar
