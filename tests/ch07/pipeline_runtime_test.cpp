// The runtime executing the lists on GPT-2 stages over the local backend (one thread per
// pipeline rank): the same losses and gradients as one device accumulating the same m
// micro-batches, the activations each rank holds by the ledger, and exactly the activations
// and input gradients sent.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <mutex>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "ch07_pipeline/pipeline_runtime.h"
#include "ch07_pipeline/schedule_simulator.h"
#include "comm/local_backend.h"
#include "random/philox.h"
#include "tensor/ledger.h"

namespace mixpar::ch07 {
namespace {

void one_thread() {
#if defined(_OPENMP)
  omp_set_num_threads(1);  // GEMM blocking, hence rounding, depends on the thread count
#endif
}

// 8 blocks (p v = 8 chunks of one block at most), 16 wide, 2 heads, 8 positions, 32 tokens.
GptConfig eight_blocks() { return {8, 2, 16, 8, 32}; }

std::vector<TokenBatch> batches(const GptConfig& c, int m) {
  Philox g(11);
  std::vector<TokenBatch> out;
  for (int k = 0; k < m; ++k) {
    TokenBatch b;
    b.B = 2;
    b.T = 8;
    for (int i = 0; i < 16; ++i) {
      b.inputs.push_back(std::int32_t(g.next_u32() % c.vocab_size));
      b.targets.push_back(std::int32_t(g.next_u32() % c.vocab_size));
    }
    out.push_back(std::move(b));
  }
  return out;
}

GptOptions options_for(const GptStage& st) {
  GptOptions o;
  o.seed = 3;
  o.stage = st;
  return o;
}

struct Reference {
  double loss_sum = 0;
  std::map<std::string, std::vector<float>> grads;
};

Reference one_device(const GptConfig& c, const std::vector<TokenBatch>& bs) {
  one_thread();
  GptModel whole(c, options_for({}));
  Reference r;
  const float seed = 1.0f / float(bs.size());
  for (std::size_t k = 0; k < bs.size(); ++k) {
    r.loss_sum += whole.forward(bs[k].inputs, bs[k].targets, bs[k].B, bs[k].T);
    whole.backward(seed, k > 0);
  }
  for (const ParamEntry& e : whole.registry().entries()) {
    const float* g = e.grad.data_as<float>();
    r.grads[e.name].assign(g, g + e.grad.numel());
  }
  return r;
}

struct PipelineRun {
  double loss_sum = 0;
  std::map<std::string, std::vector<float>> grads;  // wte: first stage's (after the sum)
  std::vector<std::size_t> peak_activation_bytes;   // by rank
  std::vector<std::size_t> pp_bytes_sent;           // by rank
};

PipelineRun run_pipeline(const GptConfig& c, const PipelinePlan& plan,
                         const std::vector<TokenBatch>& bs, LocalOptions opts = {}) {
  const PipelineLayout& l = plan.layout;
  PipelineRun out;
  out.peak_activation_bytes.resize(std::size_t(l.pp));
  out.pp_bytes_sent.resize(std::size_t(l.pp));
  std::mutex mu;
  run_local(l.pp, [&](Communicator& world) {
    one_thread();
    const int r = world.rank();
    std::vector<GptModel> chunks;
    std::vector<GptModel*> ptrs;
    for (int ch = 0; ch < l.virtual_stages; ++ch) {
      chunks.emplace_back(c, options_for(gpt_stage(c, l.stage_of(r, ch), l.stages())));
    }
    for (GptModel& g : chunks) ptrs.push_back(&g);
    MemoryLedger& ledger = current_ledger();
    const std::size_t before = ledger.live(MemCategory::kActivations);
    ledger.reset_peaks();
    GptStageWork work(ptrs, plan, r, bs, 1.0f / float(l.micro_batches));
    std::vector<TraceSpan> spans;
    world.traffic().reset();
    execute(plan.ranks[std::size_t(r)], l, world, work, spans, r);
    const std::size_t sent = world.traffic().total().bytes_sent;
    // The tied wte: the first stage's chunk 0 and the last stage's last chunk.
    std::unique_ptr<Communicator> emb =
        world.split(r == 0 || r == l.pp - 1 ? 0 : -1, r);
    GptModel& holder = r == 0 ? chunks.front() : chunks.back();
    sum_tied_embedding_grads(holder, emb.get());
    std::lock_guard<std::mutex> lock(mu);
    out.peak_activation_bytes[std::size_t(r)] = ledger.peak(MemCategory::kActivations) - before;
    out.pp_bytes_sent[std::size_t(r)] = sent;
    if (r == l.pp - 1) out.loss_sum = work.loss_sum();
    for (GptModel& g : chunks) {
      for (const ParamEntry& e : g.registry().entries()) {
        if (e.holding.tied_copy) continue;
        const float* p = e.grad.data_as<float>();
        out.grads[e.name].assign(p, p + e.grad.numel());
      }
    }
  }, opts);
  return out;
}

TEST(PipelineRuntime, EveryScheduleGivesOneDevicesLossesAndGradients) {
  const GptConfig c = eight_blocks();
  for (ScheduleKind k : {ScheduleKind::kAfab, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved}) {
    for (int p : {2, 4}) {
      for (int m = 1; m <= 8; ++m) {
        if (k == ScheduleKind::kInterleaved && m % p != 0) continue;
        const PipelineLayout l{p, m, k == ScheduleKind::kInterleaved ? 2 : 1};
        const auto bs = batches(c, m);
        const Reference ref = one_device(c, bs);
        const PipelinePlan plan = make_plan(k, l);
        preflight(plan);
        const PipelineRun run = run_pipeline(c, plan, bs);
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

// Rank r sends m activations forward (unless last) and m input gradients back (unless
// first), each B x T x C elements, and nothing else.
TEST(PipelineRuntime, EachRankSendsExactlyItsActivationsAndInputGradients) {
  const GptConfig c = eight_blocks();
  const std::size_t message = 2 * 8 * 16 * sizeof(float);  // B x T x C of f32
  for (ScheduleKind k : {ScheduleKind::kAfab, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved}) {
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
}

}  // namespace
}  // namespace mixpar::ch07
