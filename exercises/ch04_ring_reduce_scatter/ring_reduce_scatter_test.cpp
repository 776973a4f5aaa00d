// ring_reduce_scatter on n threads joined by mailboxes: rank r ends with chunk r + 1 summed
// over every rank, sends exactly (n - 1)/n of the buffer, for sizes n does and does not divide.
// Integer-valued inputs make every order of the sum exact.
#include "ch04_ring_reduce_scatter/ring_reduce_scatter.h"
#include "ring_mailboxes.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

namespace mixpar::exercises {
namespace {

float value(int rank, std::int64_t i) { return static_cast<float>((i + 1) * (rank + 1)); }

void check_ring(int n, std::int64_t size) {
  Mailboxes box(n);
  std::vector<std::vector<float>> bufs(static_cast<std::size_t>(n));
  std::vector<std::int64_t> sent(static_cast<std::size_t>(n), 0), calls(sent);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    auto& b = bufs[static_cast<std::size_t>(r)];
    for (std::int64_t i = 0; i < size; ++i) b.push_back(value(r, i));
    threads.emplace_back([&, r] {
      const RingExchange exchange = [&, r](const std::vector<float>& to_right) {
        sent[static_cast<std::size_t>(r)] += static_cast<std::int64_t>(to_right.size());
        ++calls[static_cast<std::size_t>(r)];
        box.post((r + 1) % n, to_right);
        return box.take(r);
      };
      ring_reduce_scatter(r, n, bufs[static_cast<std::size_t>(r)], exchange);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(calls[static_cast<std::size_t>(r)], n - 1) << "rank " << r;
    const int owned = (r + 1) % n;
    const ChunkRange c = ring_chunk(size, n, owned);
    for (std::int64_t i = c.begin; i < c.end; ++i) {
      float want = 0;
      for (int q = 0; q < n; ++q) want += value(q, i);
      ASSERT_EQ(bufs[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)], want)
          << "rank " << r << " element " << i;
    }
    EXPECT_EQ(sent[static_cast<std::size_t>(r)], size - (c.end - c.begin)) << "rank " << r;
  }
}

TEST(RingChunk, CoversTheBufferLongestChunksFirst) {
  EXPECT_EQ(ring_chunk(10, 4, 0).begin, 0);
  EXPECT_EQ(ring_chunk(10, 4, 0).end, 3);
  EXPECT_EQ(ring_chunk(10, 4, 1).end, 6);
  EXPECT_EQ(ring_chunk(10, 4, 2).end, 8);
  EXPECT_EQ(ring_chunk(10, 4, 3).end, 10);
}

TEST(RingReduceScatter, RankROwnsChunkRPlusOneSummed) { check_ring(4, 8); }
TEST(RingReduceScatter, WorksWhenTheRanksDoNotDivideTheSize) { check_ring(3, 10); }
TEST(RingReduceScatter, WorksOnTwoAndOnSevenRanks) {
  check_ring(2, 5);
  check_ring(7, 23);
}

}  // namespace
}  // namespace mixpar::exercises
