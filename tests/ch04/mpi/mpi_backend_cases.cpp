// The MPI backend keeps the Communicator's promises across processes: rank-order reductions
// bit-identical to the local backend's serial definition for every dtype, MPI's own reduction
// within rounding of it, buffered sends, size and call mismatches reported as CommError, the
// same traffic accounting, split groups, and a watchdog that fires on a stuck call.
#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ch04_ddp/ring_allreduce.h"
#include "comm/control.h"
#include "comm/mpi_backend.h"
#include "comm_local_test_util.h"

namespace mixpar {
namespace {

using namespace comm_testing;

constexpr std::int64_t kSizes[] = {0, 1, 13, 1031};

MpiOptions fast_options() {
  MpiOptions o;
  o.watchdog_seconds = 60;
  return o;
}

TEST(MpiBackend, RankAndSizeMatchTheJob) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MpiCommunicator c;
  EXPECT_EQ(c.size(), world);
  EXPECT_EQ(c.backend(), "mpi");
}

// comm/control.h's typed messages across processes: 64-bit values in all their bits (a
// difference in the top bit is seen), votes, and every process's text in rank order.
TEST(MpiBackend, TypedControlMessagesCarryEvery64BitsVotesAndTexts) {
  MpiCommunicator c(MPI_COMM_WORLD, fast_options());
  const int r = c.rank(), n = c.size();
  const std::uint64_t mine[] = {0xfedcba9876543210ull ^ static_cast<std::uint64_t>(r), ~0ull};
  const std::vector<std::uint64_t> all = gather_u64(c, mine);
  ASSERT_EQ(all.size(), static_cast<std::size_t>(2 * n));
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(all[2 * std::size_t(k)], 0xfedcba9876543210ull ^ static_cast<std::uint64_t>(k));
    EXPECT_EQ(all[2 * std::size_t(k) + 1], ~0ull);
  }
  EXPECT_TRUE(all_agree(c, 0x8000000000000001ull));
  EXPECT_FALSE(all_agree(c, 0x0000000000000001ull | (r == n - 1 ? 1ull << 63 : 0)));
  EXPECT_TRUE(all_true(c, true));
  EXPECT_FALSE(all_true(c, r != n - 1));
  const std::vector<std::string> texts = gather_text(c, "process " + std::to_string(r));
  ASSERT_EQ(texts.size(), static_cast<std::size_t>(n));
  for (int k = 0; k < n; ++k) EXPECT_EQ(texts[std::size_t(k)], "process " + std::to_string(k));
  EXPECT_EQ(lowest_rank_where(c, r == n - 1), n - 1);
  EXPECT_TRUE(any_true(c, r == n - 1));
  EXPECT_FALSE(any_true(c, false));
  EXPECT_TRUE(broadcast_flag(c, n - 1, r == n - 1));
}

// The control collectives across processes: a flag ORed as one MPI_CXX_BOOL, every byte value
// broadcast and gathered unchanged, charged as bytes (the local backend's accounting), and a
// disagreement on the byte count reported on every rank.
TEST(MpiBackend, ControlCollectivesMoveFlagsAndBytesAsBytes) {
  MpiCommunicator c(MPI_COMM_WORLD, fast_options());
  const int r = c.rank(), n = c.size();
  for (int yes = -1; yes < n; ++yes) EXPECT_EQ(c.all_reduce_or(r == yes), yes >= 0);
  const TrafficTotals want = all_reduce_traffic(1, std::size_t{1}, n, r);
  EXPECT_EQ(c.traffic().totals("all_reduce_or").bytes_sent, std::size_t(n + 1) * want.bytes_sent);
  std::vector<std::byte> every(256);
  for (int b = 0; b < 256; ++b) every[std::size_t(b)] = std::byte(r == 0 ? b : 7);
  c.broadcast_bytes(every, 0);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(every[std::size_t(b)], std::byte(b));
  EXPECT_EQ(c.traffic().totals("broadcast_bytes").bytes_received, r == 0 ? 0u : 256u);
  const std::byte mine[2] = {std::byte(r), std::byte{0xff}};
  std::vector<std::byte> all(2 * std::size_t(n));
  c.all_gather_bytes(mine, all);
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(all[2 * std::size_t(k)], std::byte(k));
    EXPECT_EQ(all[2 * std::size_t(k) + 1], std::byte{0xff});
  }
  EXPECT_EQ(c.traffic().totals("all_gather_bytes").bytes_sent, 2u * std::size_t(n - 1));
  if (n > 1) {
    std::vector<std::byte> odd(r == n - 1 ? 5 : 4);
    try {
      c.broadcast_bytes(odd, 0);
      ADD_FAILURE() << "a byte-count mismatch went unseen";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("broadcast_bytes(5 bytes, root 0)"), std::string::npos)
          << e.what();
    }
  }
}

