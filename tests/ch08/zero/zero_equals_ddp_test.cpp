// ZeRO stage 1 in chapter 8's trainer against chapter 4's DDP on the same ranks: for fp32, bf16
// and fp16 with the loss scaler, N = 2 and 4, 10 steps with clipping active, every step's loss,
// gradient norm and clip coefficient and the final weights have the same bits. Also: each rank
// holds 1/N of the masters and moments (the ledger), each rank sends (N-1)/N of the padded
// gradients and of the parameters per step (the communicator), dp = 1 is stage 0, and the bad
// configurations are one-line InputErrors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "../ch08_test_util.h"
#include "zero3_inflight.h"
#include "ch03_master_weights/memory_calculator.h"
#include "ch05_zero/zero_stage3.h"
#include "trainer.h"

namespace mixpar::ch08 {
namespace {

using test::random_data;
using test::tiny_config;

TrainerConfig zero_config(int ranks, int stage, DType dtype) {
  TrainerConfig c = tiny_config();
  c.data_order = DataOrder::kSequential;
  c.steps = 10;
  c.schedule = LrSchedule{LrScheduleKind::kCosine, 1e-2, 1e-3, 2, 10};
  c.ranks = c.dp = ranks;
  c.threads = 1;
  c.dtype = dtype;
  c.zero_stage = stage;
  c.grad_clip = 0.05;     // below the tiny model's norms: every step clips
  c.bucket_mb = 0.004;    // about 4 KiB: several buckets, parameters cut between owners
  c.grad_accum = 2;
  if (dtype == DType::kF16) c.loss_scale = 524288.0;  // 2^19 overflows: skips, halvings
  return c;
}

struct RankRun {
  std::vector<StepStats> steps;
  std::vector<unsigned char> weights;  // the working copy after the last step
  std::vector<std::size_t> mem;        // by ledger category
  std::size_t reduce_scatter_bytes = 0, all_gather_bytes = 0, all_reduce_bytes = 0;
  std::size_t control_gather_bytes = 0;  // all_gather_bytes: the replica check's hashes
  std::vector<std::vector<float>> masters;  // the FP32 tensors this rank's optimizer steps
  // ZeRO: this rank's pieces and, ZeRO-3, its shard of the working copy at each piece.
  std::vector<ch05::ShardPiece> pieces;
  std::vector<std::vector<unsigned char>> shard_weights;
  std::size_t param_gather_bytes = 0;  // ZeRO-3: its parameter all-gathers
  std::size_t params_peak = 0;         // kParameters' peak during the steps
  std::size_t gathered_between_steps = 0;
  std::int64_t padded = 0;        // ZeRO: the partition's padded elements P'
  std::int64_t wte_padded = 0;    // ZeRO-3: the wte-and-wpe bucket's padded elements
  std::size_t inflight_max = 0;   // ZeRO-3: the most gathered bytes a pass holds at once
  std::int64_t prefetched = 0;    // ZeRO-3: units gathered ahead of their turn
};

std::vector<RankRun> run(const TrainerConfig& c) {
  const TrainingData data = random_data(4096);
  return test::train_on_each_rank(c, data, [&](Trainer& t, int rank) {
    RankRun r;
    current_ledger().reset_peaks();
    while (t.step() < c.steps) r.steps.push_back(t.train_step());
    r.params_peak = current_ledger().peak(MemCategory::kParameters);
    const auto* zero = dynamic_cast<const ch05::ZeroStage1*>(&t.grad_sync());
    const auto* z3 = dynamic_cast<const ch05::ZeroStage3*>(&t.grad_sync());
    if (zero) {
      r.pieces = zero->partition().pieces();
      r.padded = zero->partition().padded_elements();
    }
    if (z3) {
      const auto& buckets = z3->partition().buckets();
      r.wte_padded = buckets[z3->unit_buckets(-1).front()].padded;
      r.inflight_max = test::zero3_inflight_max(*z3, c.model.n_layer, z3->prefetch(), c.dtype);
      r.prefetched = z3->prefetched_units();
      for (const Tensor& p : z3->shard_params()) r.shard_weights.push_back(test::bytes_of(p));
      r.param_gather_bytes = z3->gather_comm().traffic().totals("all_gather").bytes_sent;
      r.gathered_between_steps = z3->gathered_bytes();
    } else {
      r.weights = test::bytes_of(t.model().registry().flat_params());
    }
    const RankMetrics m = t.gather_rank_metrics()[static_cast<std::size_t>(rank)];
    r.mem.assign(m.mem.begin(), m.mem.end());
    const TrafficRecorder& tr = t.grid()->dp().traffic();
    r.reduce_scatter_bytes = tr.totals("reduce_scatter").bytes_sent;
    r.all_gather_bytes = tr.totals("all_gather").bytes_sent;
    r.control_gather_bytes = tr.totals("all_gather_bytes").bytes_sent;
    r.all_reduce_bytes = tr.totals("all_reduce").bytes_sent;
    for (const Tensor& p : t.optimizer().stepped_params()) r.masters.push_back(p.to_floats());
    return r;
  });
}

struct Layout {
  int ranks;
  DType dtype;
};

// ZeRO stage `stage` against DDP: every step's loss, skip, scale, norm and clip coefficient,
// every rank's working copy, and every master piece against DDP's master at its elements.
void expect_equals_ddp(const Layout l, int stage) {
  const std::vector<RankRun> ddp = run(zero_config(l.ranks, 0, l.dtype));
  const std::vector<RankRun> zero = run(zero_config(l.ranks, stage, l.dtype));
  int clipped = 0, skipped = 0;
  for (int r = 0; r < l.ranks; ++r) {
    const RankRun& a = ddp[std::size_t(r)];
    const RankRun& b = zero[std::size_t(r)];
    ASSERT_EQ(a.steps.size(), b.steps.size());
    for (std::size_t s = 0; s < a.steps.size(); ++s) {
      EXPECT_EQ(a.steps[s].loss, b.steps[s].loss) << "rank " << r << " step " << s;
      EXPECT_EQ(a.steps[s].skipped, b.steps[s].skipped) << "rank " << r << " step " << s;
      EXPECT_EQ(a.steps[s].loss_scale, b.steps[s].loss_scale) << "rank " << r << " step " << s;
      if (a.steps[s].skipped) {
        skipped += r == 0;
        continue;
      }
      EXPECT_EQ(a.steps[s].grad_norm, b.steps[s].grad_norm) << "rank " << r << " step " << s;
      EXPECT_EQ(a.steps[s].clip_coef, b.steps[s].clip_coef) << "rank " << r << " step " << s;
      clipped += r == 0 && a.steps[s].clip_coef < 1.0;
    }
    if (stage < 3) {
      EXPECT_EQ(a.weights, b.weights) << "rank " << r << ": working copies differ";
    } else {
      // ZeRO-3 holds only its shard of the working copy: DDP's bytes at those elements.
      ASSERT_EQ(b.shard_weights.size(), b.pieces.size());
      const std::size_t e = dtype_size(l.dtype);
      for (std::size_t i = 0; i < b.pieces.size(); ++i) {
        const auto at = static_cast<std::size_t>(b.pieces[i].flat) * e;
        const std::vector<unsigned char> want(a.weights.begin() + std::ptrdiff_t(at),
                                              a.weights.begin() +
                                                  std::ptrdiff_t(at + b.shard_weights[i].size()));
        EXPECT_EQ(b.shard_weights[i], want) << "rank " << r << " piece " << i;
      }
    }
  }
  EXPECT_GE(clipped, 5) << "clipping must be active";
  if (l.dtype == DType::kF16) {
    EXPECT_GE(skipped, 1) << "the scaler must skip a step";
  }
  // The masters too: each piece a rank steps equals DDP's master at the same flat elements.
  for (int r = 0; r < l.ranks; ++r) {
    const auto& pieces = zero[std::size_t(r)].pieces;
    ASSERT_FALSE(pieces.empty());
    ASSERT_EQ(pieces.size(), zero[std::size_t(r)].masters.size());
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const std::vector<float>& full = ddp[std::size_t(r)].masters[pieces[i].entry];
      const std::vector<float>& mine = zero[std::size_t(r)].masters[i];
      ASSERT_EQ(mine.size(), std::size_t(pieces[i].count));
      EXPECT_EQ(0, std::memcmp(mine.data(), full.data() + pieces[i].entry_offset,
                               mine.size() * sizeof(float)))
          << "rank " << r << " piece " << i;
    }
  }
}

class ZeroStage1Equals : public ::testing::TestWithParam<Layout> {};
class ZeroStage2Equals : public ::testing::TestWithParam<Layout> {};
class ZeroStage3Equals : public ::testing::TestWithParam<Layout> {};

TEST_P(ZeroStage1Equals, DdpBitForBitWithClippingAndTheScaler) {
  expect_equals_ddp(GetParam(), 1);
}
TEST_P(ZeroStage2Equals, DdpBitForBitWithClippingAndTheScaler) {
  expect_equals_ddp(GetParam(), 2);
}
TEST_P(ZeroStage3Equals, DdpBitForBitWithClippingAndTheScaler) {
  expect_equals_ddp(GetParam(), 3);
}

const auto kLayouts =
    ::testing::Values(Layout{2, DType::kF32}, Layout{4, DType::kF32}, Layout{2, DType::kBF16},
                      Layout{4, DType::kBF16}, Layout{2, DType::kF16}, Layout{4, DType::kF16});
std::string layout_name(const ::testing::TestParamInfo<Layout>& p) {
  return std::string(dtype_name(p.param.dtype)) + "_N" + std::to_string(p.param.ranks);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ZeroStage1Equals, kLayouts, layout_name);
INSTANTIATE_TEST_SUITE_P(Layouts, ZeroStage2Equals, kLayouts, layout_name);
INSTANTIATE_TEST_SUITE_P(Layouts, ZeroStage3Equals, kLayouts, layout_name);

TEST(ZeroStage1, EachRankHoldsItsShardOfTheMastersAndMoments) {
  for (int n : {2, 4}) {
    const TrainerConfig c = zero_config(n, 1, DType::kBF16);
    const std::vector<RankRun> ddp = run(zero_config(n, 0, DType::kBF16));
    const std::vector<RankRun> zero = run(c);
    ParamRegistry reg = make_gpt2_registry(c.model);
    reg.allocate(DType::kBF16);
    const std::size_t cap = static_cast<std::size_t>(c.bucket_mb * 1024.0 * 1024.0);
    const auto master = static_cast<std::size_t>(MemCategory::kMasterParams);
    const auto moments = static_cast<std::size_t>(MemCategory::kOptimizerState);
    const auto params = static_cast<std::size_t>(MemCategory::kParameters);
    for (int r = 0; r < n; ++r) {
      const ch05::ZeroPartition part(reg.entries(), DType::kBF16, cap, n, r);
      const auto owned = static_cast<std::size_t>(part.owned_elements(r));
      const auto p = static_cast<std::size_t>(reg.numel());
      EXPECT_EQ(ddp[std::size_t(r)].mem[master], 4 * p);
      EXPECT_EQ(zero[std::size_t(r)].mem[master], 4 * owned);  // 4P/N
      EXPECT_EQ(ddp[std::size_t(r)].mem[moments], 8 * p);
      EXPECT_EQ(zero[std::size_t(r)].mem[moments], 8 * owned);  // 8P/N
      EXPECT_EQ(zero[std::size_t(r)].mem[params], 2 * p);       // the whole 16-bit model
    }
  }
}

// mixpar-mem's model_states (chapter 3's calculator) against rank 0's ledger after a real run
// with one bucket (rank 0 then owns ceil(P/N) elements, the calculator's shard): parameters,
// masters and moments to the byte; the ledger's gradients add the FP32 copy unscaling needs,
// 4 bytes per element the optimizer steps (P under DDP, the shard under ZeRO-1 and 2; ZeRO-2's
// 16-bit gradient shard is rank 0's padded share of the one bucket, ceil(P/N)).
TEST(ZeroStage1, MixparMemAgreesWithTheLedger) {
  for (int stage : {0, 1, 2, 3}) {
    for (int n : {2, 4}) {
      TrainerConfig c = zero_config(n, stage, DType::kBF16);
      c.bucket_mb = 25;
      const RankRun r = run(c)[0];
      ParamRegistry reg = make_gpt2_registry(c.model);
      const mem::ModelStates s = mem::model_states(reg.numel(), mem::Precision::kBf16,
                                                   mem::Optimizer::kAdamW, stage, n);
      const std::int64_t ceil_shard = (reg.numel() + n - 1) / n;
      // ZeRO-3 pads each unit (one bucket per block): rank 0's shard is P'/N, which is the
      // calculator's ceil(P/N) plus `pad` elements (fewer than one per unit).
      const std::int64_t pad = stage == 3 ? r.padded / n - ceil_shard : 0;
      const std::int64_t stepped = stage == 0 ? reg.numel() : ceil_shard + pad;
      auto at = [&](MemCategory k) {
        return static_cast<std::int64_t>(r.mem[static_cast<std::size_t>(k)]);
      };
      SCOPED_TRACE("stage " + std::to_string(stage) + ", N = " + std::to_string(n));
      EXPECT_EQ(at(MemCategory::kParameters), s.parameters + 2 * pad);
      EXPECT_EQ(at(MemCategory::kMasterParams), s.master_params + 4 * pad);
      EXPECT_EQ(at(MemCategory::kOptimizerState), s.optimizer_state + 8 * pad);
      EXPECT_EQ(at(MemCategory::kGradients), s.gradients + 2 * pad + 4 * stepped);
      if (stage == 3) {
        EXPECT_GE(pad, 0);
        EXPECT_LT(pad, c.model.n_layer + 2);
      }
    }
  }
}

TEST(ZeroStage1, SendsTheGradientsAndTheParametersOnceEach) {
  for (int stage : {1, 2}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (int n : {2, 4}) {
        SCOPED_TRACE("stage " + std::to_string(stage) + ", N = " + std::to_string(n));
        const TrainerConfig c = zero_config(n, stage, dtype);
        const std::vector<RankRun> zero = run(c);
        ParamRegistry reg = make_gpt2_registry(c.model);
        reg.allocate(dtype);
        const ch05::ZeroPartition part(reg.entries(), dtype,
                                       static_cast<std::size_t>(c.bucket_mb * 1024.0 * 1024.0), n,
                                       0);
        const auto padded = static_cast<std::size_t>(part.padded_elements());
        const std::size_t steps = static_cast<std::size_t>(c.steps);
        for (int r = 0; r < n; ++r) {
          const RankRun& z = zero[std::size_t(r)];
          // Gradients reduce-scattered in FP32 (chapter 4's staging), parameters all-gathered in
          // the working dtype: (N-1)/N of the padded buffer each, every step.
          EXPECT_EQ(z.reduce_scatter_bytes, steps * padded / std::size_t(n) * (n - 1) * 4);
          // And the replica check at the start, a control message: one 8-byte hash to each
          // other rank.
          EXPECT_EQ(z.all_gather_bytes,
                    steps * padded / std::size_t(n) * (n - 1) * dtype_size(dtype));
          EXPECT_EQ(z.control_gather_bytes, 8 * std::size_t(n - 1));
          EXPECT_LT(padded - reg.numel(), part.buckets().size() * std::size_t(n));
        }
      }
    }
  }
}

