// DDP across processes: N MPI ranks with batch B train exactly like one rank with batch N*B
// (computed in this process on a one-rank local world), with the global loss identical on
// every rank; the replica check names the ranks that differ; found-inf is agreed by all.
#include <gtest/gtest.h>

#include "ch04_ddp/ddp_scenarios.h"
#include "comm/mpi_backend.h"
#include "comm_local_test_util.h"

namespace mixpar::ch04 {
namespace {

TEST(MpiDdp, NRanksEqualOneRankWithNTimesTheBatch) {
  MpiCommunicator c;
  LessonConfig cfg;
  cfg.ddp.reducer.bucket_cap_bytes = 32 << 10;  // several buckets
  const RankRun mine = train_rank(c, cfg);
  LessonConfig one = cfg;
  one.B = cfg.B * c.size();
  const RankRun single = run_local_ddp(1, one)[0];
  for (std::size_t i = 0; i < mine.steps.size(); ++i) {
    EXPECT_NEAR(mine.steps[i].loss, single.steps[i].loss, kLossTolerance) << "step " << i;
    EXPECT_TRUE(mine.steps[i].replicas_agree) << "step " << i;
  }
  EXPECT_LE(max_rel_diff(mine.final_weights, single.final_weights), kWeightsTolerance);
  // The logged loss of the last step, from every rank: one value.
  Tensor loss = Tensor::empty({1}, DType::kF64), all = Tensor::empty({c.size()}, DType::kF64);
  loss.data_as<double>()[0] = mine.steps.back().loss;
  c.all_gather(loss, all);
  for (int r = 1; r < c.size(); ++r) EXPECT_EQ(all.data_as<double>()[r], all.data_as<double>()[0]);
}

TEST(MpiDdp, DifferentSeedsFailTheReplicaCheckOnEveryRank) {
  MpiCommunicator c;
  LessonConfig cfg;
  cfg.ddp.init = InitSync::kSameSeed;
  cfg.seed_per_rank = true;
  try {
    train_rank(c, cfg);
    ADD_FAILURE() << "expected ReplicaMismatch";
  } catch (const ReplicaMismatch& e) {
    EXPECT_CONTAINS(e.what(), "hold weights different from rank 0's");
  }
}

TEST(MpiDdp, FoundInfOfOneRankIsEveryRanksDecision) {
  MpiCommunicator c;
  GptModel model(LessonConfig{}.model);
  DistributedDataParallel ddp(model, c);
  EXPECT_TRUE(ddp.agree_found_inf(c.rank() == c.size() - 1));
  EXPECT_FALSE(ddp.agree_found_inf(false));
}

}  // namespace
}  // namespace mixpar::ch04
