// The pre-flight memory bill's activations against what a real run holds: train_gpt's trainer
// on pp rank threads, one step, each rank's ledger peak of activations. The bill counts the
// (chunk) micro-batches the schedule's action list keeps in flight on each rank (interleaved:
// min(warm-up + 1, m v) on rank r, each of one chunk, 1/v of the rank's blocks; Narayanan et al.
// 2021, section 2.2.2) and bills each chunk's blocks at one block's formula; the ledger's peak
// divided by the ledger's bytes of one chunk micro-batch (a run whose rank 0 holds exactly
// one: 1F1B with m = 1 over p v stages of the same blocks) must be that count. A guess such
// as 1F1B's min(p - r, m) stage micro-batches for interleaved fails: rank 0 of p 2, v 2, m 4
// holds 5 chunks (2.5 stages' worth), not 2 stages.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ch07_pipeline/model_chunks.h"
#include "ch07_pipeline/pipeline_schedule.h"
#include "ch08_test_util.h"
#include "preflight.h"
#include "tensor/ledger.h"
#include "trainer.h"

namespace mixpar::ch08 {
namespace {

using test::random_data;
using test::tiny_config;

TrainerConfig pipeline(int pp, std::int64_t n_layer, const std::string& schedule, int v,
                       std::int64_t m) {
  TrainerConfig c = tiny_config();
  c.model = GptConfig{n_layer, 2, 16, 8, 256};
  c.data_order = DataOrder::kSequential;
  c.steps = 1;
  c.grad_accum = m;
  c.threads = 1;
  c.ranks = c.pp = pp;
  c.dp = 1;
  c.pipeline_schedule = schedule;
  c.virtual_stages = v;
  return c;
}

// Each pp rank's ledger peak of activation bytes over one training step.
std::vector<std::size_t> ledger_peaks(const TrainerConfig& c, const TrainingData& data) {
  return test::train_on_each_rank(c, data, [](Trainer& t, int) {
    current_ledger().reset_peaks();
    t.train_step();
    return current_ledger().peak(MemCategory::kActivations);
  });
}

struct Layout {
  const char* schedule;
  int pp, v;
  std::int64_t m, n_layer;
};

// Every schedule, and interleaved at p 2 and 4, v 2 and 4, m = p and 2p (m = p: every chunk
// forward is warm-up, m v held, as many blocks as 1F1B's m; m = 2p: more than 1F1B's p - r).
// The last rank is left out: its last chunk also holds the head's logits, so its chunk
// micro-batches are not all one size. The V schedules (zb-v, dualpipev: 2p and 2p + 1 chunk
// micro-batches) leave rank 0 out, where their last stage is.
TEST(PreflightMemory, ActivationsFollowTheLedgerPeakOfTheRunInEverySchedule) {
  const TrainingData data = random_data(4096);
  const Layout layouts[] = {
      {"afab", 2, 1, 4, 4},        {"1f1b", 4, 1, 8, 8},        {"zb-h1", 4, 1, 8, 8},
      {"interleaved", 2, 2, 2, 4}, {"interleaved", 2, 2, 4, 4}, {"interleaved", 4, 2, 8, 8},
      {"interleaved", 2, 4, 4, 8}, {"interleaved", 2, 4, 8, 8},
      {"zb-v", 2, 2, 4, 4},        {"zb-v", 4, 2, 8, 8},        {"dualpipev", 2, 2, 4, 4},
      {"dualpipev", 4, 2, 8, 8},
  };
  for (const Layout& l : layouts) {
    const std::string at = std::string(l.schedule) + " p" + std::to_string(l.pp) + " v" +
                           std::to_string(l.v) + " m" + std::to_string(l.m);
    const TrainerConfig c = pipeline(l.pp, l.n_layer, l.schedule, l.v, l.m);
    // Rank 0 of p v stages holds one micro-batch of one chunk's blocks (a whole stage, v = 1).
    const TrainerConfig unit = pipeline(l.pp * l.v, l.n_layer, "1f1b", 1, 1);
    const RankBill unit_bill = estimate_rank_bills(unit).front();
    const std::size_t one_chunk = ledger_peaks(unit, data).front();
    ASSERT_GT(one_chunk, 0u) << at;
    ASSERT_EQ(unit_bill.micro_batches_in_flight, 1) << at;
    const std::int64_t chunk_blocks = unit_bill.blocks_held;
    const std::int64_t per_block = unit_bill.activation_bytes / chunk_blocks;
    const std::vector<RankBill> bills = estimate_rank_bills(c);
    const std::vector<std::size_t> held = ledger_peaks(c, data);
    ASSERT_EQ(bills.size(), std::size_t(l.pp)) << at;
    // The rank of the last stage (rank 0 in the V) is the one left out.
    const int head_rank = ch07::placement_of(ch07::parse_schedule(l.schedule)) ==
                                  ch07::Placement::kV
                              ? 0
                              : l.pp - 1;
    for (int r = 0; r < l.pp; ++r) {
      if (r == head_rank) continue;
      const auto i = static_cast<std::size_t>(r);
      const RankBill& b = bills[i];
      EXPECT_EQ(held[i], static_cast<std::size_t>(b.micro_batches_in_flight) * one_chunk)
          << at << " rank " << r << ": the bill counts " << b.micro_batches_in_flight
          << " chunk micro-batches, the ledger holds " << held[i] << " bytes, "
          << double(held[i]) / double(one_chunk) << " of " << one_chunk;
      EXPECT_EQ(b.blocks_held, b.micro_batches_in_flight * chunk_blocks) << at << " rank " << r;
      EXPECT_EQ(b.activation_bytes, b.blocks_held * per_block) << at << " rank " << r;
    }
  }
}

// The text names what was counted: chunk micro-batches and their blocks on an interleaved
// rank (p 2, v 2, m 4, 4 blocks: rank 0 warms up 2 (p - 1) + (v - 1) p = 4 chunk forwards and
// holds 5 chunk micro-batches of one block each), 1F1B's stage micro-batches otherwise.
TEST(PreflightMemory, TheBillSaysWhatItCountedOnAnInterleavedRank) {
  const RankBill il = estimate_rank_bills(pipeline(2, 4, "interleaved", 2, 4)).front();
  EXPECT_EQ(il.micro_batches_in_flight, 5);
  EXPECT_EQ(il.blocks_held, 5);
  EXPECT_NE(il.text().find("(pp rank 0, "), std::string::npos) << il.text();
  EXPECT_NE(il.text().find(" parameters in 2 chunks, 5 chunk micro-batches in flight: 5 blocks' "
                           "activations)"),
            std::string::npos)
      << il.text();
  const RankBill ofob = estimate_rank_bills(pipeline(2, 4, "1f1b", 1, 4)).front();
  EXPECT_EQ(ofob.micro_batches_in_flight, 2);
  EXPECT_EQ(ofob.blocks_held, 4);
  EXPECT_NE(ofob.text().find("(stage 0, "), std::string::npos) << ofob.text();
  EXPECT_NE(ofob.text().find(" parameters, 2 micro-batches in flight)"), std::string::npos)
      << ofob.text();
}

// The bill's model states are the ledger's after a step, for every dtype: a 16-bit run's
// FP32 gradient copy (as many elements as the masters) is counted with the gradients, as the
// ledger counts it, and with --offload-optimizer on the host, beside the masters and moments.
// (The bill of a bf16 run used to leave the copy out: 855 KiB of gradients before the run,
// 2.5 MiB once it started.)
TEST(PreflightMemory, TheModelStatesAreTheLedgersForEveryDtype) {
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const bool offload : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (offload ? ", offloaded" : ""));
      TrainerConfig c = tiny_config();
      c.dtype = dtype;
      c.steps = 1;
      c.threads = 1;
      c.offload_optimizer = offload;
      const RankBill bill = estimate_rank_bill(c);
      const TrainingData data = random_data(4096);
      MemoryLedger ledger;
      const LedgerScope scope(ledger);
      Trainer t(c, data);
      t.train_step();
      const auto live = [&](MemCategory k) { return static_cast<std::int64_t>(ledger.live(k)); };
      const auto host = [&](MemCategory k) { return static_cast<std::int64_t>(ledger.host_live(k)); };
      EXPECT_EQ(live(MemCategory::kParameters), bill.param_bytes);
      if (dtype == DType::kF32) {
        EXPECT_EQ(bill.fp32_grad_bytes, 0);
      }
      if (!offload) {
        EXPECT_EQ(live(MemCategory::kGradients), bill.grad_bytes + bill.fp32_grad_bytes);
        EXPECT_EQ(live(MemCategory::kMasterParams), bill.master_bytes);
        EXPECT_EQ(live(MemCategory::kOptimizerState), bill.optimizer_bytes);
      } else {
        EXPECT_EQ(live(MemCategory::kGradients), bill.grad_bytes);
        EXPECT_EQ(host(MemCategory::kGradients), bill.fp32_grad_bytes);
        EXPECT_EQ(host(MemCategory::kMasterParams), bill.master_bytes);
        EXPECT_EQ(host(MemCategory::kOptimizerState), bill.optimizer_bytes);
      }
    }
  }
}