TEST(MpiBackend, RankOrderAllReduceIsBitIdenticalToTheSerialDefinition) {
  MpiCommunicator c(MPI_COMM_WORLD, fast_options());
  for (DType dt : kAllDTypes) {
    for (std::int64_t n : kSizes) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        Tensor t = rank_data(c.rank(), n, dt);
        c.all_reduce(t, op);
        EXPECT_TRUE(same_bits(t, serial_reduce(c.size(), n, dt, op)))
            << dtype_name(dt) << " size " << n << " " << reduce_op_name(op);
      }
    }
  }
}

TEST(MpiBackend, MpisOwnAllReduceIsWithinRoundingOfTheRankOrderSum) {
  MpiOptions o = fast_options();
  o.reduction = MpiReduction::kMpi;
  MpiCommunicator c(MPI_COMM_WORLD, o);
  for (DType dt : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    Tensor t = rank_data(c.rank(), 1031, dt), m = t.clone();
    c.all_reduce(t);
    c.all_reduce(m, ReduceOp::kMax);
    const auto got = elements(t),
               want = elements(serial_reduce(c.size(), 1031, dt, ReduceOp::kSum));
    const double eps = dt == DType::kF64 ? 1e-15 : dt == DType::kF32 ? 1e-6 : 1e-2;
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_LE(std::abs(got[i] - want[i]), eps * std::abs(want[i]) + 1e-30)
          << dtype_name(dt) << " element " << i;
    }
    EXPECT_TRUE(same_bits(m, serial_reduce(c.size(), 1031, dt, ReduceOp::kMax))) << "max is exact";
  }
}

TEST(MpiBackend, MaxPropagatesNaNInBothModes) {
  for (MpiReduction mode : {MpiReduction::kRankOrder, MpiReduction::kMpi}) {
    MpiOptions o = fast_options();
    o.reduction = mode;
    MpiCommunicator c(MPI_COMM_WORLD, o);
    const float v = c.rank() == c.size() - 1 ? NAN : float(c.rank());
    Tensor t = Tensor::from_floats({&v, 1}, {1});
    c.all_reduce(t, ReduceOp::kMax);
    EXPECT_TRUE(std::isnan(t.item()));
  }
}

TEST(MpiBackend, ReduceScatterAllGatherAndBroadcastMatchTheirDefinitions) {
  MpiCommunicator c(MPI_COMM_WORLD, fast_options());
  const int n = c.size();
  const Tensor in = rank_data(c.rank(), n * 7, DType::kBF16);
  Tensor out = Tensor::empty({7}, DType::kBF16);
  c.reduce_scatter(in, out);
  const Tensor full = serial_reduce(n, n * 7, DType::kBF16, ReduceOp::kSum);
  EXPECT_TRUE(same_bits(out, full.flat_slice(c.rank() * 7, 7)));
  Tensor all = Tensor::empty({n * 7}, DType::kBF16);
  c.all_gather(out, all);
  EXPECT_TRUE(same_bits(all, full));
  Tensor b = rank_data(c.rank(), 5, DType::kF32);
  c.broadcast(b, n - 1);
  EXPECT_TRUE(same_bits(b, rank_data(n - 1, 5, DType::kF32)));
  c.barrier();
}

// all_to_all with variable counts (MPI_Alltoallv): rank p sends rank q (p + 2q) % 3
// elements, zero for some pairs; each block arrives in rank order, charged as the local
// backend charges it.
TEST(MpiBackend, AllToAllWithVariableCountsMatchesItsDefinition) {
  MpiCommunicator c(MPI_COMM_WORLD, fast_options());
  const int r = c.rank(), n = c.size();
  const auto count = [](int p, int q) { return std::int64_t((p + 2 * q) % 3); };
  std::vector<std::int64_t> sc, rc;
  std::vector<float> in, want;
  std::size_t sent = 0;
  for (int q = 0; q < n; ++q) {
    sc.push_back(count(r, q));
    rc.push_back(count(q, r));
    for (std::int64_t i = 0; i < count(r, q); ++i) in.push_back(float(100 * r + 10 * q + i));
    for (std::int64_t i = 0; i < count(q, r); ++i) want.push_back(float(100 * q + 10 * r + i));
    if (q != r) sent += std::size_t(count(r, q)) * 4;
  }
  const Tensor t_in = Tensor::from_floats(in, {std::int64_t(in.size())});
  Tensor out = Tensor::empty({std::int64_t(want.size())}, DType::kF32);
  c.all_to_all(t_in, sc, out, rc);
  EXPECT_EQ(out.to_floats(), want);
  EXPECT_EQ(c.traffic().totals("all_to_all").bytes_sent, sent);
}

