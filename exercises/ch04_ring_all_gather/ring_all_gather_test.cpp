// ring_all_gather on n threads joined by mailboxes, against chapter 4's ring_all_gather_inplace
// on a local group of n threads with the same inputs: every rank ends with every owner's chunk,
// bit for bit the same buffers, in n - 1 exchanges of one chunk each.
#include "ch04_ring_all_gather/ring_all_gather.h"
#include "ring_mailboxes.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "ch04_ddp/ring_allreduce.h"
#include "comm/local_backend.h"

namespace mixpar::exercises {
namespace {

// Rank r's input: its owned chunk holds its values, the other chunks stale partial sums.
std::vector<float> input(int r, int n, std::int64_t size) {
  std::vector<float> b(static_cast<std::size_t>(size));
  const ChunkRange own = ring_chunk(size, n, ch04::ring_owned_chunk(r, n));
  for (std::int64_t i = 0; i < size; ++i) {
    const bool owned = i >= own.begin && i < own.begin + own.count;
    b[static_cast<std::size_t>(i)] = owned ? static_cast<float>(i * 7 + r) * 0.25f
                                           : -1000.0f - static_cast<float>(r);
  }
  return b;
}

void check_ring(int n, std::int64_t size) {
  Mailboxes box(n);
  std::vector<std::vector<float>> bufs(static_cast<std::size_t>(n));
  std::vector<std::int64_t> sent(static_cast<std::size_t>(n), 0), calls(sent);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    bufs[static_cast<std::size_t>(r)] = input(r, n, size);
    threads.emplace_back([&, r] {
      const RingSendRecv exchange = [&, r](const std::vector<float>& to_right) {
        sent[static_cast<std::size_t>(r)] += static_cast<std::int64_t>(to_right.size());
        ++calls[static_cast<std::size_t>(r)];
        box.post((r + 1) % n, to_right);
        return box.take(r);
      };
      ring_all_gather(r, n, bufs[static_cast<std::size_t>(r)], exchange);
    });
  }
  for (std::thread& t : threads) t.join();
  // Chapter 4's all-gather on the same inputs.
  std::vector<std::vector<float>> want(static_cast<std::size_t>(n));
  run_local(n, [&](Communicator& comm) {
    Tensor t = Tensor::from_floats(input(comm.rank(), n, size), {size});
    ch04::ring_all_gather_inplace(comm, t);
    want[static_cast<std::size_t>(comm.rank())] = t.to_floats();
  });
  const std::int64_t largest = ring_chunk(size, n, 0).count;
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE(testing::Message() << n << " ranks, " << size << " elements, rank " << r);
    EXPECT_EQ(calls[static_cast<std::size_t>(r)], n - 1);
    EXPECT_EQ(bufs[static_cast<std::size_t>(r)], want[static_cast<std::size_t>(r)]);
    EXPECT_EQ(bufs[static_cast<std::size_t>(r)], want[0]) << "every rank the same buffer";
    EXPECT_LE(sent[static_cast<std::size_t>(r)], size) << "one chunk per exchange";
    EXPECT_GE(sent[static_cast<std::size_t>(r)], size - largest) << "n - 1 chunks in all";
  }
}

TEST(RingAllGather, EveryRankEndsWithEveryOwnersChunk) { check_ring(4, 8); }
TEST(RingAllGather, WorksWhenTheRanksDoNotDivideTheSize) { check_ring(3, 10); }
TEST(RingAllGather, WorksOnTwoAndOnSevenRanks) {
  check_ring(2, 5);
  check_ring(7, 23);
}

}  // namespace
}  // namespace mixpar::exercises
