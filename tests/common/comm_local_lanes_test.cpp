// A dup (Communicator::dup) on the local backend is a lane of its own: a second
// thread of each rank talks on it while the first talks to other groups, each
// with its own status for the deadlock check, its own wake-ups and its own fast
// channels; the lanes and the root fail together, and a lane's reports name the
// world's ranks.
#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/local_backend.h"
#include "comm_local_test_util.h"

namespace mixpar {
namespace {

using namespace comm_testing;

Tensor f32(std::int64_t n) { return Tensor::zeros({n}, DType::kF32); }

// Runs `lane_work` on a second thread of the rank while the calling thread runs
// `main_work`; rethrows the second thread's exception, if any, after the
// first's.
void beside(const std::function<void()>& lane_work, const std::function<void()>& main_work) {
  std::exception_ptr lane_error;
  std::thread t([&] {
    try {
      lane_work();
    } catch (...) {
      lane_error = std::current_exception();
    }
  });
  try {
    main_work();
  } catch (...) {
    t.join();
    throw;
  }
  t.join();
  if (lane_error) std::rethrow_exception(lane_error);
}

// Both threads of each rank send to the same peer and receive from it, and both
// reduce: on one fabric the pair's fast channel would have two producers and
// two consumers, and one status would describe two waits. Every result is
// checked against the serial reduction.
TEST(LocalLanes, ADupsCallsRunBesideTheSameRanksCallsOnASecondThread) {
  constexpr int kRounds = 400;
  for (int ranks : {2, 3}) {
    run_local(ranks, [&](Communicator& world) {
      std::unique_ptr<Communicator> group = world.split(0, world.rank());
      std::unique_ptr<Communicator> lane = group->dup();
      ASSERT_NE(lane, nullptr);
      EXPECT_EQ(lane->size(), group->size());
      EXPECT_EQ(lane->rank(), group->rank());
      const int r = world.rank(), next = (r + 1) % ranks, prev = (r + ranks - 1) % ranks;
      // A size per round, below and above the one-shot limit and the eager limit (16 KiB).
      const auto size_of = [](int i) -> std::int64_t { return std::int64_t{1} << (2 + i % 12); };
      const auto talk = [&](Communicator& c, int salt) {
        for (int i = 0; i < kRounds; ++i) {
          const std::int64_t n = size_of(i + salt);
          Tensor t = rank_data(c.rank(), n, DType::kF32);
          c.all_reduce(t);
          EXPECT_TRUE(same_bits(t, serial_reduce(ranks, n, DType::kF32, ReduceOp::kSum))) << n;
          Tensor out = f32(n);
          c.sendrecv(rank_data(r + salt, n, DType::kF32), next, out, prev, i);
          EXPECT_TRUE(same_bits(out, rank_data(prev + salt, n, DType::kF32))) << n;
        }
      };
      beside([&] { talk(*lane, 7); }, [&] { talk(*group, 0); });
    });
  }
}

// A lane of a group that is part of the world: tp 2 x dp 2, the dp group's dup
// reducing on a second thread while the first all-reduces over tp, as a
// gradient sync beside tensor parallelism does.
TEST(LocalLanes, ADataParallelDupReducesWhileTheComputeThreadTalksToTensorParallel) {
  constexpr int kRounds = 300;
  run_local(4, [&](Communicator& world) {
    const int r = world.rank();
    std::unique_ptr<Communicator> tp = world.split(r / 2, r);
    std::unique_ptr<Communicator> dp = world.split(r % 2, r);
    std::unique_ptr<Communicator> lane = dp->dup();
    const auto reduce = [&](Communicator& c, int salt) {
      for (int i = 0; i < kRounds; ++i) {
        const std::int64_t n = std::int64_t{1} << (3 + (i + salt) % 11);
        Tensor t = rank_data(c.rank(), n, DType::kBF16);
        c.all_reduce(t);
        EXPECT_TRUE(same_bits(t, serial_reduce(2, n, DType::kBF16, ReduceOp::kSum))) << n;
      }
    };
    beside([&] { reduce(*lane, 5); }, [&] { reduce(*tp, 0); });
    // The dp group itself still works after its lane did, and the lane after
    // the threads.
    Tensor t = rank_data(dp->rank(), 64, DType::kF32);
    dp->all_reduce(t);
    lane->all_reduce(t);
  });
}

// Ranks whose lane threads each wait to receive from the other are deadlocked
// on the lane: the lane's own check says so, naming world ranks and the dup,
// and every rank's threads get the error (the compute thread waits in the
// root's barrier meanwhile).
TEST(LocalLanes, ADeadlockOnALaneIsReportedInWorldRanks) {
  const CommFailure f = run_expecting_comm_error(4, [](Communicator& world) {
    const int r = world.rank();
    std::unique_ptr<Communicator> dp = world.split(r % 2, r);
    std::unique_ptr<Communicator> lane = dp->dup();
    beside(
        [&] {
          Tensor t = f32(8);
          if (r % 2 == 1) lane->recv(t, 1 - lane->rank());
        },
        [&] { world.barrier(); });
  });
  EXPECT_CONTAINS(f.thrown, "deadlock");
  EXPECT_CONTAINS(f.thrown,
                  "rank 1 waits in recv(from 3, tag 0, 8 x f32) in group {1, 3} (a dup, "
                  "on a lane of its own)");
  EXPECT_CONTAINS(f.thrown, "rank 3 waits in recv(from 1");
  for (int r : {1, 3}) EXPECT_EQ(f.per_rank[static_cast<std::size_t>(r)], f.thrown) << r;
}

// A rank that fails on its compute thread releases a peer whose lane thread
// waits for it: the failure reaches the lane, which would otherwise wait until
// the watchdog.
TEST(LocalLanes, AFailureOfARankReleasesAPeerWaitingOnALane) {
  LocalOptions opts;
  opts.watchdog_seconds = 120;  // far beyond the test's time: the release is the failure's
  std::string lane_error;
  try {
    run_local(
        2,
        [&](Communicator& world) {
          std::unique_ptr<Communicator> lane = world.dup();
          if (world.rank() == 0) throw std::runtime_error("rank 0's step failed");
          beside(
              [&] {
                Tensor t = f32(4);
                try {
                  lane->recv(t, 0);
                } catch (const CommError& e) {
                  lane_error = e.what();
                  throw;
                }
              },
              [] {});
        },
        opts);
    FAIL() << "run_local returned";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "rank 0's step failed");
  }
  EXPECT_CONTAINS(lane_error, "rank 0 failed: rank 0's step failed");
}

// A mismatch between the ranks of a lane names both calls in world ranks.
TEST(LocalLanes, AMismatchOnALaneNamesTheWorldRanks) {
  const CommFailure f = run_expecting_comm_error(4, [](Communicator& world) {
    const int r = world.rank();
    std::unique_ptr<Communicator> dp = world.split(r % 2, r);
    std::unique_ptr<Communicator> lane = dp->dup();
    if (r % 2 == 0) return;
    Tensor t = f32(r == 1 ? 1 << 16 : 1 << 15);
    lane->all_reduce(t);
  });
  EXPECT_CONTAINS(f.thrown,
                  "collective mismatch at call #1 of group {1, 3} (a dup, on a lane of "
                  "its own)");
  EXPECT_CONTAINS(f.thrown, "rank 1 all_reduce(65536 x f32, sum)");
  EXPECT_CONTAINS(f.thrown, "rank 3 all_reduce(32768 x f32, sum)");
}

}  // namespace
}  // namespace mixpar
