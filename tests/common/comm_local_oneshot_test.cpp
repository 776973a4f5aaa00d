// The local backend's one-shot path for small collectives (comm/local_oneshot.h) gives the
// bits of the rank-order reference and of the rendezvous path, on every rank, for every dtype
// and op; back-to-back calls reusing its two staging buffers never read a stale input nor
// deadlock; and a call that one rank makes one-shot and another through the rendezvous is a
// collective mismatch, not a hang.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/local_backend.h"
#include "comm/local_oneshot.h"
#include "comm_local_test_util.h"

namespace mixpar {
namespace {

using namespace comm_testing;

LocalOptions rendezvous_only() {
  LocalOptions o;
  o.oneshot_max_bytes = 0;
  return o;
}

const DType kDtypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kE4M3,
                         DType::kE5M2};

// Per rank: the all-reduce, the reduce-scatter and the all-gather of rank_data.
struct Results {
  std::vector<Tensor> all_reduce, reduce_scatter, all_gather;
};

Results collectives(int n, std::int64_t count, DType dt, ReduceOp op, const LocalOptions& opts) {
  Results r;
  r.all_reduce.resize(static_cast<std::size_t>(n));
  r.reduce_scatter.resize(static_cast<std::size_t>(n));
  r.all_gather.resize(static_cast<std::size_t>(n));
  run_local(
      n,
      [&](Communicator& c) {
        const auto me = static_cast<std::size_t>(c.rank());
        Tensor t = rank_data(c.rank(), count, dt);
        c.all_reduce(t, op);
        r.all_reduce[me] = t;
        const Tensor in = rank_data(c.rank(), count * n, dt);
        Tensor out = Tensor::zeros({count}, dt);
        c.reduce_scatter(in, out, op);
        r.reduce_scatter[me] = out;
        Tensor all = Tensor::zeros({count * n}, dt);
        c.all_gather(rank_data(c.rank(), count, dt), all);
        r.all_gather[me] = all;
      },
      opts);
  return r;
}

TEST(LocalOneShot, SameBitsAsTheRankOrderReferenceAndTheRendezvousPath) {
  for (int n : {2, 3, 4}) {
    for (DType dt : kDtypes) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        // Sizes under the default limit, so the default options take the one-shot path (the
        // all-reduce's in-place one for the larger ones: its weight is above 1).
        for (std::int64_t count : {std::int64_t{1}, std::int64_t{5}, std::int64_t{200}}) {
          const std::string what = "N=" + std::to_string(n) + " " +
                                   std::string(dtype_name(dt)) + " count " +
                                   std::to_string(count) + (op == ReduceOp::kSum ? " sum" : " max");
          // N x the reduce-scatter's input: what the one-shot limit counts.
          ASSERT_LE(std::size_t(count * n * n) * dtype_size(dt), local::kOneShotMaxBytes) << what;
          const Results fast = collectives(n, count, dt, op, {});
          const Results slow = collectives(n, count, dt, op, rendezvous_only());
          const Tensor want = serial_reduce(n, count, dt, op);
          const Tensor want_blocks = serial_reduce(n, count * n, dt, op);
          for (std::size_t r = 0; r < std::size_t(n); ++r) {
            EXPECT_TRUE(same_bits(fast.all_reduce[r], want)) << what << " rank " << r;
            EXPECT_TRUE(same_bits(fast.all_reduce[r], slow.all_reduce[r])) << what;
            EXPECT_TRUE(same_bits(fast.reduce_scatter[r],
                                  want_blocks.flat_slice(std::int64_t(r) * count, count)))
                << what << " rank " << r;
            EXPECT_TRUE(same_bits(fast.reduce_scatter[r], slow.reduce_scatter[r])) << what;
            EXPECT_TRUE(same_bits(fast.all_gather[r], slow.all_gather[r])) << what;
            for (int p = 0; p < n; ++p) {
              EXPECT_TRUE(same_bits(fast.all_gather[r].flat_slice(p * count, count),
                                    rank_data(p, count, dt)))
                  << what << " block " << p;
            }
          }
        }
      }
    }
  }
}

// Past its limit an all-reduce reduces in place: each rank its ring chunk out of every
// rank's buffer, written into every rank's buffer. The bits are the rank-order reference's
// and the rendezvous's, and no rank returns while a peer may still write into its buffer:
// each overwrites its buffer the moment the call returns, and after a barrier it must still
// hold what it wrote (a peer's late write of its chunk would show).
TEST(LocalOneShot, AnAllReducePastItsLimitIsInPlaceWithTheSameBitsAndNoLateWrite) {
  for (int n : {2, 3, 4}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const std::int64_t count = 4099;  // past the limit on 2-4 ranks; uneven chunks
      ASSERT_FALSE(local::stages(local::CollOp::kAllReduce, std::size_t(count) * dtype_size(dt),
                                 n, local::kOneShotMaxBytes));
      const std::string what = "N=" + std::to_string(n) + " " + std::string(dtype_name(dt));
      const Tensor want = serial_reduce(n, count, dt, ReduceOp::kSum);
      const Results slow = collectives(n, count, dt, ReduceOp::kSum, rendezvous_only());
      const std::uint64_t before = local::in_place_calls();
      run_local(n, [&](Communicator& c) {
        for (int k = 0; k < 20; ++k) {
          Tensor t = rank_data(c.rank(), count, dt);
          c.all_reduce(t);
          ASSERT_TRUE(same_bits(t, want)) << what << " rank " << c.rank() << " call " << k;
          ASSERT_TRUE(same_bits(t, slow.all_reduce[std::size_t(c.rank())])) << what;
          t.fill(-7.0f);
          c.barrier();
          Tensor sentinel = Tensor::zeros({count}, dt);
          sentinel.fill(-7.0f);
          ASSERT_TRUE(same_bits(t, sentinel))
              << what << ": a peer wrote into rank " << c.rank() << "'s buffer after it returned";
        }
      });
      EXPECT_EQ(local::in_place_calls() - before, std::uint64_t(20 * n)) << what;
    }
  }
}

