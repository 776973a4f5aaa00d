// TimedCommunicator (comm/timed_communicator.h): a decorator that changes no result and no
// byte of traffic, and sorts its seconds by group, operation and thread.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "comm/local_backend.h"
#include "comm/parallel_grid.h"
#include "comm/timed_communicator.h"

namespace mixpar {
namespace {

TEST(TimedCommunicator, ForwardsResultsAndTrafficUnchanged) {
  std::vector<std::vector<float>> sums(2);
  std::vector<TrafficTotals> inner(2), outer(2);
  std::vector<CommTimes> times(2);
  run_local(2, [&](Communicator& world) {
    CommClock clock;
    TimedCommunicator timed(world, clock, "g");
    Tensor t = Tensor::from_floats(std::vector<float>{1.0f + float(world.rank()), 0.5f}, {2});
    timed.all_reduce(t, ReduceOp::kSum);
    Tensor one = Tensor::from_floats(std::vector<float>{float(world.rank())}, {1});
    if (world.rank() == 0) timed.send(one, 1, 3);
    if (world.rank() == 1) timed.recv(one, 0, 3);
    const std::size_t r = std::size_t(world.rank());
    sums[r] = t.to_floats();
    inner[r] = world.traffic().total();
    outer[r] = timed.traffic().total();
    times[r] = clock.snapshot();
  });
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(sums[r], (std::vector<float>{3.0f, 1.0f}));
    EXPECT_EQ(outer[r].bytes_sent, inner[r].bytes_sent);
    EXPECT_EQ(outer[r].calls, inner[r].calls);
    EXPECT_EQ(times[r].op("g", "all_reduce").calls, 1);
    EXPECT_EQ(times[r].group("g").calls, 2);  // the all-reduce and one send or receive
    EXPECT_EQ(times[r].op("g", r == 0 ? "send" : "recv").calls, 1);
  }
}

TEST(TimedCommunicator, CallsOnAnotherThreadAreNotTheOwnersTime) {
  run_local(2, [&](Communicator& world) {
    CommClock clock;  // owned by this rank's thread
    TimedCommunicator timed(world, clock, "dp");
    std::thread other([&] {
      Tensor t = Tensor::from_floats(std::vector<float>{1.0f}, {1});
      timed.all_reduce(t, ReduceOp::kSum);
    });
    other.join();
    const CommTime t = clock.snapshot().group("dp");
    EXPECT_EQ(t.calls, 1);
    EXPECT_EQ(t.owner_s, 0.0);
    EXPECT_GT(t.other_s, 0.0);
  });
}

TEST(TimedCommunicator, TheGridTimesEachGroupUnderItsName) {
  std::vector<CommTimes> times(4);
  run_local(4, [&](Communicator& world) {
    ParallelGrid g(world, GridShape{2, 2, 1});
    Tensor t = Tensor::from_floats(std::vector<float>{1.0f}, {1});
    g.tp().all_reduce(t, ReduceOp::kSum);
    g.tp().all_reduce(t, ReduceOp::kSum);
    g.dp().all_reduce(t, ReduceOp::kSum);
    times[std::size_t(world.rank())] = g.clock().snapshot();
  });
  for (const CommTimes& t : times) {
    EXPECT_EQ(t.op("tp", "all_reduce").calls, 2);
    EXPECT_EQ(t.op("dp", "all_reduce").calls, 1);
    EXPECT_EQ(t.group("pp").calls, 0);
    EXPECT_LE(t.group("dp").owner_s, t.owner_total());
  }
}

TEST(TimedCommunicator, SinceSubtractsAnEarlierSnapshot) {
  CommTimes before, now;
  before.by_group["tp"]["all_reduce"] = {2, 0.5, 0.25};
  now.by_group["tp"]["all_reduce"] = {5, 2.0, 0.25};
  now.by_group["pp"]["send"] = {1, 1.0, 0};
  const CommTimes d = now.since(before);
  EXPECT_EQ(d.op("tp", "all_reduce").calls, 3);
  EXPECT_EQ(d.op("tp", "all_reduce").owner_s, 1.5);
  EXPECT_EQ(d.op("tp", "all_reduce").other_s, 0.0);
  EXPECT_EQ(d.owner_total(), 2.5);
}

}  // namespace
}  // namespace mixpar
