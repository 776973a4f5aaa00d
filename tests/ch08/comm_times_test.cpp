// The step's communication by group (comm_times.h): which groups a layout spends time in, that
// the figures are parts of the step's wall time, that every group that moved bytes was timed,
// and the pipeline receives' wait estimate. No assertion on how long anything took.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ch08_test_util.h"
#include "comm_times.h"
#include "trainer.h"

namespace mixpar::ch08 {
namespace {

using test::random_data;
using test::tiny_config;

TrainerConfig grid(int dp, int tp, int pp) {
  TrainerConfig c = tiny_config();
  c.steps = 3;
  c.grad_accum = 2;
  c.threads = 1;
  c.dp = dp;
  c.tp = tp;
  c.pp = pp;
  c.ranks = dp * tp * pp;
  c.pipeline_schedule = "1f1b";
  return c;
}

std::vector<std::vector<StepStats>> run(const TrainerConfig& c) {
  return test::train_on_each_rank(c, random_data(4000), [](Trainer& t, int) {
    std::vector<StepStats> steps;
    while (t.step() < t.config().steps) steps.push_back(t.train_step());
    return steps;
  });
}

const GroupTime* find(const StepStats& s, const std::string& name) {
  for (const GroupTime& g : s.group_times) {
    if (g.name == name) return &g;
  }
  return nullptr;
}
double busy(const StepStats& s, const std::string& name) {
  const GroupTime* g = find(s, name);
  return g ? g->busy_s : 0.0;
}
std::uint64_t bytes(const StepStats& s, const std::string& name) {
  for (const auto& [group, sent] : s.group_bytes.by_group) {
    if (group == name) return sent;
  }
  return 0;
}

// Every step of every rank: the comm totals are the groups' sums, each group's exposed time is
// at most its busy time, the exposed figures, compute and the pipeline's wait are parts of the
// step's wall time (disjoint intervals of the rank's compute thread), and each group that sent
// bytes was timed.
void expect_accounts_hold(const std::vector<std::vector<StepStats>>& ranks) {
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    for (const StepStats& s : ranks[r]) {
      const std::string at = "rank " + std::to_string(r) + " step " + std::to_string(s.step);
      double sum_busy = 0, sum_exposed = 0;
      for (const GroupTime& g : s.group_times) {
        EXPECT_GE(g.busy_s, 0.0) << at << " " << g.name;
        EXPECT_GE(g.exposed_s, 0.0) << at << " " << g.name;
        EXPECT_LE(g.waiting_s, g.busy_s) << at << " " << g.name;
        // The compute thread waits for a group's communication at most as long as it took.
        EXPECT_LE(g.exposed_s, g.busy_s) << at << " " << g.name;
        sum_busy += g.busy_s;
        sum_exposed += g.exposed_s;
      }
      EXPECT_DOUBLE_EQ(s.times.comm_s, sum_busy) << at;
      EXPECT_DOUBLE_EQ(s.times.exposed_s, sum_exposed) << at;
      // 10 us of slack: the bounds' two sides are read from the clock at different instants.
      EXPECT_LE(s.times.exposed_s + s.times.compute_s, s.seconds + 1e-5) << at;
      for (const auto& [name, sent] : s.group_bytes.by_group) {
        if (sent > 0) {
          EXPECT_GT(busy(s, name), 0.0) << at << ": " << name << " sent " << sent;
        }
      }
    }
  }
}

TEST(StepCommTimes, ATensorParallelRunSpendsNoTimeInPipelineOrDataParallelGroups) {
  const auto ranks = run(grid(1, 2, 1));
  expect_accounts_hold(ranks);
  for (const auto& steps : ranks) {
    for (const StepStats& s : steps) {
      EXPECT_GT(busy(s, "tp"), 0.0);
      EXPECT_GT(bytes(s, "tp"), 0u);
      EXPECT_EQ(busy(s, "pp"), 0.0);
      EXPECT_EQ(busy(s, "dp"), 0.0);
      EXPECT_EQ(busy(s, "cp"), 0.0);
      EXPECT_EQ(find(s, "tp")->exposed_s, busy(s, "tp"));  // all on the compute thread
    }
  }
}

TEST(StepCommTimes, APipelineRunTimesItsTransfersAndBoundsTheirWait) {
  const auto ranks = run(grid(1, 1, 2));
  expect_accounts_hold(ranks);
  for (const auto& steps : ranks) {
    for (const StepStats& s : steps) {
      ASSERT_NE(find(s, "pp"), nullptr);
      EXPECT_GT(busy(s, "pp"), 0.0);
      EXPECT_GE(find(s, "pp")->waiting_s, 0.0);
      EXPECT_EQ(busy(s, "tp"), 0.0);
      EXPECT_EQ(busy(s, "dp"), 0.0);
    }
  }
}

TEST(StepCommTimes, TheDemosGridTimesEveryGroupThatMovedBytes) {
  TrainerConfig c = grid(2, 2, 2);
  c.zero_stage = 1;
  c.dtype = DType::kBF16;
  const auto ranks = run(c);
  expect_accounts_hold(ranks);
  for (const auto& steps : ranks) {
    for (const StepStats& s : steps) {
      for (const char* name : {"tp", "pp", "dp"}) EXPECT_GT(busy(s, name), 0.0) << name;
    }
  }
}

TEST(StepCommTimes, DataParallelBucketsOverlapOnTheirOwnThread) {
  // DDP's buckets are reduced on a communication thread: dp's busy time includes calls the
  // compute thread did not make, and its exposed part is what the compute thread spent in
  // its own dp calls or waiting for that thread. Both are measured, neither can be negative.
  TrainerConfig c = grid(2, 1, 1);
  const auto ranks = run(c);
  expect_accounts_hold(ranks);
  for (const auto& steps : ranks) {
    for (const StepStats& s : steps) {
      ASSERT_NE(find(s, "dp"), nullptr);
      EXPECT_GT(busy(s, "dp"), 0.0);
      EXPECT_GT(bytes(s, "dp"), 0u);
    }
  }
}

TEST(StepCommTimes, ContextParallelSumsItsGradientsInOneCall) {
  // CpGradSync sums every gradient over cp in one all-reduce of the flat buffer (the registry's
  // entries are adjacent in it), where it made one per tensor.
  TrainerConfig c = grid(1, 1, 1);
  c.cp = c.ranks = 2;
  const auto ranks = run(c);
  expect_accounts_hold(ranks);
  for (const auto& steps : ranks) {
    for (const StepStats& s : steps) {
      const GroupTime* cp = find(s, "cp");
      ASSERT_NE(cp, nullptr);
      ASSERT_EQ(cp->ops.count("all_reduce"), 1u);
      EXPECT_EQ(cp->ops.at("all_reduce").calls, 1);
    }
  }
}

TEST(StepCommTimes, ExpertParallelAllToAllsCountAsEp) {
  TrainerConfig c = grid(2, 1, 1);
  c.moe.n_experts = 4;
  c.moe.top_k = 2;
  c.ep = 2;
  const auto ranks = run(c);
  expect_accounts_hold(ranks);  // ep's and edp's bytes included
  for (const auto& steps : ranks) {
    for (const StepStats& s : steps) {
      EXPECT_GT(bytes(s, "ep"), 0u);
      EXPECT_GT(busy(s, "ep"), 0.0);
    }
  }
}

TEST(StepCommTimes, ASplitOfAGroupCountsAsTheGroupAndDpCpAsDp) {
  EXPECT_EQ(group_of_clock_name("dp.split"), "dp");
  EXPECT_EQ(group_of_clock_name("dp_cp"), "dp");
  EXPECT_EQ(group_of_clock_name("dp.moe"), "dp");
  EXPECT_EQ(group_of_clock_name("tp"), "tp");
  EXPECT_EQ(group_of_clock_name("world.split.split"), "world");
}

TEST(StepCommTimes, AReceivesWaitIsItsTimeBeyondItsBytesAtTheSendsRate) {
  CommTimes pp;
  pp.by_group["pp"]["send"] = {4, 0.001, 0};  // 1 ms for 1000 bytes: 1 us a byte
  pp.by_group["pp"]["recv"] = {4, 0.005, 0};  // 5 ms for 2000 bytes: 2 ms of transfer
  std::map<std::string, TrafficTotals> b;
  b["send"] = {4, 1000, 0};
  b["recv"] = {4, 0, 2000};
  EXPECT_NEAR(pp_receive_wait(pp, b), 0.003, 1e-12);
  // Receives faster than the sends' rate wait for nothing; without a send nothing is claimed.
  pp.by_group["pp"]["recv"] = {4, 0.001, 0};
  EXPECT_EQ(pp_receive_wait(pp, b), 0.0);
  b.erase("send");
  pp.by_group["pp"].erase("send");
  pp.by_group["pp"]["recv"] = {4, 0.005, 0};
  EXPECT_EQ(pp_receive_wait(pp, b), 0.0);
}

TEST(StepCommTimes, TheProgressLineNamesGroupsWithTimeAndFoldsTheEmbeddingIntoPp) {
  const auto group = [](const char* name, double busy_s, double exposed_s, double waiting_s) {
    GroupTime t;
    t.name = name;
    t.busy_s = busy_s;
    t.exposed_s = exposed_s;
    t.waiting_s = waiting_s;
    return t;
  };
  const std::vector<GroupTime> g = {group("tp", 0.0031, 0.0031, 0),
                                    group("pp", 0.0010, 0.0010, 0.0008),
                                    group("embedding", 0.0002, 0.0002, 0),
                                    group("dp", 0.0067, 0.0004, 0), group("world", 0, 0, 0)};
  EXPECT_EQ(group_times_text(g), "tp 3.1 ms, pp 1.2 ms (0.8 waiting), dp 6.7 ms (0.4 exposed)");
  EXPECT_EQ(group_times_text({}), "");
}

}  // namespace
}  // namespace mixpar::ch08