TEST(MpiBackend, SendsAreBufferedSoPairsMayBothSendFirst) {
  MpiCommunicator c(MPI_COMM_WORLD, fast_options());
  const int peer = c.rank() ^ 1;
  if (peer >= c.size()) GTEST_SKIP() << "odd world";              // every size here is even
  const Tensor mine = rank_data(c.rank(), 1 << 16, DType::kF32);  // larger than eager limits
  c.send(mine, peer, 7);
  Tensor theirs = Tensor::empty({1 << 16}, DType::kF32);
  c.recv(theirs, peer, 7);
  EXPECT_TRUE(same_bits(theirs, rank_data(peer, 1 << 16, DType::kF32)));
}

TEST(MpiBackend, ARecvOfTheWrongSizeIsACommError) {
  MpiCommunicator c(MPI_COMM_WORLD, fast_options());
  const int peer = c.rank() ^ 1;
  const bool sender = c.rank() % 2 == 0;
  for (std::int64_t want : {std::int64_t{2}, std::int64_t{8}}) {  // smaller, larger than sent
    if (sender) {
      c.send(Tensor::zeros({4}, DType::kF32), peer, 3);
    } else {
      Tensor t = Tensor::empty({want}, DType::kF32);
      try {
        c.recv(t, peer, 3);
        ADD_FAILURE() << "a " << want << "-element recv of a 4-element message passed";
      } catch (const CommError& e) {
        EXPECT_CONTAINS(e.what(), "recv(from " + std::to_string(peer));
      }
    }
  }
  c.barrier();
}

TEST(MpiBackend, MismatchedCollectivesAreACommErrorNamingBothCallsOnEveryRank) {
  MpiCommunicator c(MPI_COMM_WORLD, fast_options());
  Tensor t = Tensor::zeros({c.rank() == 0 ? 4 : 8}, DType::kF32);
  try {
    c.all_reduce(t);
    ADD_FAILURE() << "mismatched all_reduce passed";
  } catch (const CommError& e) {
    EXPECT_CONTAINS(e.what(), "rank 0 called all_reduce(4 x f32, sum)");
    EXPECT_CONTAINS(e.what(), "rank 1 called all_reduce(8 x f32, sum)");
  }
  Tensor ok = Tensor::zeros({3}, DType::kF32);
  c.all_reduce(ok);  // the check ran before the collective: the ranks are still in step
}

TEST(MpiBackend, TrafficFollowsTheLocalBackendsConventions) {
  MpiCommunicator c(MPI_COMM_WORLD, fast_options());
  const int n = c.size();
  Tensor t = Tensor::zeros({1031}, DType::kF16);
  c.all_reduce(t);
  const TrafficTotals want = all_reduce_traffic(1031, DType::kF16, n, c.rank());
  EXPECT_EQ(c.traffic().totals("all_reduce").bytes_sent, want.bytes_sent);
  EXPECT_EQ(c.traffic().totals("all_reduce").bytes_received, want.bytes_received);
  Tensor out = Tensor::empty({3}, DType::kF32), in = Tensor::zeros({3 * n}, DType::kF32);
  c.reduce_scatter(in, out);
  EXPECT_EQ(c.traffic().totals("reduce_scatter").bytes_sent, std::size_t(n - 1) * 12);
  c.all_gather(out, in);
  EXPECT_EQ(c.traffic().totals("all_gather").bytes_received, std::size_t(n - 1) * 12);
}

TEST(MpiBackend, SplitOrdersGroupsByKey) {
  MpiCommunicator c(MPI_COMM_WORLD, fast_options());
  auto g = c.split(c.rank() % 2, -c.rank());
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->size(), c.size() / 2);
  EXPECT_EQ(g->rank(), g->size() - 1 - c.rank() / 2) << "keys descend with the world rank";
  EXPECT_EQ(c.split(c.rank() == 0 ? -1 : 0, 0) == nullptr, c.rank() == 0);
}

// A dup is the same ranks in the same order, and under MPI_THREAD_MULTIPLE a second thread of
// each process reduces on it while the first reduces on the parent: both sums are the serial
// definition's bits. Below MULTIPLE every process gets nullptr.
TEST(MpiBackend, ADupRunsBesideItsParentOnASecondThreadUnderThreadMultiple) {
  MpiCommunicator c(MPI_COMM_WORLD, fast_options());
  int level = 0;
  MPI_Query_thread(&level);
  std::unique_ptr<Communicator> d = c.dup();
  if (level != MPI_THREAD_MULTIPLE) {
    EXPECT_EQ(d, nullptr);
    GTEST_SKIP() << "the MPI library gives thread level " << level << ", not MULTIPLE";
  }
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->rank(), c.rank());
  EXPECT_EQ(d->size(), c.size());
  const auto reduce = [](Communicator& comm, int salt) {
    for (int i = 0; i < 50; ++i) {
      const std::int64_t n = 1 + (i * 37 + salt) % 3000;
      Tensor t = rank_data(comm.rank(), n, DType::kF32);
      comm.all_reduce(t);
      EXPECT_TRUE(same_bits(t, serial_reduce(comm.size(), n, DType::kF32, ReduceOp::kSum))) << n;
    }
  };
  std::thread second([&] { reduce(*d, 11); });
  reduce(c, 0);
  second.join();
}

