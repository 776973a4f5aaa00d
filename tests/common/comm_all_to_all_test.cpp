// all_to_all with variable counts on the local backend: every block lands where its
// definition says (zero counts included, as expert parallelism's empty experts make them),
// the traffic is the other ranks' blocks, and counts that disagree with the sender's or do
// not add up are refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "comm/local_backend.h"
#include "comm_local_test_util.h"

namespace mixpar {
namespace {

using namespace comm_testing;

// Elements rank p sends rank q: 0 for some pairs (an expert with no tokens), up to 3.
std::int64_t count_of(int p, int q) { return (p * 3 + q * 5 + 1) % 4; }
float value_of(int p, int q, std::int64_t i) { return value_at(p, q * 1000 + i, 40); }

struct Exchange {
  std::vector<std::int64_t> send_counts, recv_counts;
  Tensor in, want;
};
Exchange exchange_of(int r, int n) {
  Exchange e;
  std::vector<float> in, want;
  for (int q = 0; q < n; ++q) {
    e.send_counts.push_back(count_of(r, q));
    e.recv_counts.push_back(count_of(q, r));
    for (std::int64_t i = 0; i < count_of(r, q); ++i) in.push_back(value_of(r, q, i));
    for (std::int64_t i = 0; i < count_of(q, r); ++i) want.push_back(value_of(q, r, i));
  }
  e.in = Tensor::from_floats(in, {std::int64_t(in.size())});
  e.want = Tensor::from_floats(want, {std::int64_t(want.size())});
  return e;
}

TEST(CommAllToAll, EveryBlockLandsInRankOrderWithZeroCountsAndItsTraffic) {
  for (int n : {1, 2, 3, 4}) {
    run_local(n, [n](Communicator& c) {
      const Exchange e = exchange_of(c.rank(), n);
      Tensor out = Tensor::empty(e.want.shape(), DType::kF32);
      c.all_to_all(e.in, e.send_counts, out, e.recv_counts);
      EXPECT_TRUE(same_bits(out, e.want)) << "rank " << c.rank() << " of " << n;
      std::int64_t sent = 0, received = 0;
      for (int q = 0; q < n; ++q) {
        if (q == c.rank()) continue;
        sent += count_of(c.rank(), q);
        received += count_of(q, c.rank());
      }
      const TrafficTotals t = c.traffic().totals("all_to_all");
      EXPECT_EQ(t.calls, 1);
      EXPECT_EQ(t.bytes_sent, std::size_t(sent) * 4);
      EXPECT_EQ(t.bytes_received, std::size_t(received) * 4);
    });
  }
}

TEST(CommAllToAll, ACountThatDisagreesWithTheSendersIsACommError) {
  EXPECT_THROW(run_local(2, [](Communicator& c) {
                 const Exchange e = exchange_of(c.rank(), 2);
                 std::vector<std::int64_t> wrong = e.recv_counts;
                 if (c.rank() == 1) wrong[0] += 1;
                 Tensor out = Tensor::empty({wrong[0] + wrong[1]}, DType::kF32);
                 c.all_to_all(e.in, e.send_counts, out, wrong);
               }),
               CommError);
}

TEST(CommAllToAll, CountsThatDoNotMatchTheTensorsAreRefusedBeforeAnyExchange) {
  run_local(2, [](Communicator& c) {
    const Tensor in = Tensor::zeros({3}, DType::kF32);
    Tensor out = Tensor::zeros({3}, DType::kF32);
    const std::vector<std::int64_t> two = {1, 1}, one = {3};
    EXPECT_THROW(c.all_to_all(in, two, out, two), std::invalid_argument);  // sums 2, not 3
    EXPECT_THROW(c.all_to_all(in, one, out, one), std::invalid_argument);  // one count, 2 ranks
  });
}

}  // namespace
}  // namespace mixpar
