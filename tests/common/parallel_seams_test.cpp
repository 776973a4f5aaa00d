// The seams of common/parallel: the count-once rule of the gradient norm (an audit over every
// grid of up to 8 ranks), tensor-parallel holdings that slice the full initialisation, and the
// per-step reductions over a grid's groups.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "comm/local_backend.h"
#include "comm/parallel_grid.h"
#include "model/gpt_params.h"
#include "parallel/count_once.h"
#include "parallel/replicas.h"
#include "parallel/step_reductions.h"
#include "util/errors.h"

namespace mixpar {
namespace {

// 4 blocks, 4 heads, 16 wide, 8 positions, 32 tokens: divisible by tp 1, 2, 4.
GptConfig grid_model() { return {4, 4, 16, 8, 32}; }

std::vector<GridShape> grids_up_to(int max_world) {
  std::vector<GridShape> out;
  for (int dp = 1; dp <= max_world; ++dp)
    for (int tp = 1; dp * tp <= max_world && tp <= 4; tp *= 2)
      for (int pp = 1; dp * tp * pp <= max_world && pp <= 4; ++pp) out.push_back({dp, tp, pp});
  return out;
}

// The audit: for every grid, every rank builds the registry of its (stage, tp shard), and the
// elements each counts in the norm are collected per parameter: each element of each full
// parameter must be counted exactly once, over the whole world.
TEST(CountOnce, EveryParameterElementEntersTheNormExactlyOnceOnEveryGrid) {
  const GptConfig c = grid_model();
  const ParamRegistry whole = make_gpt2_registry(c);
  for (const GridShape& g : grids_up_to(8)) {
    std::map<std::string, std::vector<int>> counts;
    for (const ParamEntry& e : whole.entries()) counts[e.name].assign(shape_numel(e.shape), 0);
    for (int r = 0; r < g.world(); ++r) {
      const GridCoord at = grid_coord(g, r);
      const ParamRegistry mine =
          make_gpt2_registry(c, gpt_stage(c, at.pp, g.pp), TensorShard{at.tp, g.tp});
      for (const ParamEntry& e : mine.entries()) {
        for (const ElementRange& run : norm_elements(e, at)) {
          for (std::int64_t i = run.begin; i < run.begin + run.count; ++i) ++counts[e.name][i];
        }
      }
    }
    for (const auto& [name, per_element] : counts) {
      for (std::size_t i = 0; i < per_element.size(); ++i) {
        ASSERT_EQ(per_element[i], 1) << name << " element " << i << " on dp " << g.dp << " x tp "
                                     << g.tp << " x pp " << g.pp;
      }
    }
  }
}

// The bug the rule prevents: every holder counting what it holds counts a replicated
// LayerNorm tp x dp times and the tied wte twice.
TEST(CountOnce, CountingEveryHeldCopyOvercountsReplicasAndTheTiedHead) {
  const GptConfig c = grid_model();
  const GridShape g{2, 2, 2};
  std::map<std::string, int> copies;
  for (int r = 0; r < g.world(); ++r) {
    const GridCoord at = grid_coord(g, r);
    const ParamRegistry mine =
        make_gpt2_registry(c, gpt_stage(c, at.pp, g.pp), TensorShard{at.tp, g.tp});
    for (const ParamEntry& e : mine.entries()) {
      if (held_elements(e.shape, e.holding).front().begin == 0) ++copies[e.name];
    }
  }
  EXPECT_EQ(copies["h.0.ln_1.weight"], 4);  // dp 2 x tp 2 ranks hold it whole
  EXPECT_EQ(copies["wte.weight"], 4);       // vocab shard 0 on 2 stages x 2 replicas
}

TEST(TensorShardHoldings, EveryShardHoldsItsSliceOfTheFullInitialisation) {
  const GptConfig c = grid_model();
  ParamRegistry whole = make_gpt2_registry(c);
  whole.allocate(DType::kF32);
  whole.initialize(11);
  for (int tp : {2, 4}) {
    for (int r = 0; r < tp; ++r) {
      ParamRegistry shard = make_gpt2_registry(c, {}, TensorShard{r, tp});
      shard.allocate(DType::kF32);
      shard.initialize(11);
      for (const ParamEntry& e : shard.entries()) {
        const float* full = whole.at(e.name).param.data_as<float>();
        const float* mine = e.param.data_as<float>();
        std::int64_t k = 0;
        for (const ElementRange& run : held_elements(e.shape, e.holding)) {
          for (std::int64_t i = 0; i < run.count; ++i, ++k) {
            ASSERT_EQ(mine[k], full[run.begin + i]) << e.name << " tp " << tp << " rank " << r;
          }
        }
        ASSERT_EQ(k, e.param.numel()) << e.name;
      }
    }
  }
}

TEST(TensorShardHoldings, QkvColumnsAreSplitByHeadsInEachOfQKV) {
  // c_attn [C, 3C] with C = 16, tp 2: rank 1 holds columns 8-15 of q, of k and of v.
  const ParamRegistry r = make_gpt2_registry(grid_model(), {}, TensorShard{1, 2});
  const ParamEntry& w = r.at("h.0.attn.c_attn.weight");
  EXPECT_EQ(held_shape(w.shape, w.holding), (Shape{16, 24}));
  const std::vector<ElementRange> runs = held_elements(w.shape, w.holding);
  ASSERT_GE(runs.size(), 3u);
  EXPECT_EQ(runs[0], (ElementRange{8, 8}));
  EXPECT_EQ(runs[1], (ElementRange{24, 8}));
  EXPECT_EQ(runs[2], (ElementRange{40, 8}));
  const ParamEntry& proj = r.at("h.0.attn.c_proj.bias");
  EXPECT_EQ(proj.holding.split, ParamSplit::kReplicated) << "a row-parallel bias is added once";
}

TEST(TensorShardHoldings, TpThatDoesNotDivideTheHeadsIsRefusedNamingTheNumbers) {
  try {
    make_gpt2_registry(grid_model(), {}, TensorShard{0, 3});
    FAIL() << "tp 3 with 4 heads accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tp 3 does not divide n_head = 4"), std::string::npos)
        << e.what();
  }
}