// ZeRO-2's bill between steps, from each rank's ledger: the gradients are this rank's padded
// shard in the working dtype (P'/N) plus the FP32 copy of the owned elements the optimizer
// steps (4o); chapter 4's FP32 staging (4P under stages 0 and 1) and ZeRO's collective scratch
// exist only while a collective uses them: no communication buffer is held between steps.
// Masters, moments and parameters are stage 1's.
TEST(ZeroStage2, EachRankHoldsItsShardOfTheGradients) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int n : {2, 4}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", N = " + std::to_string(n));
      const TrainerConfig c = zero_config(n, 2, dtype);
      const std::vector<RankRun> one = run(zero_config(n, 1, dtype));
      const std::vector<RankRun> two = run(c);
      ParamRegistry reg = make_gpt2_registry(c.model);
      reg.allocate(dtype);
      const std::size_t cap = static_cast<std::size_t>(c.bucket_mb * 1024.0 * 1024.0);
      const auto e = dtype_size(dtype);
      const auto p = static_cast<std::size_t>(reg.numel());
      auto at = [](const RankRun& r, MemCategory k) { return r.mem[static_cast<std::size_t>(k)]; };
      for (int r = 0; r < n; ++r) {
        const ch05::ZeroPartition part(reg.entries(), dtype, cap, n, r);
        const auto owned = static_cast<std::size_t>(part.owned_elements(r));
        const auto shard = static_cast<std::size_t>(part.padded_elements()) / std::size_t(n);
        const RankRun& a = one[std::size_t(r)];
        const RankRun& b = two[std::size_t(r)];
        // fp32: the optimizer steps the FP32 gradients themselves, no copy.
        const std::size_t copy = dtype == DType::kF32 ? 0 : 4 * owned;
        EXPECT_EQ(at(a, MemCategory::kGradients), e * p + copy) << "rank " << r;
        EXPECT_EQ(at(b, MemCategory::kGradients), e * shard + copy) << "rank " << r;
        EXPECT_EQ(at(b, MemCategory::kMasterParams), at(a, MemCategory::kMasterParams));
        EXPECT_EQ(at(b, MemCategory::kOptimizerState), at(a, MemCategory::kOptimizerState));
        EXPECT_EQ(at(b, MemCategory::kParameters), e * p);
        // Stage 1 keeps chapter 4's staging (4 bytes a parameter for 16-bit gradients) and its
        // collective scratch; stage 2 holds none of it between steps.
        EXPECT_GT(at(a, MemCategory::kCommBuffers), 0u) << "rank " << r;
        EXPECT_EQ(at(b, MemCategory::kCommBuffers), 0u) << "rank " << r;
      }
    }
  }
}

