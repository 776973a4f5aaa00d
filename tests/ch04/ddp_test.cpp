// DistributedDataParallel on the local backend: N ranks with batch B equal one rank with batch
// N*B step for step (FP32; N = 2 and 4; tolerances in ddp_tolerances.h), with loss and grad norm
// global and identical on every rank; accumulation sends nothing until the last micro-step;
// the unscale order of source article A section 7.1 (docs/SOURCES.md) is harmless with an
// agreed decision; replicas are checked.
#include <gtest/gtest.h>

#include <string>

#include "ch04_ddp/ddp_scenarios.h"
#include "comm/local_backend.h"
#include "comm_local_test_util.h"
#include "io/token_loader.h"
#include "ops/compute_threads.h"
#include "util/json.h"

namespace mixpar::ch04 {
namespace {

void expect_claims(const ScenarioResult& r) {
  for (const Claim& c : r.claims) {
    EXPECT_TRUE(c.ok) << r.name << ": " << c.claim << ": expected " << c.expected << ", measured "
                      << c.measured << "\n" << r.table;
  }
}

TEST(Ddp, TwoRanksEqualOneRankWithTwiceTheBatch) {
  expect_claims(equivalence_scenario(2, LessonConfig{}));
}

TEST(Ddp, FourRanksEqualOneRankWithFourTimesTheBatch) {
  expect_claims(equivalence_scenario(4, LessonConfig{}));
}

TEST(Ddp, RingBucketsGiveTheSameEquivalence) {
  LessonConfig c;
  c.ddp.reducer.algo = AllReduceAlgo::kRing;
  c.ddp.reducer.bucket_cap_bytes = 16 << 10;
  expect_claims(equivalence_scenario(4, c));
}

TEST(Ddp, AccumulationSendsOneAllReducePerBucketPerStep) {
  LessonConfig c;
  c.ddp.reducer.bucket_cap_bytes = 32 << 10;  // several buckets
  expect_claims(accumulation_scenario(2, 3, c));
}

TEST(Ddp, UnscalingBeforeOrAfterTheAllReduceIsTheSameWithOneAgreedScale) {
  expect_claims(unscale_order_scenario(2, LessonConfig{}));
}

TEST(Ddp, SameSeedPassesTheInitCheck) {
  LessonConfig c;
  c.ddp.init = InitSync::kSameSeed;
  c.steps = 1;
  const auto runs = run_local_ddp(3, c);
  EXPECT_TRUE(runs[2].steps[0].replicas_agree);
}

TEST(Ddp, DifferentSeedsWithoutBroadcastFailTheInitCheckNamingTheRanks) {
  LessonConfig c;
  c.ddp.init = InitSync::kSameSeed;
  c.seed_per_rank = true;
  try {
    run_local_ddp(4, c);
    FAIL() << "expected ReplicaMismatch";
  } catch (const ReplicaMismatch& e) {
    EXPECT_CONTAINS(e.what(), "ranks 1, 2, 3 hold weights different from rank 0's");
  }
}

TEST(Ddp, StepTimesAndTraceCoverComputeAndCommunication) {
  LessonConfig c;
  c.steps = 2;
  const auto runs = run_local_ddp(2, c);
  const StepTimes& t = runs[1].steps[1].times;
  EXPECT_GT(t.compute_s, 0.0);
  EXPECT_GT(t.comm_s, 0.0);
  EXPECT_LE(t.exposed_s, t.compute_s + t.comm_s + 1.0);
  std::vector<TraceSpan> all;
  for (const RankRun& r : runs) all.insert(all.end(), r.spans.begin(), r.spans.end());
  const Json j = Json::parse(chrome_trace_json(all));
  int backward = 0, buckets = 0;
  for (const Json& e : j.at("traceEvents").as_array()) {
    if (e.at("ph").as_string() != "X") continue;
    backward += e.at("name").as_string() == "backward" ? 1 : 0;
    buckets += e.at("name").as_string().rfind("all_reduce bucket", 0) == 0 ? 1 : 0;
  }
  EXPECT_EQ(backward, 2 * 2) << "2 ranks x 2 steps";
  EXPECT_EQ(buckets, 2 * 2 * runs[0].buckets);
}

TEST(Ddp, WithTheModelsHookEveryBucketLeavesWhileBackwardRuns) {
  if (!model_reports_grad_ready()) GTEST_SKIP() << "GptModel has no set_grad_ready_hook";
  const LessonConfig cfg;
  const Tokens tokens = lesson_tokens(cfg.data_seed);
  run_local(2, [&](Communicator& c) {
    ops::set_compute_threads(1);
    GptModel model(cfg.model);
    DdpConfig d;
    d.reducer.bucket_cap_bytes = 16 << 10;
    DistributedDataParallel ddp(model, c, d);
    EXPECT_TRUE(ddp.overlaps());
    TokenLoader loader(tokens, cfg.B, cfg.T, DataOrder::kSequential, 1, c.rank(), c.size());
    TokenBatch b = loader.next();
    ddp.forward(b.inputs, b.targets, b.B, b.T);
    ddp.backward(1.0f, /*sync=*/true);
    EXPECT_GT(ddp.buckets().size(), 3u);
    EXPECT_EQ(ddp.buckets_sent_during_backward(), ddp.buckets().size());
    // The explicit path reduces after backward: nothing left during it.
    b = loader.next();
    ddp.forward(b.inputs, b.targets, b.B, b.T);
    ddp.backward(1.0f, /*sync=*/false);
    ddp.reduce_gradients();
    EXPECT_EQ(ddp.buckets_sent_during_backward(), 0u);
  });
}

}  // namespace
}  // namespace mixpar::ch04