// The bill counts a rank's parameters in closed form (no tensor named, so that 10^8 blocks
// cost microseconds): it must be exactly the registry that rank allocates, on every layout
// that shapes it: tp shards with a padded vocabulary, uneven pipeline stages, interleaved
// chunks, the first stage's wpe, the last's ln_f and tied wte copy, and the V of zb-v and
// dualpipev, whose rank 0 holds the first and the last stage and so the tied wte once.
TEST(PreflightMemory, TheClosedFormParameterCountIsTheRegistrysOnEveryLayout) {
  struct Case {
    int tp, pp, v;
    std::int64_t n_layer, vocab;
    const char* schedule = "1f1b";
  };
  int checked = 0;
  for (const Case k : {Case{1, 1, 1, 3, 256}, Case{2, 1, 1, 2, 257}, Case{4, 1, 1, 1, 50257},
                       Case{1, 3, 1, 7, 256}, Case{2, 2, 1, 5, 255},
                       Case{1, 2, 2, 8, 256, "interleaved"}, Case{2, 2, 3, 7, 259, "interleaved"},
                       Case{1, 2, 2, 4, 256, "zb-v"}, Case{2, 3, 2, 7, 259, "dualpipev"}}) {
    TrainerConfig c = tiny_config();
    c.model = GptConfig{k.n_layer, 4, 32, 24, k.vocab};
    c.tp = k.tp;
    c.pp = k.pp;
    c.virtual_stages = k.v;
    c.pipeline_schedule = k.schedule;
    c.grad_accum = 2 * k.pp;
    const ch07::Placement placement =
        ch07::layout_for(ch07::parse_schedule(k.schedule), k.pp, 2 * k.pp, k.v).placement;
    for (int stage = 0; stage < k.pp; ++stage) {
      const std::vector<GptStage> chunks =
          k.pp == 1 ? std::vector<GptStage>{GptStage{}}
                    : ch07::rank_chunk_stages(c.model, stage, k.pp, k.v, placement);
      const std::int64_t registry =
          ch07::make_chunks_registry(c.model, chunks, TensorShard{0, k.tp}).numel();
      EXPECT_EQ(rank_parameter_count(c, stage), registry)
          << "tp " << k.tp << " pp " << k.pp << " v " << k.v << " stage " << stage;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 17);
}

// A count that does not fit 64 bits is an InputError naming the product, not a wrapped size.
TEST(PreflightMemory, AParameterCountBeyond64BitsIsRefused) {
  TrainerConfig c = tiny_config();
  c.model = GptConfig{std::int64_t{1} << 40, 4, 1 << 20, 24, 256};
  EXPECT_THROW((void)rank_parameter_count(c, 0), InputError);
}

}  // namespace
}  // namespace mixpar::ch08