// Between steps the registry's full gradient buffer is released: a kernel reading it gets a
// named error instead of stale values; the next step brings it back and trains on.
TEST(ZeroStage2, TheFullGradientIsReleasedBetweenSteps) {
  const TrainerConfig c = zero_config(2, 2, DType::kBF16);
  const TrainingData data = random_data(4096);
  std::vector<std::string> errors(2);
  std::vector<int> resident(2, -1);
  test::train_on_each_rank(c, data, [&](Trainer& t, int rank) {
    t.train_step();
    const Tensor& full = t.model().registry().flat_grads();
    resident[std::size_t(rank)] = full.resident();
    try {
      (void)full.data();
    } catch (const std::logic_error& e) {
      errors[std::size_t(rank)] = e.what();
    }
    EXPECT_TRUE(std::isfinite(t.train_step().loss));
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(resident[std::size_t(r)], 0) << "rank " << r;
    EXPECT_NE(errors[std::size_t(r)].find("released by ZeRO-2"), std::string::npos)
        << errors[std::size_t(r)];
  }
}

TEST(ZeroStage1, BucketsAreReduceScatteredWhileBackwardRuns) {
  const TrainerConfig c = zero_config(2, 1, DType::kBF16);
  const TrainingData data = random_data(4096);
  std::vector<std::size_t> during(2), buckets(2);
  test::train_on_each_rank(c, data, [&](Trainer& t, int rank) {
    t.train_step();
    const auto* z = dynamic_cast<const ch05::ZeroStage1*>(&t.grad_sync());
    ASSERT_NE(z, nullptr);
    during[std::size_t(rank)] = z->buckets_sent_during_backward();
    buckets[std::size_t(rank)] = z->partition().buckets().size();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_GE(buckets[std::size_t(r)], 4u);
    // Every bucket but the last (wte and wpe, final after the embedding's backward) leaves
    // before backward returns.
    EXPECT_GE(during[std::size_t(r)], buckets[std::size_t(r)] - 2) << "rank " << r;
  }
}

TEST(ZeroStage1, OneReplicaIsStageZero) {
  TrainerConfig c = zero_config(1, 1, DType::kBF16);
  TrainerConfig d = zero_config(1, 0, DType::kBF16);
  const TrainingData data = random_data(4096);
  Trainer a(c, data), b(d, data);
  for (int s = 0; s < 4; ++s) EXPECT_EQ(a.train_step().loss, b.train_step().loss);
  EXPECT_EQ(test::bytes_of(a.model().registry().flat_params()),
            test::bytes_of(b.model().registry().flat_params()));
}

// ZeRO-3's bill, from each rank's ledger. Between steps: its shard of the working copy (eP'/N,
// P' padded per unit), of the gradients (eP'/N) and the FP32 copy (4o), the masters (4o) and
// the moments (8o), and no gathered block. During a step the parameters' peak is the shard plus
// the most gathered buffers one pass holds at once: the computing unit and the `prefetch`
// units after it (zero3_inflight_max, from the units' padded sizes).
TEST(ZeroStage3, EachRankHoldsItsShardOfEverythingAndTheBlocksInFlight) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int n : {2, 4}) {
      for (int prefetch : {0, 1, 2}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + ", N = " + std::to_string(n) +
                     ", prefetch " + std::to_string(prefetch));
        TrainerConfig c = zero_config(n, 3, dtype);
        c.zero3_prefetch = prefetch;
        c.steps = 2;
        const std::vector<RankRun> runs = run(c);
        const auto e = dtype_size(dtype);
        auto at = [](const RankRun& r, MemCategory k) {
          return r.mem[static_cast<std::size_t>(k)];
        };
        for (int r = 0; r < n; ++r) {
          const RankRun& x = runs[std::size_t(r)];
          std::size_t owned = 0;
          for (const ch05::ShardPiece& p : x.pieces) owned += static_cast<std::size_t>(p.count);
          const auto shard = static_cast<std::size_t>(x.padded) / std::size_t(n);
          const std::size_t copy = dtype == DType::kF32 ? 0 : 4 * owned;
          EXPECT_EQ(at(x, MemCategory::kParameters), e * shard) << "rank " << r;
          EXPECT_EQ(at(x, MemCategory::kGradients), e * shard + copy) << "rank " << r;
          EXPECT_EQ(at(x, MemCategory::kMasterParams), dtype == DType::kF32 ? 0 : 4 * owned);
          EXPECT_EQ(at(x, MemCategory::kOptimizerState), 8 * owned);
          EXPECT_EQ(at(x, MemCategory::kCommBuffers), 0u) << "rank " << r;
          EXPECT_EQ(x.gathered_between_steps, 0u);
          EXPECT_EQ(x.params_peak, e * shard + x.inflight_max) << "rank " << r;
        }
      }
    }
  }
}

