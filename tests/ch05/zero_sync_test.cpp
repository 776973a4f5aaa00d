// ZeroStage1 and ZeroStage2 alone on a registry smaller than the world: 3 elements on 8 ranks.
// The ranks whose shard is padding only join the reduce-scatter, the norm's chain and the
// all-gather, add zeros, and every rank ends with the mean gradient in its own shard, the norm
// of the whole mean gradient, and the whole parameter gathered.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "ch05_zero/zero_sync.h"
#include "comm/local_backend.h"

namespace mixpar::ch05 {
namespace {

void expect_empty_shards_join(int stage) {
  constexpr int kRanks = 8;
  std::vector<double> norms_sq(kRanks);
  std::vector<std::vector<float>> params(kRanks);
  std::vector<std::vector<float>> shards(kRanks);
  run_local(kRanks, [&](Communicator& comm) {
    ParamRegistry reg;
    reg.add("tiny", {3}, false, ParamInit::kZeros);
    reg.allocate(DType::kF32);
    const int r = comm.rank();
    std::unique_ptr<ZeroStage1> made;
    if (stage == 2) {
      made = std::make_unique<ZeroStage2>(comm, reg, ZeroConfig{});
    } else {
      made = std::make_unique<ZeroStage1>(comm, reg, ZeroConfig{});
    }
    ZeroStage1& z = *made;
    z.begin_step();  // stage 2: the full gradients back, zeroed
    // Rank r's gradient: (r+1) x (1, 2, 3); its parameter: r x 100 + i.
    float* g = reg.flat_grads().data_as<float>();
    float* p = reg.flat_params().data_as<float>();
    for (int i = 0; i < 3; ++i) {
      g[i] = static_cast<float>((r + 1) * (i + 1));
      p[i] = static_cast<float>(r * 100 + i);
    }
    z.last_backward_starts(1);
    z.finish();  // marks every entry: the one bucket is reduce-scattered
    EXPECT_EQ(reg.flat_grads().resident(), stage != 2);
    std::vector<Tensor> grads = z.shard_grads();
    for (const Tensor& t : grads) {
      for (float v : t.to_floats()) shards[std::size_t(r)].push_back(v);
    }
    norms_sq[std::size_t(r)] = z.counted_sum_of_squares(grads, {true});
    z.gather_params();
    params[std::size_t(r)] = reg.flat_params().to_floats();
  });
  // The mean of (r+1)(i+1) over r = 0..7 is 4.5 (i+1); rank i owns element i.
  double total = 0;
  for (int r = 0; r < kRanks; ++r) {
    if (r < 3) {
      EXPECT_EQ(shards[std::size_t(r)], std::vector<float>{4.5f * float(r + 1)}) << "rank " << r;
    } else {
      EXPECT_TRUE(shards[std::size_t(r)].empty()) << "rank " << r;
    }
    total += norms_sq[std::size_t(r)];
    // Element i comes from its owner, rank i: i x 100 + i.
    EXPECT_EQ(params[std::size_t(r)], (std::vector<float>{0.0f, 101.0f, 202.0f})) << "rank " << r;
  }
  EXPECT_EQ(norms_sq[2], 4.5 * 4.5 * (1 + 4 + 9));  // the last owner holds the total
  EXPECT_EQ(total, norms_sq[2]);                    // the others 0
}

TEST(ZeroStage1Sync, RanksWithAnEmptyShardJoinEveryCollectiveAndAddZeros) {
  expect_empty_shards_join(1);
}

TEST(ZeroStage2Sync, RanksWithAnEmptyShardJoinEveryCollectiveAndAddZeros) {
  expect_empty_shards_join(2);
}

}  // namespace
}  // namespace mixpar::ch05