// Past its limit a reduce-scatter reduces in place: each rank its block out of every rank's
// input. The bits are the rank-order reference's and the rendezvous's, and no rank returns
// while a peer may still read its input: each overwrites its input the moment the call
// returns, which a peer's late read would show in that peer's block.
TEST(LocalOneShot, AReduceScatterPastItsLimitIsInPlaceWithTheSameBitsAndNoLateRead) {
  for (int n : {2, 3, 4}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const std::int64_t count = 4099;  // a block: the input is past the limit on 2-4 ranks
      ASSERT_FALSE(local::stages(local::CollOp::kReduceScatter,
                                 std::size_t(count * n) * dtype_size(dt), n,
                                 local::kOneShotMaxBytes));
      const std::string what = "N=" + std::to_string(n) + " " + std::string(dtype_name(dt));
      const Tensor want = serial_reduce(n, count * n, dt, ReduceOp::kSum);
      const Results slow = collectives(n, count, dt, ReduceOp::kSum, rendezvous_only());
      const std::uint64_t before = local::in_place_calls();
      run_local(n, [&](Communicator& c) {
        const Tensor mine = want.flat_slice(std::int64_t(c.rank()) * count, count).clone();
        for (int k = 0; k < 20; ++k) {
          Tensor in = rank_data(c.rank(), count * n, dt);
          Tensor out = Tensor::zeros({count}, dt);
          c.reduce_scatter(in, out);
          in.fill(-7.0f);  // a peer still reading it would sum this
          ASSERT_TRUE(same_bits(out, mine)) << what << " rank " << c.rank() << " call " << k;
          ASSERT_TRUE(same_bits(out, slow.reduce_scatter[std::size_t(c.rank())])) << what;
        }
      });
      EXPECT_EQ(local::in_place_calls() - before, std::uint64_t(20 * n)) << what;
    }
  }
}

// Both sides of the limit (3 ranks x the buffer), one element apart: the path changes, the
// bits do not.
TEST(LocalOneShot, TheLimitChangesThePathNotTheBits) {
  const std::int64_t at = std::int64_t(local::kOneShotMaxBytes / (4 * 3));
  for (std::int64_t count : {at, at + 1}) {
    const Results fast = collectives(3, count, DType::kF32, ReduceOp::kSum, {});
    const Tensor want = serial_reduce(3, count, DType::kF32, ReduceOp::kSum);
    for (const Tensor& t : fast.all_reduce) EXPECT_TRUE(same_bits(t, want)) << count;
  }
}

