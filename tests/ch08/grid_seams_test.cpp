// The trainer on the rank grid: the seams chapters 5-7 plug into. A data-parallel run is a
// dp x 1 x 1 grid whose dp group carries the gradients; the JSONL names every rank's memory
// and the bytes it sent (checked to the byte against the ring formula); checkpoints are
// written by every rank with a manifest naming the layout, and another layout is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ch04_ddp/bucketed_allreduce.h"
#include "ch08_test_util.h"
#include "checkpoint.h"
#include "train_loop.h"
#include "trainer.h"
#include "util/json.h"

namespace mixpar::ch08 {
namespace {

using test::random_data;
using test::TempDir;
using test::tiny_config;

TrainerConfig grid_config(int dp) {
  TrainerConfig c = tiny_config();
  c.steps = 3;
  c.ranks = c.dp = dp;
  c.threads = 1;
  return c;
}

TEST(TrainerGrid, ADataParallelRunIsADpByOneByOneGridWhoseDpGroupSyncsTheGradients) {
  const TrainerConfig c = grid_config(2);
  const TrainingData data = random_data(4096);
  test::train_on_each_rank(c, data, [&](Trainer& t, int rank) {
    ASSERT_NE(t.grid(), nullptr);
    EXPECT_EQ(t.shape().dp, 2);
    EXPECT_EQ(t.shape().tp * t.shape().pp, 1);
    EXPECT_EQ(t.coord().dp, rank);
    EXPECT_NE(dynamic_cast<const ch04::BucketedAllReduce*>(&t.grad_sync()), nullptr);
    EXPECT_TRUE(t.grad_sync().averages());
    t.train_step();
    // The gradient buckets went over the dp group, not the world communicator.
    EXPECT_GT(t.grid()->dp().traffic().totals("all_reduce").bytes_sent, 0u);
  });
  // One device: no grid, nothing to synchronise.
  Trainer one(grid_config(1), data);
  EXPECT_EQ(one.grid(), nullptr);
  EXPECT_FALSE(one.grad_sync().averages());
}

// Each rank's bytes in a step: the ring all-reduce of every gradient bucket (dp group), then
// one f64 each for the loss average (dp group) and the gradient-norm sum (world).
TEST(TrainerGrid, RankMetricsGiveEveryRanksMemoryAndTheBytesItSentInTheStep) {
  const TrainerConfig c = grid_config(2);
  const TrainingData data = random_data(4096);
  test::train_on_each_rank(c, data, [&](Trainer& t, int) {
    const auto& sync = dynamic_cast<const ch04::BucketedAllReduce&>(t.grad_sync());
    auto expected = [&](int r) {
      std::uint64_t n = 2 * all_reduce_traffic(1, DType::kF64, 2, r).bytes_sent;
      for (const ch04::Bucket& b : sync.buckets()) {
        n += all_reduce_traffic(b.count, DType::kF32, 2, r).bytes_sent;
      }
      return n;
    };
    for (int step = 0; step < 2; ++step) {
      t.train_step();
      const std::vector<RankMetrics> m = t.gather_rank_metrics();
      ASSERT_EQ(m.size(), 2u);
      for (int r = 0; r < 2; ++r) {
        EXPECT_EQ(m[std::size_t(r)].comm_bytes_sent, expected(r)) << "rank " << r;
        EXPECT_EQ(m[std::size_t(r)].mem[std::size_t(MemCategory::kParameters)],
                  static_cast<std::size_t>(t.model().num_parameters()) * 4);
      }
    }
  });
}

TEST(TrainerGrid, TheJsonlRecordsMemoryAndTrafficByRank) {
  TempDir dir;
  TrainerConfig c = grid_config(2);
  c.data = "";  // run_training loads the built-in dataset
  c.model.n_positions = c.seq;
  c.log_jsonl = dir.file("log.jsonl");
  std::FILE* out = std::tmpfile();
  ASSERT_EQ(run_training(c, out), 0);
  std::fclose(out);
  std::ifstream in(c.log_jsonl);
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    const Json j = Json::parse(line, c.log_jsonl);
    const auto& mem = j.at("mem_bytes_by_rank").as_array();
    const auto& comm = j.at("comm_bytes_by_rank").as_array();
    ASSERT_EQ(mem.size(), 2u);
    ASSERT_EQ(comm.size(), 2u);
    EXPECT_EQ(mem[0].at("parameters"), j.at("mem_bytes").at("parameters"));
    EXPECT_GT(comm[1].as_int(), 0);
  }
  EXPECT_EQ(lines, 3);
}

std::vector<std::string> run_ranks(const TrainerConfig& c, const TrainingData& data,
                                   bool resume) {
  return test_support::on_each_rank(c.ranks, [&](Communicator* world, int) -> std::string {
    try {
      Trainer t(c, data, world);
      if (resume) t.resume();
      while (t.step() < c.steps) t.train_step();
      t.save_checkpoint();
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  });
}

TEST(TrainerGrid, ACheckpointNamesItsLayoutAndTheShardEveryPlaceWrote) {
  TempDir dir;
  TrainerConfig c = grid_config(2);
  c.checkpoint_dir = dir.str();
  const TrainingData data = random_data(4096);
  ASSERT_EQ(run_ranks(c, data, false), (std::vector<std::string>{"", ""}));
  const std::string ckpt = latest_checkpoint(dir.str());
  const Json st = Json::parse(test::read_bytes(ckpt + "/trainer_state.json"), "state");
  EXPECT_EQ(st.at("layout").at("dp").as_int(), 2);
  EXPECT_EQ(st.at("layout").at("tp").as_int(), 1);
  EXPECT_EQ(st.at("layout").at("pp").as_int(), 1);
  const auto& shards = st.at("shards").as_array();
  ASSERT_EQ(shards.size(), 1u);  // one (tp, pp) place, written by its dp rank 0
  for (const char* key : {"parameters", "moments"}) {
    EXPECT_TRUE(std::filesystem::exists(ckpt + "/" + shards[0].at(key).as_string())) << key;
  }
  // And it resumes on the same layout: 3 more steps from it.
  c.steps = 6;
  EXPECT_EQ(run_ranks(c, data, true), (std::vector<std::string>{"", ""}));
}

// Another layout resumes the checkpoint (reshard_test.cpp follows the trajectory) when it
// reads the same rows per micro-batch, dp x batch; other rows are refused naming both.
TEST(TrainerGrid, ResumingOnAnotherLayoutNeedsTheSameSamplesPerStep) {
  TempDir dir;
  TrainerConfig c = grid_config(2);
  c.checkpoint_dir = dir.str();
  const TrainingData data = random_data(4096);
  ASSERT_EQ(run_ranks(c, data, false), (std::vector<std::string>{"", ""}));
  TrainerConfig one = grid_config(1);
  one.checkpoint_dir = dir.str();
  one.steps = 6;
  const std::string error = run_ranks(one, data, true).front();
  EXPECT_NE(error.find("dp 2 x batch 2 x grad-accum 1 = 4 sequences per step, this run has dp 1 x "
                       "batch 2 x grad-accum 1 = 2"),
            std::string::npos)
      << error;
  one.batch = 2 * c.batch;
  EXPECT_EQ(run_ranks(one, data, true), (std::vector<std::string>{""}));
}

TEST(TrainerGrid, AGridThatDoesNotMultiplyToTheRanksIsRefused) {
  TrainerConfig c = grid_config(4);
  c.dp = 2;
  const std::string error = test::input_error_of([&] { validate(c); });
  EXPECT_NE(error.find("--dp 2 x --tp 1 x --pp 1 = 2 ranks, but the run has 4"), std::string::npos)
      << error;
}

}  // namespace
}  // namespace mixpar::ch08