TEST(MpiBackend, TheHandBuiltRingRunsOnMpiWithTheSameBitsAndBytes) {
  MpiCommunicator c(MPI_COMM_WORLD, fast_options());
  Tensor ring = Tensor::from_floats(std::vector<float>(840, float(c.rank() + 1)), {840});
  Tensor backend = ring.clone();
  ch04::RingOptions hops;  // the hops themselves: 3360 bytes would take the gather path
  hops.oneshot_max_bytes = hops.exchange_max_bytes = 0;
  ch04::ring_all_reduce(c, ring, ReduceOp::kSum, hops);
  c.all_reduce(backend);
  EXPECT_TRUE(same_bits(ring, backend));
  const std::size_t want = 2 * std::size_t(c.size() - 1) * 840 * 4 / std::size_t(c.size());
  EXPECT_EQ(c.traffic().totals("sendrecv").bytes_sent, want);
}

// The ring's exchange path (one all_to_all of uneven chunks, one padded all_gather) on MPI's
// collectives (on 3 or more processes; on 2 the reductions keep the hops): the hops' bits,
// f32 and bf16, an odd size.
TEST(MpiBackend, TheRingsExchangePathRunsOnMpiWithTheHopsBits) {
  MpiCommunicator c(MPI_COMM_WORLD, fast_options());
  for (DType dt : {DType::kF32, DType::kBF16}) {
    std::vector<float> v(1031);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * float((i * 7 + c.rank() * 3) % 23);
    Tensor ex = Tensor::from_floats(v, {1031}, dt), hop = ex.clone();
    ch04::RingOptions exchange, hops;
    exchange.oneshot_max_bytes = 0;
    hops.oneshot_max_bytes = hops.exchange_max_bytes = 0;
    ch04::ring_all_reduce(c, ex, ReduceOp::kSum, exchange);
    ch04::ring_all_reduce(c, hop, ReduceOp::kSum, hops);
    EXPECT_TRUE(same_bits(ex, hop)) << dtype_name(dt);
  }
}

// A watchdog report names the stopped process by its world rank, its place in the grid (the
// identity the trainer sets) and, in a split group, the group's members by world rank: the
// index inside a group ("rank 0 of 2") alone named no process.
TEST(MpiBackend, WatchdogReportsNameWorldRanksGridPlaceAndGroup) {
  MpiCommunicator c(MPI_COMM_WORLD, fast_options());
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  EXPECT_EQ(c.watch_label("barrier()"), "world rank " + std::to_string(world_rank) + ", in barrier()");
  c.set_identity("dp " + std::to_string(world_rank) + ", tp 0, pp 0");
  EXPECT_EQ(c.watch_label("barrier()"), "world rank " + std::to_string(world_rank) + " (dp " +
                                            std::to_string(world_rank) + ", tp 0, pp 0), in barrier()");
  // Groups of even and odd world ranks, in descending order (key -rank): the members by world
  // rank in the group's own order.
  auto g = c.split(c.rank() % 2, -c.rank());
  ASSERT_NE(g, nullptr);
  std::string members;
  for (int r = c.size() - 1; r >= 0; --r) {
    if (r % 2 == c.rank() % 2) members += (members.empty() ? "" : ", ") + std::to_string(r);
  }
  const auto* mg = dynamic_cast<const MpiCommunicator*>(g.get());
  ASSERT_NE(mg, nullptr);
  const std::string label = mg->watch_label("all_gather(1 x f32)");
  if (g->size() < c.size()) {
    EXPECT_EQ(label, "world rank " + std::to_string(world_rank) + " (dp " + std::to_string(world_rank) +
                         ", tp 0, pp 0), rank " + std::to_string(g->rank()) + " of " +
                         std::to_string(g->size()) + " in the group of world ranks {" + members +
                         "}, in all_gather(1 x f32)");
  }
}

TEST(CallWatchdog, FiresOnceWithTheCallItWatches) {
  std::promise<std::string> fired;
  int calls = 0;
  {
    CallWatchdog w(0.2, [&](const std::string& m) {
      if (++calls == 1) fired.set_value(m);
    });
    const auto guard = w.watch("rank 1 of 2 in recv(from 0, tag 5, 4 x f32)");
    const std::string m = fired.get_future().get();  // blocks until the watchdog fires
    EXPECT_CONTAINS(m, "recv(from 0, tag 5");
    EXPECT_CONTAINS(m, "still blocked after 0.2 s");
  }
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace mixpar
