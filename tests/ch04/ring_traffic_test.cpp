// What the ring puts on the wire, as the communicator recorded it: each rank sends and
// receives exactly 2(N-1)/N of the buffer (the backend's own accounting, to the byte, for any
// size), against the naive version whose root carries (N-1) buffers each way. And the trace
// of a 3-rank ring shows the chunks the convention promises.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ch04_ddp/ring_lesson.h"
#include "comm/local_backend.h"
#include "comm_local_test_util.h"

namespace mixpar::ch04 {
namespace {

TEST(RingTraffic, EachRankSendsExactlyTwoNMinusOneOverNOfTheBuffer) {
  for (int n = 2; n <= 8; ++n) {
    const std::int64_t numel = 840;  // divisible by every N here
    const TrafficMeasure m = measure_traffic(AllReduceAlgo::kRing, n, numel);
    const std::size_t want = 2 * std::size_t(n - 1) * m.buffer_bytes / std::size_t(n);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(m.per_rank[std::size_t(r)].bytes_sent, want) << "N=" << n << " rank " << r;
      EXPECT_EQ(m.per_rank[std::size_t(r)].bytes_received, want) << "N=" << n << " rank " << r;
    }
  }
}

TEST(RingTraffic, EqualsTheBackendsAccountingToTheByteForAnySize) {
  for (int n = 1; n <= 8; ++n) {
    for (std::int64_t numel : {0, 1, 13, 1031}) {
      const TrafficMeasure ring = measure_traffic(AllReduceAlgo::kRing, n, numel);
      const TrafficMeasure backend = measure_traffic(AllReduceAlgo::kBackend, n, numel);
      for (int r = 0; r < n; ++r) {
        const TrafficTotals want = all_reduce_traffic(numel, DType::kF32, n, r);
        const auto i = std::size_t(r);
        EXPECT_EQ(ring.per_rank[i].bytes_sent, want.bytes_sent) << n << " " << numel << " " << r;
        EXPECT_EQ(ring.per_rank[i].bytes_received, want.bytes_received) << n << " " << numel;
        EXPECT_EQ(backend.per_rank[i].bytes_sent, want.bytes_sent);
        EXPECT_EQ(backend.per_rank[i].bytes_received, want.bytes_received);
      }
    }
  }
}

TEST(RingTraffic, NaiveRootCarriesNMinusOneBuffersEachWay) {
  for (int n = 2; n <= 8; ++n) {
    const TrafficMeasure m = measure_traffic(AllReduceAlgo::kNaive, n, 840);
    const std::size_t b = m.buffer_bytes;
    EXPECT_EQ(m.per_rank[0].bytes_received, std::size_t(n - 1) * b) << "N=" << n;
    EXPECT_EQ(m.per_rank[0].bytes_sent, std::size_t(n - 1) * b) << "N=" << n;
    for (int r = 1; r < n; ++r) {
      EXPECT_EQ(m.per_rank[std::size_t(r)].bytes_sent, b);
      EXPECT_EQ(m.per_rank[std::size_t(r)].bytes_received, b);
    }
    // The busiest link: (N-1) B for the naive root against 2(N-1)/N B on every ring link.
    const TrafficMeasure ring = measure_traffic(AllReduceAlgo::kRing, n, 840);
    EXPECT_EQ(m.max_received() * 2, ring.max_received() * std::size_t(n)) << "N=" << n;
  }
}

TEST(RingTrace, ThreeRanksFollowTheChunkConvention) {
  const auto per_rank = trace_all_reduce(3, 3, false);
  for (int r = 0; r < 3; ++r) {
    const std::vector<RingEvent>& ev = per_rank[std::size_t(r)];
    ASSERT_EQ(ev.size(), 4u) << "2 reduce-scatter + 2 all-gather steps, rank " << r;
    for (int s = 0; s < 2; ++s) {
      EXPECT_EQ(ev[std::size_t(s)].phase, "reduce-scatter");
      EXPECT_EQ(ev[std::size_t(s)].sent_chunk, (r - s + 3) % 3);
      EXPECT_EQ(ev[std::size_t(s)].got_chunk, (r - s - 1 + 6) % 3);
      EXPECT_EQ(ev[std::size_t(s) + 2].phase, "all-gather");
      EXPECT_EQ(ev[std::size_t(s) + 2].sent_chunk, (r + 1 - s + 3) % 3);
      EXPECT_EQ(ev[std::size_t(s) + 2].got_chunk, (r - s + 3) % 3);
    }
    // After the reduce-scatter rank r holds chunk r+1 complete: (c+1) * 111.
    const int owned = (r + 1) % 3;
    EXPECT_EQ(ev[1].got_chunk, owned);
    EXPECT_EQ(ev[1].result, std::vector<float>{111.0f * float(owned + 1)});
  }
  // Rank 0's first step: its own c0 out, rank 2's c2 (300) in, plus its own 3.
  EXPECT_EQ(per_rank[0][0].sent, std::vector<float>{1.0f});
  EXPECT_EQ(per_rank[0][0].got, std::vector<float>{300.0f});
  EXPECT_EQ(per_rank[0][0].result, std::vector<float>{303.0f});
  const std::string text = format_ring_trace(per_rank);
  EXPECT_CONTAINS(text, "c0 [1] to 1");
  EXPECT_CONTAINS(text, "c2 [300] from 2");
  EXPECT_CONTAINS(text, "c2 = [303]");
  EXPECT_CONTAINS(text, "all-gather");
}

TEST(RingTrace, NaiveRootAddsEveryRankInTurn) {
  const auto per_rank = trace_all_reduce(3, 2, true);
  ASSERT_EQ(per_rank[0].size(), 2u);
  EXPECT_EQ(per_rank[0][0].result, (std::vector<float>{11.0f, 22.0f}));
  EXPECT_EQ(per_rank[0][1].result, (std::vector<float>{111.0f, 222.0f}));
  EXPECT_EQ(per_rank[2].back().result, (std::vector<float>{111.0f, 222.0f}));
}

}  // namespace
}  // namespace mixpar::ch04