// On 2 ranks an all-gather counts its input twice against the limit (local::oneshot_weight:
// its one-shot path copies every byte twice, the rendezvous once); every other call, and an
// all-gather on more ranks, once. Either side of the 2-rank all-gather's limit, one element
// apart, the bits are the rendezvous path's, and the call stages its input up to the limit
// and publishes it in place past it (local::oneshot_calls, local::in_place_calls); 3 ranks,
// whose weight is 1, stage at twice the 2-rank limit's block.
TEST(LocalOneShot, TwoRankAllGatherCountsItsInputTwiceAgainstTheLimit) {
  EXPECT_EQ(local::oneshot_weight(local::CollOp::kAllGather, 2), 2u);
  EXPECT_EQ(local::oneshot_weight(local::CollOp::kAllGather, 3), 1u);
  EXPECT_EQ(local::oneshot_weight(local::CollOp::kAllGather, 4), 1u);
  EXPECT_EQ(local::oneshot_weight(local::CollOp::kAllReduce, 2), 16u);
  EXPECT_EQ(local::oneshot_weight(local::CollOp::kAllReduce, 4), 2u);
  EXPECT_EQ(local::oneshot_weight(local::CollOp::kAllToAll, 2), 1u);
  const std::int64_t at = std::int64_t(local::kOneShotMaxBytes / (4 * 2 * 2));
  for (std::int64_t count : {at, at + 1}) {
    const Results fast = collectives(2, count, DType::kF32, ReduceOp::kSum, {});
    const Results slow = collectives(2, count, DType::kF32, ReduceOp::kSum, rendezvous_only());
    for (std::size_t r = 0; r < 2; ++r) {
      EXPECT_TRUE(same_bits(fast.all_gather[r], slow.all_gather[r])) << count;
    }
  }
  // The staged and the in-place calls of one all-gather per rank, of `count` elements a rank
  // on n ranks.
  struct Calls {
    std::uint64_t staged, in_place;
  };
  const auto all_gathers = [](int n, std::int64_t count) {
    const std::uint64_t oneshot = local::oneshot_calls(local::CollOp::kAllGather);
    const std::uint64_t in_place = local::in_place_calls();
    run_local(n, [&](Communicator& c) {
      Tensor in = Tensor::zeros({count}, DType::kF32);
      Tensor out = Tensor::zeros({count * n}, DType::kF32);
      c.all_gather(in, out);
    });
    const std::uint64_t read_in_place = local::in_place_calls() - in_place;
    return Calls{local::oneshot_calls(local::CollOp::kAllGather) - oneshot - read_in_place,
                 read_in_place};
  };
  EXPECT_EQ(all_gathers(2, at).staged, 2u);
  EXPECT_EQ(all_gathers(2, at).in_place, 0u);
  EXPECT_EQ(all_gathers(2, at + 1).staged, 0u);
  EXPECT_EQ(all_gathers(2, at + 1).in_place, 2u);
  const std::int64_t at3 = std::int64_t(local::kOneShotMaxBytes / (4 * 3));
  EXPECT_GT(at3, at + 1);
  EXPECT_EQ(all_gathers(3, at3).staged, 3u);
  EXPECT_EQ(all_gathers(3, at3 + 1).staged, 0u);
  EXPECT_EQ(all_gathers(3, at3 + 1).in_place, 3u);
}

// Many calls in a row alternate the two staging buffers; each call's inputs change, so a rank
// that read a stale buffer (its peer's input of two calls ago) gets a wrong sum. Barriers,
// votes and broadcasts take the one-shot path too, and rendezvous calls are interleaved,
// sharing the call numbers. 4 ranks: more than this machine's cores, the yielding polls.
TEST(LocalOneShot, BackToBackCallsNeverReadAStaleInputNorDeadlock) {
  const int n = 4;
  const int calls = 300;
  run_local(n, [&](Communicator& c) {
    Tensor t = Tensor::zeros({3}, DType::kF32);
    Tensor big = Tensor::zeros({std::int64_t(local::kOneShotMaxBytes / 4) + 1}, DType::kF32);
    for (int k = 0; k < calls; ++k) {
      float* p = t.data_as<float>();
      for (int i = 0; i < 3; ++i) p[i] = float(k * 100 + c.rank() * 10 + i);
      c.all_reduce(t);
      for (int i = 0; i < 3; ++i) {
        // sum over ranks of k*100 + r*10 + i: exact in f32 for these k
        ASSERT_EQ(p[i], float(n * (k * 100 + i) + 10 * (n * (n - 1) / 2))) << "call " << k;
      }
      const bool vote = c.all_reduce_or(c.rank() == k % n && k % 3 == 0);
      ASSERT_EQ(vote, k % 3 == 0) << "call " << k;
      Tensor b = Tensor::zeros({2}, DType::kF32);
      b.data_as<float>()[1] = float(c.rank() == k % n ? k : -1);
      c.broadcast(b, k % n);
      ASSERT_EQ(b.data_as<float>()[1], float(k)) << "call " << k;
      if (k % 50 == 0) c.all_reduce(big);  // a rendezvous call between one-shot ones
      c.barrier();
    }
  });
}

TEST(LocalOneShot, OneShotAgainstARendezvousCallIsAMismatchNamingBoth) {
  const std::int64_t big = std::int64_t(local::kOneShotMaxBytes / 4) + 1;
  const CommFailure f = run_expecting_comm_error(2, [&](Communicator& c) {
    c.barrier();
    Tensor t = Tensor::zeros({c.rank() == 0 ? 4 : big}, DType::kF32);
    c.all_reduce(t);
  });
  ASSERT_FALSE(f.thrown.empty());
  for (const std::string& seen : f.per_rank) EXPECT_EQ(seen, f.thrown);
  EXPECT_CONTAINS(f.thrown, "collective mismatch at call #2 of world");
  EXPECT_CONTAINS(f.thrown, "rank 0 all_reduce(4 x f32, sum)");
  EXPECT_CONTAINS(f.thrown, "rank 1 all_reduce(" + std::to_string(big) + " x f32, sum)");
}

TEST(LocalOneShot, WaitingForARankThatNeverCallsIsADeadlockNamingIt) {
  const CommFailure f = run_expecting_comm_error(3, [](Communicator& c) {
    Tensor t = Tensor::zeros({2}, DType::kF32);
    if (c.rank() != 2) c.all_reduce(t);
  });
  ASSERT_FALSE(f.thrown.empty());
  EXPECT_CONTAINS(f.thrown, "deadlock");
  EXPECT_CONTAINS(f.thrown, "rank 0 waits in all_reduce(2 x f32, sum) (call #1 of world) for rank 2");
}

}  // namespace
}  // namespace mixpar