// Per step and rank, from the communicators: the gradients reduce-scattered once in FP32 over
// dp (4 (N-1)/N P'), and the parameters all-gathered in the working dtype on the gather group
// at every micro-batch: the forward gathers every unit (the tied wte and wpe twice: for the
// embedding and for the head), the backward every unit but the embedding (its backward reads
// no weight): (N-1)/N e (2P' + W') per micro-batch, W' the wte-and-wpe unit. Nothing is
// all-gathered after the step (over dp only the replica check's 8-byte hash at the start, a
// control message: all_gather_bytes).
TEST(ZeroStage3, SendsTheParametersTwiceAMicroBatchAndTheGradientsOnce) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int n : {2, 4}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", N = " + std::to_string(n));
      const TrainerConfig c = zero_config(n, 3, dtype);
      const std::vector<RankRun> runs = run(c);
      const auto steps = static_cast<std::size_t>(c.steps);
      const auto m = static_cast<std::size_t>(c.grad_accum);
      for (int r = 0; r < n; ++r) {
        const RankRun& z = runs[std::size_t(r)];
        const auto padded = static_cast<std::size_t>(z.padded);
        const auto w = static_cast<std::size_t>(z.wte_padded);
        const auto k = std::size_t(n - 1), nn = std::size_t(n);
        EXPECT_EQ(z.reduce_scatter_bytes, steps * padded / nn * k * 4);
        EXPECT_EQ(z.param_gather_bytes,
                  steps * m * (2 * padded + w) / nn * k * dtype_size(dtype));
        EXPECT_EQ(z.all_gather_bytes, 0u);
        EXPECT_EQ(z.control_gather_bytes, 8 * k);
      }
    }
  }
}

