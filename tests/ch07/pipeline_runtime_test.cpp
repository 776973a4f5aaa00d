// The runtime executing the lists on GPT-2 stages over the local backend (one thread per
// pipeline rank): the same losses and gradients as one device accumulating the same m
// micro-batches, the activations each rank holds by the ledger, and exactly the activations
// and input gradients sent.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "ch07_pipeline/pipeline_lesson.h"
#include "ch07_pipeline/schedule_simulator.h"

namespace mixpar::ch07 {
namespace {

// 8 blocks (p v = 8 chunks of one block at most), 16 wide, 2 heads, 8 positions, 32 tokens.
GptConfig eight_blocks() { return {8, 2, 16, 8, 32}; }

std::vector<TokenBatch> batches(const GptConfig& c, int m) { return lesson_batches(c, m); }

GptPipelineRun run_pipeline(const GptConfig& c, const PipelinePlan& plan,
                            const std::vector<TokenBatch>& bs, LocalOptions local = {}) {
  GptPipelineOptions o;
  o.local = local;
  return run_gpt_pipeline(c, plan, bs, o);
}

// ZB-H1 included: its W's run later than one device's weight gradients but, on each chunk, in
// micro-batch order (ZeroBubbleH1RunsEachRanksWeightGradientsInMicroBatchOrder), and a W
// adds the same products into the same sums in the same order: bit for bit too.
TEST(PipelineRuntime, EveryScheduleGivesOneDevicesLossesAndGradients) {
  const GptConfig c = eight_blocks();
  for (ScheduleKind k : {ScheduleKind::kAfab, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved,
                         ScheduleKind::kZbH1}) {
    for (int p : {2, 4}) {
      for (int m = 1; m <= 8; ++m) {
        if (k == ScheduleKind::kInterleaved && m % p != 0) continue;
        const PipelineLayout l{p, m, k == ScheduleKind::kInterleaved ? 2 : 1};
        const auto bs = batches(c, m);
        const OneDevice ref = one_device(c, bs);
        const PipelinePlan plan = make_plan(k, l);
        preflight(plan);
        const GptPipelineRun run = run_pipeline(c, plan, bs);
        const std::string at = std::string(schedule_name(k)) + " p" + std::to_string(p) +
                               " m" + std::to_string(m);
        // Forward is the same operations in the same order: the loss bit for bit.
        EXPECT_EQ(run.loss_sum, ref.loss_sum) << at;
        ASSERT_EQ(run.grads.size(), ref.grads.size()) << at;
        for (const auto& [name, g] : ref.grads) {
          const std::vector<float>& pg = run.grads.at(name);
          if (name != "wte.weight") {
            // Each stage accumulates its micro-batches in the order one device does.
            EXPECT_EQ(std::memcmp(pg.data(), g.data(), g.size() * sizeof(float)), 0)
                << at << " " << name;
            continue;
          }
          // wte: the embedding's half (first stage) and the head's (last stage) summed once
          // per step instead of in place per micro-batch: rounding apart.
          double worst = 0, scale = 0;
          for (std::size_t i = 0; i < g.size(); ++i) {
            worst = std::max(worst, std::abs(double(pg[i]) - double(g[i])));
            scale = std::max(scale, std::abs(double(g[i])));
          }
          EXPECT_LE(worst, 8 * m * 1.2e-7 * scale) << at << " wte";
        }
      }
    }
  }
}

// The ledger's activation peak on each rank, in micro-batches (one micro-batch's activations on
// that rank measured by a run of m = 1): AFAB holds all m, 1F1B at most p - r on rank r.
TEST(PipelineRuntime, LedgerPeakActivationsAreMForAfabAndPMinusRFor1F1B) {
  const GptConfig c = eight_blocks();
  const int p = 4, m = 8;
  const auto one = run_pipeline(c, make_plan(ScheduleKind::kOneFOneB, {p, 1, 1}), batches(c, 1));
  for (ScheduleKind k : {ScheduleKind::kAfab, ScheduleKind::kOneFOneB}) {
    const PipelineLayout l{p, m, 1};
    const auto run = run_pipeline(c, make_plan(k, l), batches(c, m));
    for (int r = 0; r < p; ++r) {
      const std::size_t per_mb = one.peak_activation_bytes[std::size_t(r)];
      ASSERT_GT(per_mb, 0u);
      const std::size_t want = k == ScheduleKind::kAfab ? std::size_t(m) : std::size_t(p - r);
      EXPECT_EQ(run.peak_activation_bytes[std::size_t(r)], want * per_mb)
          << schedule_name(k) << " rank " << r;
    }
  }
}

// What makes ZB-H1 bitwise: the W's it delays run first in, first out, so each rank adds its
// micro-batches' weight gradients in one device's order; its B's (with the LayerNorms' weight
// gradients) run in that order too.
TEST(PipelineRuntime, ZeroBubbleH1RunsEachRanksWeightGradientsInMicroBatchOrder) {
  for (int p : {2, 4}) {
    for (int m = 1; m <= 8; ++m) {
      const PipelinePlan plan = make_plan(ScheduleKind::kZbH1, {p, m, 1});
      for (const RankProgram& prog : plan.ranks) {
        std::vector<int> b_order, w_order;
        for (const Action& a : prog) {
          if (a.work == Work::kBackwardInput) b_order.push_back(a.micro_batch);
          if (a.work == Work::kBackwardWeight) w_order.push_back(a.micro_batch);
        }
        std::vector<int> want(static_cast<std::size_t>(m));
        for (int k = 0; k < m; ++k) want[std::size_t(k)] = k;
        EXPECT_EQ(b_order, want) << "p" << p << " m" << m;
        EXPECT_EQ(w_order, want) << "p" << p << " m" << m;
      }
    }
  }
}

// ZB-H1's memory claim (Qi et al. 2023, table 1: p micro-batches' activations, as 1F1B): every
// rank's ledger peak is min(p, m) micro-batches', 1F1B's first-rank peak, although a rank
// holds a micro-batch from its F to its W (a slot waiting for W holds what its forward did).
TEST(PipelineRuntime, ZeroBubbleH1PeaksAtOneFOneBsFirstRankPeakOnEveryRank) {
  const GptConfig c = eight_blocks();
  const int p = 4;
  const auto one = run_pipeline(c, make_plan(ScheduleKind::kOneFOneB, {p, 1, 1}), batches(c, 1));
  for (int m : {2, 4, 8}) {
    const auto bs = batches(c, m);
    const auto zb = run_pipeline(c, make_plan(ScheduleKind::kZbH1, {p, m, 1}), bs);
    const auto ofob = run_pipeline(c, make_plan(ScheduleKind::kOneFOneB, {p, m, 1}), bs);
    for (int r = 0; r < p; ++r) {
      const std::size_t per_mb = one.peak_activation_bytes[std::size_t(r)];
      EXPECT_EQ(zb.peak_activation_bytes[std::size_t(r)], std::size_t(std::min(p, m)) * per_mb)
          << "m" << m << " rank " << r;
    }
    // Rank 0, 1F1B's fullest: the same bytes under both schedules. (Later ranks hold more
    // under ZB-H1 than under 1F1B, p - r: the delayed W's.)
    EXPECT_EQ(zb.peak_activation_bytes[0], ofob.peak_activation_bytes[0]) << "m" << m;
  }
}

// Interleaved's memory (Narayanan et al. 2021, section 2.2.2: the warm-up holds more
// micro-batches in flight than 1F1B's): rank r holds min(warm-up + 1, m v) chunks' activations
// at its peak, by the ledger. A chunk's micro-batch is measured by stage 0 of p v stages with
// m = 1 (the same blocks per chunk); the last rank's last chunk also holds the head's logits, so
// the claim is checked on ranks 0 .. p - 2 in bytes, and on every rank against 1F1B's p - r.
TEST(PipelineRuntime, InterleavedPeaksAtItsWarmUpPlusOneChunksOnEachRank) {
  const GptConfig c = eight_blocks();
  for (int p : {2, 4}) {
    const int v = 2;
    const auto one_chunk =
        run_pipeline(c, make_plan(ScheduleKind::kOneFOneB, {p * v, 1, 1}), batches(c, 1));
    const std::size_t per_chunk = one_chunk.peak_activation_bytes[0];
    for (int m : {p, 2 * p}) {
      const PipelineLayout l{p, m, v};
      const auto bs = batches(c, m);
      const auto il = run_pipeline(c, make_plan(ScheduleKind::kInterleaved, l), bs);
      const auto ofob = run_pipeline(c, make_plan(ScheduleKind::kOneFOneB, {p, m, 1}), bs);
      for (int r = 0; r < p; ++r) {
        const int held = std::min(warmup_forwards(ScheduleKind::kInterleaved, l, r) + 1, m * v);
        const std::string at = "p" + std::to_string(p) + " m" + std::to_string(m) + " rank " +
                               std::to_string(r);
        const std::size_t peak = il.peak_activation_bytes[std::size_t(r)];
        if (r < p - 1) {
          EXPECT_EQ(peak, std::size_t(held) * per_chunk) << at;
        }
        // More than 1F1B's p - r micro-batches of a whole stage (v chunks' worth each).
        EXPECT_GT(peak, ofob.peak_activation_bytes[std::size_t(r)]) << at;
      }
    }
  }
}

// Rank r sends m activations forward (unless last) and m input gradients back (unless
// first), each B x T x C elements, and nothing else.
TEST(PipelineRuntime, EachRankSendsExactlyItsActivationsAndInputGradients) {
  const GptConfig c = eight_blocks();
  const std::size_t message = 2 * 8 * 16 * sizeof(float);  // B x T x C of f32
  for (ScheduleKind k : {ScheduleKind::kAfab, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved,
                         ScheduleKind::kZbH1}) {
    const int p = 4, m = 4, v = k == ScheduleKind::kInterleaved ? 2 : 1;
    const auto run = run_pipeline(c, make_plan(k, {p, m, v}), batches(c, m));
    for (int r = 0; r < p; ++r) {
      // Per chunk: an activation unless it is the last virtual stage, a gradient unless first.
      std::size_t messages = 0;
      for (int ch = 0; ch < v; ++ch) {
        const int s = ch * p + r;
        messages += std::size_t(m) * ((s < p * v - 1 ? 1 : 0) + (s > 0 ? 1 : 0));
      }
      EXPECT_EQ(run.pp_bytes_sent[std::size_t(r)], messages * message)
          << schedule_name(k) << " rank " << r;
    }
  }
}

// Sends that wait for their receiver (the local backend's synchronous mode, as NCCL's): the
// fused send-and-receive actions keep 1F1B running.
TEST(PipelineRuntime, OneFOneBRunsWithSendsThatWaitForTheReceiver) {
  const GptConfig c = eight_blocks();
  LocalOptions sync;
  sync.synchronous_sends = true;
  const auto bs = batches(c, 6);
  const auto plain = run_pipeline(c, make_plan(ScheduleKind::kOneFOneB, {4, 6, 1}), bs);
  const auto strict = run_pipeline(c, make_plan(ScheduleKind::kOneFOneB, {4, 6, 1}), bs, sync);
  EXPECT_EQ(strict.loss_sum, plain.loss_sum);
  EXPECT_EQ(strict.grads, plain.grads);
  // ZB-H1 too: its B's send as 1F1B's backwards do.
  const auto zb = run_pipeline(c, make_plan(ScheduleKind::kZbH1, {4, 6, 1}), bs, sync);
  EXPECT_EQ(zb.loss_sum, plain.loss_sum);
  EXPECT_EQ(zb.grads.at("h.3.mlp.c_fc.weight"), plain.grads.at("h.3.mlp.c_fc.weight"));
}

// The gradient norm a pipeline clips with is over every stage: each rank's counted squares
// (the last stage's wte copy left out) summed. The first stage's alone, what a trainer that
// forgets the other stages computes, is too small, and clipping would fire too late.
TEST(PipelineRuntime, GradNormCoversEveryStageAndCountsTheTiedWteOnce) {
  const GptConfig c = eight_blocks();
  const auto bs = batches(c, 4);
  const OneDevice ref = one_device(c, bs);
  for (int p : {2, 4}) {
    const auto run = run_pipeline(c, make_plan(ScheduleKind::kOneFOneB, {p, 4, 1}), bs);
    EXPECT_NEAR(run.grad_norm, ref.grad_norm, 1e-6 * ref.grad_norm) << "p" << p;
    EXPECT_LT(run.first_stage_norm, 0.99 * ref.grad_norm) << "p" << p;
  }
}

}  // namespace
}  // namespace mixpar::ch07
