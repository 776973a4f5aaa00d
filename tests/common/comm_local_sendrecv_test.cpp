// The local backend's rendezvous: sendrecv and sendrecv_reduce above the eager limit, and
// synchronous sends, lend the sender's buffer and the receiver copies (or adds) straight out
// of it, nothing staged, the sender returning only once that is done. And every guarantee of
// the two-copy version holds: exact delivery in both directions at once, tag order, mismatch
// reports on both ranks, deadlock and watchdog reports, and a failing rank releasing a peer
// blocked in a rendezvous. Tests of the rendezvous itself set the eager limit to 0, so that
// their small messages are lent too.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/local_backend.h"
#include "comm_local_test_util.h"

namespace mixpar {
namespace {

using namespace comm_testing;

// Every sendrecv lent, whatever its size.
constexpr LocalOptions kRendezvous{.eager_limit_bytes = 0};

Tensor f32(std::vector<float> v) {
  const auto n = static_cast<std::int64_t>(v.size());
  return Tensor::from_floats(v, {n});
}

void expect_everyone_saw(const CommFailure& f) {
  ASSERT_FALSE(f.thrown.empty()) << "run_local threw no CommError";
  for (std::size_t r = 0; r < f.per_rank.size(); ++r) {
    EXPECT_EQ(f.per_rank[r], f.thrown) << "rank " << r;
  }
}

// Nothing is staged in the network's memory: the eager send's copy is the only allocation
// the network ledger ever sees.
TEST(LocalSendrecv, ReceiverCopiesStraightFromSenderBuffer) {
  LocalWorld world(2, {.synchronous_sends = true});
  world.run([](Communicator& c) {
    const int peer = 1 - c.rank();
    const Tensor mine = rank_data(c.rank(), 1000, DType::kF32);
    Tensor got = Tensor::empty({1000}, DType::kF32);
    c.sendrecv(mine, peer, got, peer);
    EXPECT_TRUE(same_bits(got, rank_data(peer, 1000, DType::kF32)));
    if (c.rank() == 0) c.send(mine, 1, 1);  // synchronous: lent too
    else c.recv(got, 0, 1);
  });
  EXPECT_EQ(world.network_ledger().peak(MemCategory::kCommBuffers), 0u);

  LocalWorld eager(2);
  eager.run([](Communicator& c) {
    Tensor t = Tensor::zeros({1000}, DType::kF32);
    if (c.rank() == 0) c.send(t, 1);
    else c.recv(t, 0);
  });
  EXPECT_GE(eager.network_ledger().peak(MemCategory::kCommBuffers), 4000u);
}

// Both ranks send to and receive from each other in the same call, every dtype, sizes 0 and
// 1 included; a single rank exchanges with itself.
TEST(LocalSendrecv, BothDirectionsAtOnceDeliverEveryDtypeAndSize) {
  for (int n : {1, 2}) {
    run_local(n, [&](Communicator& c) {
      const int peer = (c.rank() + 1) % n;
      for (DType dt : kAllDTypes) {
        for (std::int64_t size : {0, 1, 2, 1031}) {
          const Tensor mine = rank_data(c.rank(), size, dt);
          Tensor got = Tensor::empty({size}, dt);
          c.sendrecv(mine, peer, got, peer, 3);
          EXPECT_TRUE(same_bits(got, rank_data(peer, size, dt)))
              << "N=" << n << " " << dtype_name(dt) << " size " << size;
          EXPECT_TRUE(same_bits(mine, rank_data(c.rank(), size, dt))) << "send buffer changed";
        }
      }
    });
  }
}

// The sender's buffer is read in place, so sendrecv cannot return before the receiver has
// copied it: here the receiver first waits for a message the sender only sends after its
// sendrecv. Buffered, that would run; as a rendezvous it is a deadlock, reported at once.
void receive_the_later_message_first(Communicator& c, std::int64_t n) {
  Tensor got = Tensor::empty({n}, DType::kF32);
  if (c.rank() == 0) {
    c.sendrecv(Tensor::zeros({n}, DType::kF32), 1, got, 1);
    c.send(f32({3}), 1, 9);
  } else {
    c.send(Tensor::zeros({n}, DType::kF32), 0);  // eager: rank 0's receive completes
    Tensor first = Tensor::empty({1}, DType::kF32);
    c.recv(first, 0, 9);
    c.recv(got, 0);
  }
}

TEST(LocalSendrecv, SenderWaitsUntilTheReceiverHasCopied) {
  const CommFailure f = run_expecting_comm_error(
      2, [](Communicator& c) { receive_the_later_message_first(c, 2); }, kRendezvous);
  expect_everyone_saw(f);
  EXPECT_CONTAINS(f.thrown, "deadlock");
  EXPECT_CONTAINS(f.thrown, "rank 0 waits in send(to 1, tag 0, 2 x f32)");
  EXPECT_CONTAINS(f.thrown, "rank 1 waits in recv(from 0, tag 9, 1 x f32)");
}

// The eager limit is MPI's: a message of at most eager_limit_bytes is copied into the network
// and its sender goes on (the program above runs); one element more and it is lent, and the
// same program is the deadlock above.
TEST(LocalSendrecv, MessagesUpToTheEagerLimitAreCopiedAndLargerOnesLent) {
  constexpr LocalOptions kLimit{.eager_limit_bytes = 64};
  LocalWorld eager(2, kLimit);
  eager.run([](Communicator& c) { receive_the_later_message_first(c, 16); });  // 64 bytes
  EXPECT_GE(eager.network_ledger().peak(MemCategory::kCommBuffers), 64u);

  const CommFailure f = run_expecting_comm_error(
      2, [](Communicator& c) { receive_the_later_message_first(c, 17); }, kLimit);
  EXPECT_CONTAINS(f.thrown, "deadlock");
  EXPECT_CONTAINS(f.thrown, "rank 0 waits in send(to 1, tag 0, 17 x f32)");
}

// One queue per (sender, receiver, tag), in order, whether a message is a buffered copy or a
// lent buffer: the eager message queued first is received first.
TEST(LocalSendrecv, TagsSelectQueuesAndEachQueueKeepsItsOrder) {
  run_local(2, [](Communicator& c) {
    Tensor got = Tensor::empty({1}, DType::kF32);
    if (c.rank() == 0) {
      c.send(f32({1}), 1, 4);                 // eager, tag 4
      c.send(f32({10}), 1, 5);                // eager, tag 5
      c.sendrecv(f32({2}), 1, got, 1, 4);     // lent, tag 4, after the eager one
      EXPECT_EQ(got.item(), 7.0f);
      return;
    }
    c.recv(got, 0, 5);
    EXPECT_EQ(got.item(), 10.0f);
    c.sendrecv(f32({7}), 0, got, 0, 4);
    EXPECT_EQ(got.item(), 1.0f);
    c.recv(got, 0, 4);
    EXPECT_EQ(got.item(), 2.0f);
  }, kRendezvous);
}

TEST(LocalSendrecv, SizeMismatchIsReportedOnBothRanks) {
  const CommFailure f = run_expecting_comm_error(2, [](Communicator& c) {
    const Tensor out = Tensor::zeros({c.rank() == 0 ? 8 : 4}, DType::kF32);
    Tensor in = Tensor::zeros({4}, DType::kF32);
    c.sendrecv(out, 1 - c.rank(), in, 1 - c.rank(), 2);
  }, kRendezvous);
  expect_everyone_saw(f);
  EXPECT_EQ(f.thrown, "send/recv mismatch: rank 0 sent 8 x f32 to rank 1 (tag 2), but rank 1 "
                      "receives 4 x f32 from rank 0 (tag 2)");
}

TEST(LocalSendrecv, DtypeMismatchInASplitGroupNamesTheGroup) {
  const CommFailure f = run_expecting_comm_error(4, [](Communicator& c) {
    const auto pair = c.split(c.rank() % 2, 0);  // {0, 2} and {1, 3}
    const Tensor out = Tensor::zeros({3}, c.rank() == 3 ? DType::kBF16 : DType::kF32);
    Tensor in = Tensor::zeros({3}, DType::kF32);
    pair->sendrecv(out, 1 - pair->rank(), in, 1 - pair->rank());
  }, kRendezvous);
  EXPECT_CONTAINS(f.thrown, "send/recv mismatch in group {1, 3}: rank 3 sent 3 x bf16 to rank 1");
  EXPECT_EQ(f.per_rank[1], f.thrown);
  EXPECT_EQ(f.per_rank[3], f.thrown);
}

// The receiver would read the very bytes its own receive is writing.
TEST(LocalSendrecv, OverlappingSendAndReceiveBuffersAreRefused) {
  EXPECT_THROW(run_local(1,
                         [](Communicator& c) {
                           Tensor t = Tensor::zeros({8}, DType::kF32);
                           Tensor recv = t.flat_slice(3, 4);
                           c.sendrecv(t.flat_slice(0, 4), 0, recv, 0);
                         }),
               std::invalid_argument);
}

// Rank 1 fails while rank 0 is blocked in a rendezvous: waiting for its message (receive
// half) or for its receiver (send half, after the receive completed). Rank 0 is released
// with rank 1's error, its lent buffer is withdrawn, and the caller gets the original error.
TEST(LocalSendrecv, ARankThatThrowsReleasesAPeerBlockedInARendezvous) {
  for (const bool peer_sends_first : {false, true}) {
    std::string seen;
    EXPECT_THROW(run_local(2,
                           [&](Communicator& c) {
                             if (c.rank() == 1) {
                               if (peer_sends_first) c.send(f32({1, 2}), 0);
                               throw std::out_of_range("rank 1 gave up");
                             }
                             try {
                               Tensor got = Tensor::empty({2}, DType::kF32);
                               c.sendrecv(f32({3, 4}), 1, got, 1);
                             } catch (const CommError& e) {
                               seen = e.what();
                               throw;
                             }
                           },
                           kRendezvous),
                 std::out_of_range)
        << (peer_sends_first ? "blocked in the send half" : "blocked in the receive half");
    EXPECT_EQ(seen, "rank 1 failed: rank 1 gave up");
  }
}

// A receiver that never comes: the watchdog reports the sender waiting in its send half.
// Rank 1 stalls on a future that rank 0 fulfils once its call failed (no sleeps).
TEST(LocalSendrecv, WatchdogReportsASenderWaitingForItsReceiver) {
  std::promise<void> failed;
  std::future<void> released = failed.get_future();
  const CommFailure f = run_expecting_comm_error(
      2,
      [&](Communicator& c) {
        if (c.rank() == 1) {
          c.send(f32({1, 2, 3}), 0, 6);
          released.wait_for(std::chrono::seconds(20));
          return;
        }
        try {
          Tensor got = Tensor::empty({3}, DType::kF32);
          c.sendrecv(f32({4, 5, 6}), 1, got, 1, 6);
        } catch (...) {
          failed.set_value();
          throw;
        }
      },
      {.watchdog_seconds = 0.2, .eager_limit_bytes = 0});
  EXPECT_CONTAINS(f.thrown, "watchdog: rank 0 waited 0.2 s in the communicator");
  EXPECT_CONTAINS(f.thrown, "rank 0 waits in send(to 1, tag 6, 3 x f32)");
  EXPECT_CONTAINS(f.thrown, "rank 1 is computing (not in the communicator)");
}

// A ring of sendrecvs, eager, lent, then with synchronous sends, with and without spinning
// before sleeping: many rounds, each rank's buffer overwritten right after each call returns,
// which is only safe if its receiver is done (lent) or the message was copied (eager).
TEST(LocalSendrecv, BuffersAreReusableAsSoonAsTheCallReturns) {
  const LocalOptions synchronous{.synchronous_sends = true};
  const LocalOptions sleep_at_once{.eager_limit_bytes = 0, .spin_microseconds = 0};
  for (const LocalOptions& opts : {LocalOptions{}, kRendezvous, synchronous, sleep_at_once}) {
    constexpr int kRanks = 5;
    run_local(
        kRanks,
        [&](Communicator& c) {
          const int next = (c.rank() + 1) % kRanks, prev = (c.rank() + kRanks - 1) % kRanks;
          Tensor out = Tensor::empty({257}, DType::kF32), in = out.clone();
          for (int round = 0; round < 50; ++round) {
            out.fill(static_cast<float>(100 * round + c.rank()));
            c.sendrecv(out, next, in, prev);
            const std::vector<float> v = in.to_floats();
            ASSERT_EQ(v.front(), static_cast<float>(100 * round + prev)) << "round " << round;
            ASSERT_EQ(v.back(), v.front());
          }
        },
        opts);
  }
}

// ---- sendrecv_reduce: the ring's reduce-scatter hop in one pass

// The local override adds straight out of the sender's buffer; Communicator's default
// (called non-virtually) receives into recv_t and then adds. Same bits, for narrow, wide and
// mixed dtypes (the ring's FP32 partials of a bf16 buffer), sum and max; the override leaves
// recv_t untouched and stages nothing in the network's memory.
TEST(LocalSendrecvReduce, AddsStraightFromTheSenderBufferWithTheDefaultsBits) {
  struct Case {
    DType wire, own, out;
  };
  const Case cases[] = {{DType::kF32, DType::kF32, DType::kF32},
                        {DType::kF64, DType::kF64, DType::kF64},
                        {DType::kF16, DType::kF16, DType::kF16},
                        {DType::kF32, DType::kBF16, DType::kF32},
                        {DType::kF32, DType::kBF16, DType::kBF16},
                        {DType::kE4M3, DType::kE4M3, DType::kE4M3}};
  constexpr int kRanks = 3;
  constexpr std::int64_t kN = 1031;
  LocalWorld world(kRanks, kRendezvous);
  world.run([&](Communicator& c) {
    const int next = (c.rank() + 1) % kRanks, prev = (c.rank() + kRanks - 1) % kRanks;
    for (const Case& k : cases) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        const Tensor send = rank_data(c.rank(), kN, k.wire);
        const Tensor own = rank_data(c.rank() + 10, kN, k.own);
        Tensor fused = Tensor::empty({kN}, k.out), staged = Tensor::empty({kN}, k.out);
        Tensor untouched = Tensor::zeros({kN}, k.wire), landed = Tensor::zeros({kN}, k.wire);
        c.sendrecv_reduce(send, next, untouched, prev, own, fused, op);
        c.Communicator::sendrecv_reduce(send, next, landed, prev, own, staged, op);
        const std::string what = std::string(dtype_name(k.wire)) + " + " +
                                 std::string(dtype_name(k.own)) + " -> " +
                                 std::string(dtype_name(k.out)) + " " +
                                 std::string(reduce_op_name(op));
        EXPECT_TRUE(same_bits(fused, staged)) << what;
        EXPECT_TRUE(same_bits(landed, rank_data(prev, kN, k.wire))) << what;
        EXPECT_TRUE(same_bits(untouched, Tensor::zeros({kN}, k.wire))) << what;
      }
    }
  });
  EXPECT_EQ(world.network_ledger().peak(MemCategory::kCommBuffers), 0u);
  const TrafficTotals t = world.comm(0).traffic().totals("sendrecv");
  EXPECT_EQ(t.calls, 2 * 6 * 2);  // recorded as the sendrecvs they are
}