// prefetch N starts the gathers of the next N units of a pass while one computes: with 1, every
// unit of a pass but its first (the embedding's forward, the head's backward) was gathered
// ahead, and the bits are those of no prefetch.
TEST(ZeroStage3, PrefetchGathersAheadAndChangesNoBit) {
  TrainerConfig c = zero_config(2, 3, DType::kBF16);
  c.steps = 3;
  c.zero3_prefetch = 0;
  const std::vector<RankRun> off = run(c);
  c.zero3_prefetch = 1;
  const std::vector<RankRun> on = run(c);
  c.zero3_prefetch = 3;
  const std::vector<RankRun> deep = run(c);
  const auto L = c.model.n_layer;
  const auto passes = c.steps * c.grad_accum;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(off[std::size_t(r)].prefetched, 0);
    // forward: blocks 0 .. L-1 and the head ahead; backward: blocks L-1 .. 0.
    EXPECT_EQ(on[std::size_t(r)].prefetched, passes * ((L + 1) + L));
    for (std::size_t s = 0; s < off[0].steps.size(); ++s) {
      EXPECT_EQ(off[std::size_t(r)].steps[s].loss, on[std::size_t(r)].steps[s].loss);
      EXPECT_EQ(off[std::size_t(r)].steps[s].grad_norm, deep[std::size_t(r)].steps[s].grad_norm);
    }
    EXPECT_EQ(off[std::size_t(r)].shard_weights, on[std::size_t(r)].shard_weights);
    EXPECT_EQ(off[std::size_t(r)].shard_weights, deep[std::size_t(r)].shard_weights);
  }
}

