// A broken local world never hangs silently: ranks that disagree on a collective or a
// message, deadlocked ranks, a stalled rank (watchdog) and a rank that throws all end the run
// with a CommError on every rank that says who did what, and run_local rethrows the cause.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <future>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/local_backend.h"
#include "comm_local_test_util.h"
#include "util/errors.h"

namespace mixpar {
namespace {

using namespace comm_testing;
using Clock = std::chrono::steady_clock;

Tensor f32(std::int64_t n) { return Tensor::zeros({n}, DType::kF32); }

// Every rank saw a CommError, the same one run_local threw.
void expect_everyone_saw(const CommFailure& f) {
  ASSERT_FALSE(f.thrown.empty()) << "run_local threw no CommError";
  for (std::size_t r = 0; r < f.per_rank.size(); ++r) {
    EXPECT_EQ(f.per_rank[r], f.thrown) << "rank " << r;
  }
}

// ---- Collective mismatch

TEST(LocalComm, MismatchedCollectivesNameBothRanks) {
  const CommFailure f = run_expecting_comm_error(2, [](Communicator& c) {
    c.barrier();
    c.barrier();
    Tensor t = f32(1024);
    if (c.rank() == 0) c.all_reduce(t);
    else c.broadcast(t, 0);
  });
  expect_everyone_saw(f);
  EXPECT_CONTAINS(f.thrown, "collective mismatch at call #3 of world");
  EXPECT_CONTAINS(f.thrown, "rank 0 all_reduce(1024 x f32, sum)");
  EXPECT_CONTAINS(f.thrown, "rank 1 broadcast(1024 x f32, root 0)");
}

TEST(LocalComm, MismatchedSizesNameBothRanks) {
  const CommFailure f = run_expecting_comm_error(3, [](Communicator& c) {
    Tensor t = f32(c.rank() == 2 ? 1000 : 1024);
    c.all_reduce(t);
  });
  expect_everyone_saw(f);
  EXPECT_CONTAINS(f.thrown, "all_reduce(1024 x f32, sum)");
  EXPECT_CONTAINS(f.thrown, "rank 2 all_reduce(1000 x f32, sum)");
}

TEST(LocalComm, MismatchedDtypesNameBothRanks) {
  const CommFailure f = run_expecting_comm_error(2, [](Communicator& c) {
    const Tensor in = Tensor::zeros({8}, c.rank() == 0 ? DType::kF32 : DType::kBF16);
    Tensor out = Tensor::zeros({16}, in.dtype());
    c.all_gather(in, out);
  });
  expect_everyone_saw(f);
  EXPECT_CONTAINS(f.thrown, "rank 0 all_gather(8 x f32 per rank)");
  EXPECT_CONTAINS(f.thrown, "rank 1 all_gather(8 x bf16 per rank)");
}

TEST(LocalComm, MismatchedRootsAndReduceOpsNameBothRanks) {
  const CommFailure roots = run_expecting_comm_error(2, [](Communicator& c) {
    Tensor t = f32(4);
    c.broadcast(t, c.rank());
  });
  expect_everyone_saw(roots);
  EXPECT_CONTAINS(roots.thrown, "rank 0 broadcast(4 x f32, root 0)");
  EXPECT_CONTAINS(roots.thrown, "rank 1 broadcast(4 x f32, root 1)");
  const CommFailure ops = run_expecting_comm_error(2, [](Communicator& c) {
    const Tensor in = f32(4);
    Tensor out = f32(2);
    c.reduce_scatter(in, out, c.rank() == 0 ? ReduceOp::kSum : ReduceOp::kMax);
  });
  expect_everyone_saw(ops);
  EXPECT_CONTAINS(ops.thrown, "rank 0 reduce_scatter(2 x f32 per rank, sum)");
  EXPECT_CONTAINS(ops.thrown, "rank 1 reduce_scatter(2 x f32 per rank, max)");
}

// In a group of 4 split in pairs {0, 2} and {1, 3}, the pair {1, 3} disagrees: the report
// names the group and world ranks, and ranks 0 and 2, busy elsewhere, fail too.
TEST(LocalComm, MismatchInASplitGroupNamesTheGroupAndFailsEveryRank) {
  const CommFailure f = run_expecting_comm_error(4, [](Communicator& c) {
    const auto pair = c.split(c.rank() % 2, 0);
    Tensor t = f32(c.rank() == 3 ? 5 : 4);
    pair->all_reduce(t);
    c.barrier();
  });
  expect_everyone_saw(f);
  EXPECT_CONTAINS(f.thrown, "collective mismatch at call #1 of group {1, 3}");
  EXPECT_CONTAINS(f.thrown, "rank 1 all_reduce(4 x f32, sum), rank 3 all_reduce(5 x f32, sum)");
}

TEST(LocalComm, SendRecvSizeOrDtypeMismatchNamesBothRanks) {
  const CommFailure f = run_expecting_comm_error(2, [](Communicator& c) {
    if (c.rank() == 0) {
      c.send(f32(8), 1, 3);
    } else {
      Tensor t = Tensor::zeros({4}, DType::kF16);
      c.recv(t, 0, 3);
    }
  });
  EXPECT_CONTAINS(f.thrown, "send/recv mismatch: rank 0 sent 8 x f32 to rank 1 (tag 3), but "
                            "rank 1 receives 4 x f16 from rank 0 (tag 3)");
  EXPECT_EQ(f.per_rank[1], f.thrown);
}

// ---- Deadlock: reported at once, long before the watchdog.

TEST(LocalComm, BothRanksReceivingFirstIsReportedAsADeadlockAtOnce) {
  LocalOptions opts;
  opts.watchdog_seconds = 60;
  const auto start = Clock::now();
  const CommFailure f = run_expecting_comm_error(
      2,
      [](Communicator& c) {
        Tensor t = f32(4);
        c.recv(t, 1 - c.rank());
        c.send(t, 1 - c.rank());
      },
      opts);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  expect_everyone_saw(f);
  EXPECT_CONTAINS(f.thrown, "deadlock");
  EXPECT_CONTAINS(f.thrown, "rank 0 waits in recv(from 1, tag 0, 4 x f32)");
  EXPECT_CONTAINS(f.thrown, "rank 1 waits in recv(from 0, tag 0, 4 x f32)");
}

// The same exchange works with buffered sends (see comm_local_test.cpp); NCCL-like
// synchronous sends expose that it relied on buffering.
TEST(LocalComm, SynchronousSendsThatBothGoFirstAreReportedAsADeadlock) {
  LocalOptions opts;
  opts.synchronous_sends = true;
  const CommFailure f = run_expecting_comm_error(
      2,
      [](Communicator& c) {
        Tensor t = f32(4);
        c.send(t, 1 - c.rank(), 1);
        c.recv(t, 1 - c.rank(), 1);
      },
      opts);
  expect_everyone_saw(f);
  EXPECT_CONTAINS(f.thrown, "deadlock");
  EXPECT_CONTAINS(f.thrown, "rank 0 waits in send(to 1, tag 1, 4 x f32)");
  EXPECT_CONTAINS(f.thrown, "rank 1 waits in send(to 0, tag 1, 4 x f32)");
}

TEST(LocalComm, WaitingForARankThatFinishedIsADeadlock) {
  const CommFailure f = run_expecting_comm_error(2, [](Communicator& c) {
    if (c.rank() == 1) return;
    Tensor t = f32(1);
    c.recv(t, 1, 2);
  });
  EXPECT_CONTAINS(f.thrown, "rank 0 waits in recv(from 1, tag 2, 1 x f32); rank 1 has finished");
}

// A collective waiting for a rank that itself waits for a message nobody will send.
TEST(LocalComm, CollectiveAndRecvWaitingOnEachOtherAreADeadlock) {
  const CommFailure f = run_expecting_comm_error(3, [](Communicator& c) {
    if (c.rank() == 2) {
      Tensor t = f32(1);
      c.recv(t, 0);
    }
    c.barrier();
  });
  expect_everyone_saw(f);
  EXPECT_CONTAINS(f.thrown, "rank 0 waits in barrier() (call #1 of world) for rank 2");
  EXPECT_CONTAINS(f.thrown, "rank 2 waits in recv(from 0, tag 0, 1 x f32)");
}

// ---- Watchdog: a rank that never arrives. Rank 1 is "computing": it waits on a future that
// rank 0 fulfils once its own call has failed, so nothing sleeps and no thread is left behind.

CommFailure run_with_stalled_rank(int n, const std::function<void(Communicator&)>& blocked_call) {
  LocalOptions opts;
  opts.watchdog_seconds = 0.2;
  std::promise<void> failed;
  std::future<void> released = failed.get_future();
  return run_expecting_comm_error(
      n,
      [&](Communicator& c) {
        if (c.rank() == 1) {
          released.wait_for(std::chrono::seconds(20));
          return;
        }
        if (c.rank() != 0) return;
        try {
          blocked_call(c);
        } catch (...) {
          failed.set_value();
          throw;
        }
      },
      opts);
}

TEST(LocalComm, WatchdogReportsWhereEachRankIs) {
  const auto start = Clock::now();
  const CommFailure f = run_with_stalled_rank(2, [](Communicator& c) { c.barrier(); });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  EXPECT_CONTAINS(f.thrown, "watchdog: rank 0 waited 0.2 s in the communicator");
  EXPECT_CONTAINS(f.thrown, "rank 0 waits in barrier() (call #1 of world) for rank 1");
  EXPECT_CONTAINS(f.thrown, "rank 1 is computing (not in the communicator)");
}

TEST(LocalComm, WatchdogReportsFinishedRanksAndWaitsInRecv) {
  const CommFailure group = run_with_stalled_rank(4, [](Communicator& c) {
    Tensor t = f32(2);  // ranks 2 and 3 have returned, rank 1 never comes
    c.all_reduce(t);
  });
  EXPECT_CONTAINS(group.thrown, "rank 0 waits in all_reduce(2 x f32, sum) (call #1 of world)");
  EXPECT_CONTAINS(group.thrown, "rank 2 has finished");
  const CommFailure recv = run_with_stalled_rank(2, [](Communicator& c) {
    Tensor t = f32(3);
    c.recv(t, 1, 9);
  });
  EXPECT_CONTAINS(recv.thrown, "rank 0 waits in recv(from 1, tag 9, 3 x f32)");
  EXPECT_CONTAINS(recv.thrown, "rank 1 is computing (not in the communicator)");
}

TEST(LocalComm, WatchdogFiresInsideASubGroup) {
  LocalOptions opts;
  opts.watchdog_seconds = 0.2;
  std::promise<void> failed;
  std::future<void> released = failed.get_future();
  const CommFailure f = run_expecting_comm_error(
      4,
      [&](Communicator& c) {
        const auto pair = c.split(c.rank() / 2, 0);  // {0, 1} and {2, 3}
        if (c.rank() == 1) released.wait_for(std::chrono::seconds(20));
        if (c.rank() != 0) return;
        try {
          pair->barrier();
        } catch (...) {
          failed.set_value();
          throw;
        }
      },
      opts);
  EXPECT_CONTAINS(f.thrown, "rank 0 waits in barrier() (call #1 of group {0, 1}) for rank 1");
}

// ---- A failing rank stops the world, and its own exception reaches the caller.

TEST(LocalComm, ExceptionOnRank2Of4ReachesTheCallerAndReleasesTheOthers) {
  std::vector<std::string> seen(4);
  EXPECT_THROW(run_local(4,
                         [&](Communicator& c) {
                           if (c.rank() == 2) throw std::out_of_range("rank 2 gave up");
                           try {
                             Tensor t = f32(16);
                             c.all_reduce(t);
                           } catch (const CommError& e) {
                             seen[static_cast<std::size_t>(c.rank())] = e.what();
                             throw;
                           }
                         }),
               std::out_of_range);
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(seen[static_cast<std::size_t>(r)], "rank 2 failed: rank 2 gave up") << "rank " << r;
  }
}

TEST(LocalComm, MessagesNeverReceivedFailTheRun) {
  const CommFailure f = run_expecting_comm_error(2, [](Communicator& c) {
    if (c.rank() == 0) c.send(f32(2), 1, 4);
  });
  EXPECT_EQ(f.thrown,
            "messages sent but never received: rank 0 sent 1 message(s) to rank 1 (tag 4)");
}

TEST(LocalComm, AFailedWorldRefusesAnotherRun) {
  LocalWorld world(2);
  EXPECT_THROW(world.run([](Communicator& c) {
                 if (c.rank() == 0) throw std::runtime_error("boom");
               }),
               std::runtime_error);
  EXPECT_THROW(world.run([](Communicator&) {}), std::logic_error);
}

TEST(LocalComm, BadArgumentsAreRejectedOnTheCallingRank) {
  EXPECT_THROW(run_local(2,
                         [](Communicator& c) {
                           if (c.rank() == 0) c.send(f32(1), 2);
                         }),
               std::invalid_argument);
  EXPECT_THROW(run_local(1,
                         [](Communicator& c) {
                           Tensor out = f32(3);
                           c.reduce_scatter(f32(4), out);
                         }),
               std::invalid_argument);
  EXPECT_THROW(LocalWorld(0), std::invalid_argument);
}

// A watchdog that fired is its own error, with its own exit code (util/errors.h): not exit 1
// as an internal error, not 3, a halted run's. Its limit is range-checked on every backend
// (1e10 s overflowed the MPI watchdog's deadline, which then fired at once).
TEST(LocalComm, AWatchdogTimeoutHasItsOwnTypeAndExitCode) {
  LocalOptions opts;
  opts.watchdog_seconds = 0.2;
  std::promise<void> failed;
  std::future<void> released = failed.get_future();
  std::string what;
  try {
    run_local(
        2,
        [&](Communicator& c) {
          if (c.rank() == 1) {
            released.wait_for(std::chrono::seconds(20));
            return;
          }
          try {
            c.barrier();
          } catch (...) {
            failed.set_value();
            throw;
          }
        },
        opts);
  } catch (const CommWatchdogTimeout& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("watchdog: rank 0 waited 0.2 s"), std::string::npos) << what;
  char prog[] = "tool";
  char* argv[] = {prog, nullptr};
  testing::internal::CaptureStderr();
  const int code = run_main(1, argv, [](int, char**) -> int { throw CommWatchdogTimeout("stuck"); });
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, kExitWatchdog);
  EXPECT_EQ(kExitWatchdog, 4);
  EXPECT_EQ(err, "tool: watchdog: stuck\n");
  // A plain CommError (a mismatch) stays an internal error.
  testing::internal::CaptureStderr();
  EXPECT_EQ(run_main(1, argv, [](int, char**) -> int { throw CommError("mismatch"); }), 1);
  testing::internal::GetCapturedStderr();
  for (double bad : {1e10, 1e6 + 1, std::nan("")}) {
    LocalOptions o;
    o.watchdog_seconds = bad;
    EXPECT_THROW(run_local(2, [](Communicator&) {}, o), InputError) << bad;
  }
  EXPECT_NO_THROW(check_watchdog_seconds("x", 1e6));
  EXPECT_NO_THROW(check_watchdog_seconds("x", 0));
  EXPECT_NO_THROW(check_watchdog_seconds("x", -1));
}

}  // namespace
}  // namespace mixpar
