// The failure modes of chapter 7, each as the demo's --bug shows it: what goes wrong, and what
// catches it.
#include <gtest/gtest.h>

#include "ch07_pipeline/pipeline_lesson.h"
#include "util/errors.h"

namespace mixpar::ch07 {
namespace {

// The section's claims about the bug hold; the correctness claim measured on the buggy run
// (what --bug NAME prints as "FAIL (expected)") fails, and every section has one.
void expect_claims_hold(const Section& s) {
  ASSERT_FALSE(s.claims.empty()) << s.title;
  int broken = 0;
  for (const Claim& k : s.claims) {
    if (!k.broken_by.empty()) {
      ++broken;
      EXPECT_FALSE(k.ok) << "--bug " << k.broken_by << " no longer breaks: " << k.claim
                         << " (measured " << k.measured << ")\n" << s.text;
      continue;
    }
    EXPECT_TRUE(k.ok) << s.title << ": " << k.claim << " (expected " << k.expected
                      << ", measured " << k.measured << ")\n" << s.text;
  }
  EXPECT_GE(broken, 1) << s.title << ": no claim is marked as the one the bug breaks";
}

TEST(PipelineFailure, ReceiveBeforeSendIsRefusedBeforeComputeNamingBothRanks) {
  const PipelinePlan bad = receive_before_send(make_plan(ScheduleKind::kOneFOneB, {2, 4, 1}));
  try {
    preflight(bad);
    FAIL() << "a deadlocking plan passed the pre-flight check";
  } catch (const ScheduleRefused& e) {
    EXPECT_EQ(e.problem.rank_a + e.problem.rank_b, 1) << e.what();  // ranks 0 and 1
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
    EXPECT_NE(e.problem.action_a.find("recv"), std::string::npos) << e.what();
  }
  // The check is an input error: train_gpt exits 2 before any compute.
  EXPECT_THROW(preflight(bad), InputError);
}

// Interleaved with m > p leaves a lone send facing a neighbour's send (rank 0 sends micro-batch
// 0's gradient while rank 1 sends micro-batch 1's): buffered sends get past it, sends that wait
// for their receiver do not. On such a backend the plan is refused before any compute, naming
// the two ranks; with m = p, or on buffered sends, it runs.
TEST(PipelineFailure, InterleavedWithMoreMicroBatchesThanStagesIsRefusedWhereSendsWait) {
  const GptConfig c{8, 2, 16, 8, 32};
  GptPipelineOptions strict;
  strict.local.synchronous_sends = true;
  try {
    run_gpt_pipeline(c, make_plan(ScheduleKind::kInterleaved, {2, 4, 2}), lesson_batches(c, 4),
                     strict);
    FAIL() << "interleaved m 4 > p 2 ran on sends that wait for their receiver";
  } catch (const ScheduleRefused& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("needs buffered sends"), std::string::npos) << what;
    EXPECT_NE(what.find("deadlock"), std::string::npos) << what;
    EXPECT_EQ(e.problem.rank_a + e.problem.rank_b, 1) << what;  // ranks 0 and 1
  }
  // m = p: every send is fused with the receive after it; it runs, as one device would.
  const auto bs = lesson_batches(c, 2);
  const auto sync = run_gpt_pipeline(c, make_plan(ScheduleKind::kInterleaved, {2, 2, 2}), bs,
                                     strict);
  EXPECT_EQ(sync.loss_sum, one_device(c, bs).loss_sum);
  EXPECT_NO_THROW(run_gpt_pipeline(c, make_plan(ScheduleKind::kInterleaved, {2, 4, 2}),
                                   lesson_batches(c, 4)));
  // Buffered sends run a fused send-and-receive as a send, then a receive: a sendrecv's send
  // may wait for its receiver (the local backend lends every message above its eager limit,
  // here all of them; MPI_Sendrecv), and interleaved would then deadlock on buffered backends.
  GptPipelineOptions lent;
  lent.local.eager_limit_bytes = 0;
  EXPECT_NO_THROW(run_gpt_pipeline(c, make_plan(ScheduleKind::kInterleaved, {2, 4, 2}),
                                   lesson_batches(c, 4), lent));
}

TEST(PipelineFailure, UncheckedTheDeadlockIsTheCommunicatorsReport) {
  expect_claims_hold(bug_section("deadlock"));
}

TEST(PipelineFailure, LossNotDividedByMMakesGradientsMTimesTooLargeAndClippingFires) {
  expect_claims_hold(bug_section("loss-not-divided"));
}

TEST(PipelineFailure, TiedEmbeddingNotSummedDriftsAndTheHashShowsIt) {
  expect_claims_hold(bug_section("tied-not-summed"));
}

TEST(PipelineFailure, FewerMicroBatchesThanStagesRunsWithTheBubbleStated) {
  expect_claims_hold(bug_section("few-micro-batches"));
}

TEST(PipelineFailure, MoreStagesThanBlocksIsAnInputErrorNamingTheNumbers) {
  expect_claims_hold(bug_section("too-many-stages"));
}

TEST(PipelineFailure, VListsPlacedAsALoopAreRefusedBeforeCompute) {
  expect_claims_hold(bug_section("v-placement"));
  // DualPipeV's lists too, at every p the lesson could show.
  for (int p : {2, 3, 4}) {
    EXPECT_THROW(preflight(v_lists_in_a_loop(ScheduleKind::kDualPipeV, p, 2 * p)),
                 ScheduleRefused)
        << "p " << p;
  }
}

TEST(PipelineFailure, AWeightGradientDeferredPastTheStepIsRefusedAndUncheckedMissesGradients) {
  expect_claims_hold(bug_section("w-after-step"));
  for (ScheduleKind k : {ScheduleKind::kZbH1, ScheduleKind::kDualPipeV}) {
    const PipelinePlan bad = last_w_deferred(make_plan(k, {2, 4, k == ScheduleKind::kZbH1 ? 1 : 2}));
    try {
      preflight(bad);
      FAIL() << schedule_name(k) << ": a missing W passed";
    } catch (const ScheduleRefused& e) {
      EXPECT_NE(std::string(e.what()).find("not its weight gradient"), std::string::npos)
          << e.what();
    }
  }
}

// The demo's --bug list is the lesson's, every one with its section.
TEST(PipelineFailure, EveryBugOfTheListHasItsSection) {
  EXPECT_EQ(bug_names(), (std::vector<std::string>{"deadlock", "loss-not-divided",
                                                   "tied-not-summed", "few-micro-batches",
                                                   "too-many-stages", "v-placement",
                                                   "w-after-step"}));
  EXPECT_THROW((void)bug_section("no-such-bug"), InputError);
}

TEST(PipelineFailure, AMismatchedMessageIsRefusedNamingSenderAndReceiver) {
  PipelinePlan plan = make_plan(ScheduleKind::kAfab, {2, 2, 1});
  // Rank 1 receives micro-batch 1's activation where micro-batch 0's arrives.
  for (Action& a : plan.ranks[1]) {
    if (a.work == Work::kTransfer && !a.transfers[0].send) {
      a.transfers[0].micro_batch = 1;
      break;
    }
  }
  try {
    preflight(plan);
    FAIL() << "a mismatched receive passed";
  } catch (const ScheduleRefused& e) {
    EXPECT_NE(std::string(e.what()).find("mismatch: rank 0 sends"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mixpar::ch07
