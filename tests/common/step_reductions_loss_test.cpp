// StepReductions::loss on a pipeline with replicas: one world all-reduce gives the bits of the
// two hops it replaces (the mean over dp x cp, then the sum along pp), and is the only call.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "comm/local_backend.h"
#include "comm/parallel_grid.h"
#include "parallel/step_reductions.h"
#include "random/philox.h"

namespace mixpar {
namespace {

double sum_over(Communicator& c, double v) {
  Tensor t = Tensor::empty({1}, DType::kF64, MemCategory::kCommBuffers);
  t.data_as<double>()[0] = v;
  c.all_reduce(t, ReduceOp::kSum);
  return t.data_as<double>()[0];
}

std::uint64_t bits(double v) {
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

struct Got {
  double one_call = 0, two_hops = 0;
  std::int64_t world_calls = 0, dp_calls = 0, pp_calls = 0;
};

TEST(StepReductionsLoss, OneWorldCallGivesTheBitsOfTheDpThenPpHops) {
  for (const GridShape shape : {GridShape{2, 1, 2}, GridShape{3, 2, 2}, GridShape{2, 1, 2, 2}}) {
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      std::vector<Got> got(static_cast<std::size_t>(shape.world()));
      run_local(shape.world(), [&](Communicator& world) {
        const ParallelGrid g(world, shape);
        // Every rank of one replica holds its replica's loss (the tp ranks the same one).
        const int replica = g.coord().dp * shape.cp + g.coord().cp;
        Philox rng(seed);
        double local = 0;
        for (int k = 0; k <= replica; ++k) local = 1.0 + rng.next_u32() * 0x1p-29;
        StepReductions r(&g);
        const TrafficTotals w0 = g.world().traffic().total();
        const TrafficTotals d0 = g.dp_cp().traffic().total();
        const TrafficTotals p0 = g.pp().traffic().total();
        Got out;
        out.one_call = r.loss(local);
        out.world_calls = g.world().traffic().total().calls - w0.calls;
        out.dp_calls = g.dp_cp().traffic().total().calls - d0.calls;
        out.pp_calls = g.pp().traffic().total().calls - p0.calls;
        // The two hops, as the reduction made them before.
        const double mine = g.is_last_stage() ? local : 0.0;
        out.two_hops = sum_over(g.pp(), sum_over(g.dp_cp(), mine) / g.dp_cp().size());
        got[std::size_t(world.rank())] = out;
      });
      for (std::size_t r = 0; r < got.size(); ++r) {
        EXPECT_EQ(bits(got[r].one_call), bits(got[r].two_hops)) << "rank " << r;
        EXPECT_EQ(bits(got[r].one_call), bits(got[0].one_call)) << "rank " << r;
        EXPECT_EQ(got[r].world_calls, 1) << "rank " << r;
        EXPECT_EQ(got[r].dp_calls, 0) << "rank " << r;
        EXPECT_EQ(got[r].pp_calls, 0) << "rank " << r;
      }
    }
  }
}

}  // namespace
}  // namespace mixpar