// Per-step reductions on a 2 x 1 x 2 grid of 4 local ranks: the loss is the last stage's mean
// over dp, on every rank; found-inf is any rank's; the norm sums every rank's counted squares.
TEST(StepReductions, EachReductionGoesOverItsGroupAndReachesEveryRank) {
  const GridShape g{2, 1, 2};
  run_local(4, [&](Communicator& world) {
    const ParallelGrid grid(world, g);
    StepReductions red(&grid);
    const int r = world.rank();
    // Last-stage ranks 2 and 3 (dp 0, 1) hold losses 2 and 4; the first stage's are ignored.
    const double loss = red.loss(grid.is_last_stage() ? 2.0 * (grid.coord().dp + 1) : 99.0);
    EXPECT_EQ(loss, 3.0) << "rank " << r;
    EXPECT_TRUE(red.found_inf(r == 3));
    EXPECT_FALSE(red.found_inf(false));
    // Squares 1, 4, 9, 16 counted on ranks 0..3: norm sqrt(30).
    EXPECT_EQ(red.grad_norm(double((r + 1) * (r + 1))), std::sqrt(30.0));
    StepTimes t;
    red.add_times_to(t);
    EXPECT_GT(t.comm_s, 0.0);
    EXPECT_EQ(t.comm_s, t.exposed_s) << "the compute thread waits for each";
  });
}

// A placement that runs the last stage on pp rank 0 (chapter 7's V) names it: the loss is then
// rank 0's, the other stage's ignored.
TEST(StepReductions, TheLossComesFromThePpRankNamedForTheLastStage) {
  const GridShape g{2, 1, 2};
  run_local(4, [&](Communicator& world) {
    const ParallelGrid grid(world, g);
    StepReductions red(&grid);
    red.loss_on_pp_rank(0);
    const double loss = red.loss(grid.coord().pp == 0 ? 2.0 * (grid.coord().dp + 1) : 99.0);
    EXPECT_EQ(loss, 3.0) << "rank " << world.rank();
  });
}

// One rank's overflow skips every rank's step: on a 2 x 2 x 2 grid, whichever rank alone has
// an inf, all eight vote "found", through one boolean collective over the world (a byte a
// rank), never a float all-reduce.
TEST(StepReductions, FoundInfVoteAgreesOnEveryRankWhicheverRankHasAnInf) {
  for (int inf_rank = -1; inf_rank < 8; ++inf_rank) {
    run_local(8, [&](Communicator& world) {
      const ParallelGrid grid(world, GridShape{2, 2, 2});
      StepReductions red(&grid);
      const std::int64_t reduces_before = world.traffic().totals("all_reduce").calls;
      EXPECT_EQ(red.found_inf(world.rank() == inf_rank), inf_rank >= 0)
          << "rank " << world.rank() << ", inf on rank " << inf_rank;
      EXPECT_EQ(world.traffic().totals("all_reduce_or").calls, 1);
      EXPECT_EQ(world.traffic().totals("all_reduce").calls, reduces_before);
    });
  }
}

TEST(StepReductions, WithoutAGridNothingIsSentAndTheNormIsTheLocalOne) {
  StepReductions red;
  EXPECT_EQ(red.loss(1.5), 1.5);
  EXPECT_TRUE(red.found_inf(true));
  EXPECT_EQ(red.grad_norm(2.25), 1.5);
}

TEST(Replicas, ACheckNamesTheRanksWhoseWeightsDiffer) {
  run_local(3, [](Communicator& comm) {
    Tensor w = Tensor::empty({4}, DType::kF32);
    w.fill(comm.rank() == 2 ? 2.0f : 1.0f);
    const ReplicaCheck check = check_replicas(comm, w);
    EXPECT_FALSE(check.ok);
    EXPECT_NE(check.message.find("rank 2 hold"), std::string::npos) << check.message;
    sync_initial_weights(comm, w, InitSync::kBroadcast);
    EXPECT_NO_THROW(verify_replicas(comm, w));
  });
}

// The replica hash compares values: two replicas that hold NaN at the same elements agree
// whatever sign and payload each NaN has (GCC and clang builds make different NaNs from the
// same arithmetic), and any other difference, one bit of one element, is seen.
TEST(ReplicaHash, NaNsOfAnySignAndPayloadHashAlikeEveryOtherBitCounts) {
  for (const DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> va{0.0f, 0.25f, nan, 0.75f, 1.0f}, vb{0.0f, 0.25f, -nan, 0.75f, 1.0f};
    Tensor a = Tensor::from_floats(va, {5}, dt), b = Tensor::from_floats(vb, {5}, dt);
    auto* bytes = static_cast<unsigned char*>(b.data());
    const std::size_t es = static_cast<std::size_t>(b.nbytes() / 5);
    bytes[2 * es] |= 1;  // a payload bit of b's NaN (the lowest fraction bit)
    EXPECT_EQ(weights_hash(a), weights_hash(b)) << dtype_name(dt);
    bytes[3 * es] ^= 1;  // the lowest bit of a finite element
    EXPECT_NE(weights_hash(a), weights_hash(b)) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace mixpar