// The reduce-scatters leave unit by unit while the backward runs (on ZeRO-3's communication
// thread, after the gathers queued before them): every bucket is queued before finish(), the
// last, wte-and-wpe's, by the embedding's backward itself.
TEST(ZeroStage3, UnitsAreReduceScatteredWhileBackwardRuns) {
  const TrainerConfig c = zero_config(2, 3, DType::kBF16);
  const TrainingData data = random_data(4096);
  std::vector<std::size_t> during(2), buckets(2);
  test::train_on_each_rank(c, data, [&](Trainer& t, int rank) {
    t.train_step();
    const auto* z = dynamic_cast<const ch05::ZeroStage3*>(&t.grad_sync());
    ASSERT_NE(z, nullptr);
    during[std::size_t(rank)] = z->reduced_during_backward();
    buckets[std::size_t(rank)] = z->partition().buckets().size();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(buckets[std::size_t(r)], std::size_t(c.model.n_layer + 2));
    EXPECT_EQ(during[std::size_t(r)], buckets[std::size_t(r)]) << "rank " << r;
  }
}

// Between steps every block's parameters are released: reading one is a named error.
TEST(ZeroStage3, AParameterReadOutsideItsUnitIsANamedError) {
  const TrainerConfig c = zero_config(2, 3, DType::kBF16);
  const TrainingData data = random_data(4096);
  std::vector<std::string> errors(2);
  test::train_on_each_rank(c, data, [&](Trainer& t, int rank) {
    t.train_step();
    try {
      (void)t.model().param("h.1.attn.c_attn.weight").data();
    } catch (const std::logic_error& e) {
      errors[std::size_t(rank)] = e.what();
    }
    EXPECT_TRUE(std::isfinite(t.train_step().loss));
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("tensor used while released: the parameters of the bucket starting at "
                     "h.1.ln_1.weight, released by ZeRO-3"),
              std::string::npos)
        << e;
  }
}

TEST(ZeroStage3, OneReplicaIsStageZero) {
  TrainerConfig c = zero_config(1, 3, DType::kBF16);
  TrainerConfig d = zero_config(1, 0, DType::kBF16);
  const TrainingData data = random_data(4096);
  Trainer a(c, data), b(d, data);
  for (int s = 0; s < 4; ++s) EXPECT_EQ(a.train_step().loss, b.train_step().loss);
  EXPECT_EQ(test::bytes_of(a.model().registry().flat_params()),
            test::bytes_of(b.model().registry().flat_params()));
}

TEST(ZeroStage1, BadStagesAreInputErrors) {
  TrainerConfig c = zero_config(2, 4, DType::kF32);
  EXPECT_NE(test::input_error_of([&] { validate(c); }).find("--zero-stage 4"), std::string::npos);
  c.zero_stage = 3;
  // Over tensor-parallel shards ZeRO-3 runs (zero_over_tp_test.cpp); with pipelines of dp > 1
  // replicas DeepSpeed's refusal, with or without tp.
  c.ranks = 4;
  c.tp = 2;
  EXPECT_NO_THROW(validate(c));
  c.tp = 1;
  c.pp = 2;
  EXPECT_NE(test::input_error_of([&] { validate(c); }).find("DeepSpeed refuses"),
            std::string::npos);
  c.ranks = 8;
  c.tp = 2;
  EXPECT_NE(test::input_error_of([&] { validate(c); }).find("DeepSpeed refuses"),
            std::string::npos);
}

}  // namespace
}  // namespace mixpar::ch08