TEST(LocalSendrecvReduce, OutMayBeOwnButNotTheBufferSent) {
  run_local(2, [](Communicator& c) {
    const int peer = 1 - c.rank();
    Tensor own = f32({1, 2, 3});
    Tensor arrived = Tensor::empty({3}, DType::kF32);
    c.sendrecv_reduce(f32({10, 20, 30}), peer, arrived, peer, own, own, ReduceOp::kSum);
    EXPECT_EQ(own.to_floats(), (std::vector<float>{11, 22, 33}));
    EXPECT_THROW(c.sendrecv_reduce(own, peer, arrived, peer, own, own, ReduceOp::kSum),
                 std::invalid_argument);
  });
}

TEST(LocalSendrecvReduce, MismatchIsReportedOnBothRanks) {
  const CommFailure f = run_expecting_comm_error(2, [](Communicator& c) {
    const Tensor send = Tensor::zeros({c.rank() == 0 ? 5 : 4}, DType::kF32);
    Tensor arrived = Tensor::zeros({4}, DType::kF32), own = arrived.clone(), out = own.clone();
    c.sendrecv_reduce(send, 1 - c.rank(), arrived, 1 - c.rank(), own, out, ReduceOp::kSum, 1);
  }, kRendezvous);
  expect_everyone_saw(f);
  EXPECT_EQ(f.thrown, "send/recv mismatch: rank 0 sent 5 x f32 to rank 1 (tag 1), but rank 1 "
                      "receives 4 x f32 from rank 0 (tag 1)");
}

}  // namespace
}  // namespace mixpar
