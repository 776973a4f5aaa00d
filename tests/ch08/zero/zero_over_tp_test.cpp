// ZeRO-2 and ZeRO-3 over tensor-parallel shards, in chapter 8's trainer: on a tp 2 x dp 2 grid
// the dp group of each tp rank partitions that rank's own shards (its held elements), reduce-
// scatters its gradient buckets and, under stage 3, gathers its parameter shards block by block,
// while the block's Megatron all-reduces (and sequence parallel's gathers) stay on the tp group.
// For fp32, bf16 and fp16 with the scaler, 10 steps with clipping active: every step's loss,
// skip, scale, norm and clip coefficient, the working copy and the masters have the bits of
// stage 0 (DDP) on the same grid. With dp 1 every stage is stage 0. Each rank's ledger holds its
// tp shard over dp (plus the blocks in flight under stage 3), as mixpar-mem --tp 2 bills it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "../ch08_test_util.h"
#include "../train_gpt_cli.h"
#include "zero3_inflight.h"
#include "ch03_master_weights/memory_calculator.h"
#include "ch05_zero/zero_stage3.h"
#include "trainer.h"
#include "util/json.h"

#ifndef MIXPAR_TRAIN_GPT_PATH
#error "MIXPAR_TRAIN_GPT_PATH must name the train_gpt binary"
#endif

namespace mixpar::ch08 {
namespace {

using test::random_data;
using test::tiny_config;

// tp x dp ranks, 2 micro-batches, about 4 KiB buckets (parameters cut between owners), a clip
// below the tiny model's norms (every step clips), fp16 from a scale that overflows.
TrainerConfig tp_zero_config(int tp, int dp, int stage, DType dtype) {
  TrainerConfig c = tiny_config();
  c.data_order = DataOrder::kSequential;
  c.steps = 10;
  c.schedule = LrSchedule{LrScheduleKind::kCosine, 1e-2, 1e-3, 2, 10};
  c.tp = tp;
  c.dp = dp;
  c.ranks = tp * dp;
  c.threads = 1;
  c.dtype = dtype;
  c.zero_stage = stage;
  c.grad_clip = 0.05;
  c.bucket_mb = 0.004;
  c.grad_accum = 2;
  if (dtype == DType::kF16) c.loss_scale = 524288.0;  // 2^19 overflows: skips, halvings
  return c;
}

struct RankRun {
  std::vector<StepStats> steps;
  std::string sync;                    // the gradient sync's describe()
  std::vector<unsigned char> weights;  // the working copy after the last step (not ZeRO-3)
  std::vector<std::vector<float>> masters;  // the FP32 tensors this rank's optimizer steps
  std::vector<ch05::ShardPiece> pieces;     // ZeRO: this rank's pieces
  std::vector<std::vector<unsigned char>> shard_weights;  // ZeRO-3: its shard at each piece
  std::vector<std::size_t> mem;             // by ledger category, after the last step
  std::size_t params_peak = 0;              // kParameters' peak during the steps
  std::int64_t padded = 0;                  // ZeRO: the partition's padded elements
  std::size_t buckets = 0;                  // ZeRO: the partition's buckets
  std::size_t inflight_max = 0;             // ZeRO-3: the most gathered bytes a pass holds
  std::size_t gathered_between_steps = 0;   // ZeRO-3: gathered bytes after the last step
  std::size_t dp_reduce_scatter_bytes = 0;  // over the dp group
  std::size_t tp_all_reduce_bytes = 0;      // over the tp group
};

std::vector<RankRun> run(const TrainerConfig& c) {
  const TrainingData data = random_data(4096);
  return test::train_on_each_rank(c, data, [&](Trainer& t, int rank) {
    RankRun r;
    r.sync = t.grad_sync().describe();
    current_ledger().reset_peaks();
    while (t.step() < c.steps) r.steps.push_back(t.train_step());
    r.params_peak = current_ledger().peak(MemCategory::kParameters);
    const auto* zero = dynamic_cast<const ch05::ZeroStage1*>(&t.grad_sync());
    const auto* z3 = dynamic_cast<const ch05::ZeroStage3*>(&t.grad_sync());
    if (zero) {
      r.pieces = zero->partition().pieces();
      r.padded = zero->partition().padded_elements();
      r.buckets = zero->partition().buckets().size();
    }
    if (z3) {
      for (const Tensor& p : z3->shard_params()) r.shard_weights.push_back(test::bytes_of(p));
      r.inflight_max = test::zero3_inflight_max(*z3, c.model.n_layer, z3->prefetch(), c.dtype);
      r.gathered_between_steps = z3->gathered_bytes();
    } else {
      r.weights = test::bytes_of(t.model().registry().flat_params());
    }
    const RankMetrics m = t.gather_rank_metrics()[static_cast<std::size_t>(rank)];
    r.mem.assign(m.mem.begin(), m.mem.end());
    r.dp_reduce_scatter_bytes = t.grid()->dp().traffic().totals("reduce_scatter").bytes_sent;
    if (t.dp_lane()) {  // the buckets overlap backward over dp's dup
      r.dp_reduce_scatter_bytes += t.dp_lane()->traffic().totals("reduce_scatter").bytes_sent;
    }
    r.tp_all_reduce_bytes = t.grid()->tp().traffic().totals("all_reduce").bytes_sent;
    for (const Tensor& p : t.optimizer().stepped_params()) r.masters.push_back(p.to_floats());
    return r;
  });
}

// `zero` against `ddp` (stage 0 on the same grid): every step's loss, skip, scale, norm and
// clip coefficient on every rank; the working copy (ZeRO-3: its shard, at each piece's flat
// elements of the same tp rank's registry); and each master piece against DDP's master there.
void expect_same_bits(const std::vector<RankRun>& ddp, const std::vector<RankRun>& zero,
                      int stage, DType dtype) {
  ASSERT_EQ(ddp.size(), zero.size());
  int clipped = 0, skipped = 0;
  for (std::size_t r = 0; r < ddp.size(); ++r) {
    const RankRun& a = ddp[r];
    const RankRun& b = zero[r];
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
      ASSERT_EQ(b.shard_weights.size(), b.pieces.size());
      const std::size_t e = dtype_size(dtype);
      for (std::size_t i = 0; i < b.pieces.size(); ++i) {
        const auto at = static_cast<std::ptrdiff_t>(std::size_t(b.pieces[i].flat) * e);
        const std::vector<unsigned char> want(
            a.weights.begin() + at,
            a.weights.begin() + at + std::ptrdiff_t(b.shard_weights[i].size()));
        EXPECT_EQ(b.shard_weights[i], want) << "rank " << r << " piece " << i;
      }
    }
    if (stage == 0) continue;
    ASSERT_FALSE(b.pieces.empty());
    ASSERT_EQ(b.pieces.size(), b.masters.size());
    for (std::size_t i = 0; i < b.pieces.size(); ++i) {
      const std::vector<float>& full = a.masters[b.pieces[i].entry];
      ASSERT_EQ(b.masters[i].size(), std::size_t(b.pieces[i].count));
      EXPECT_EQ(0, std::memcmp(b.masters[i].data(), full.data() + b.pieces[i].entry_offset,
                               b.masters[i].size() * sizeof(float)))
          << "rank " << r << " piece " << i;
    }
  }
  EXPECT_GE(clipped, 5) << "clipping must be active";
  if (dtype == DType::kF16) {
    EXPECT_GE(skipped, 1) << "the scaler must skip a step";
  }
}

class ZeroOverTp : public ::testing::TestWithParam<DType> {};

// tp 2 x dp 2: stages 1, 2 and 3 give stage 0's bits. The grid's tp collectives really run
// (the tp group carries Megatron's all-reduces), and stages 2 and 3 reduce-scatter each tp
// rank's own gradients over its dp group.
TEST_P(ZeroOverTp, Tp2Dp2StagesTwoAndThreeEqualStageZeroBitForBit) {
  const DType dtype = GetParam();
  const std::vector<RankRun> ddp = run(tp_zero_config(2, 2, 0, dtype));
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const std::vector<RankRun> zero = run(tp_zero_config(2, 2, stage, dtype));
    expect_same_bits(ddp, zero, stage, dtype);
    for (const RankRun& r : zero) {
      EXPECT_NE(r.sync.find("ZeRO stage " + std::to_string(stage)), std::string::npos) << r.sync;
      EXPECT_GT(r.tp_all_reduce_bytes, 0u);
      EXPECT_GT(r.dp_reduce_scatter_bytes, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ZeroOverTp,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& p) {
                           return std::string(dtype_name(p.param));
                         });

// Sequence parallel's all-gathers and reduce-scatters on the tp group between ZeRO-3's
// parameter gathers on the dp group: still stage 0's bits, with recompute too.
TEST(ZeroOverTp, SequenceParallelAndRecomputeUnderZeroThreeEqualStageZero) {
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recompute" : "no recompute");
    TrainerConfig c = tp_zero_config(2, 2, 0, DType::kBF16);
    c.sequence_parallel = true;
    c.recompute = recompute;
    const std::vector<RankRun> ddp = run(c);
    c.zero_stage = 3;
    expect_same_bits(ddp, run(c), 3, DType::kBF16);
  }
}

// With dp 1 there is nothing to shard: stages 2 and 3 on tp 2 (and on pp 2) run as stage 0,
// bit for bit, and the run says so.
TEST(ZeroOverTp, WithDpOneEveryStageIsStageZero) {
  for (int pp : {1, 2}) {
    TrainerConfig c = tp_zero_config(2, 1, 0, DType::kBF16);
    if (pp == 2) {
      c.tp = 1;
      c.pp = 2;
      c.pipeline_schedule = "1f1b";
    }
    SCOPED_TRACE("tp " + std::to_string(c.tp) + " x pp " + std::to_string(c.pp));
    const std::vector<RankRun> zero0 = run(c);
    for (int stage : {2, 3}) {
      c.zero_stage = stage;
      EXPECT_NO_THROW(validate(c));
      const std::vector<RankRun> z = run(c);
      expect_same_bits(zero0, z, 0, DType::kBF16);
      for (const RankRun& r : z) {
        EXPECT_EQ(r.sync, "ZeRO-" + std::to_string(stage) +
                              " with dp 1: nothing to shard, runs as stage 0 (one replica: "
                              "nothing to synchronise)");
      }
    }
  }
}

// ZeRO-2 and 3's bill on tp 2 x dp 2, from each rank's ledger after the last step: P_t, the
// elements of the rank's tp shard (its registry), padded to P'_t by the partition; the
// gradients are e P'_t / dp (+ the FP32 copy of the o owned elements), ZeRO-3's parameters
// e P'_t / dp between steps and at most that plus the units in flight during one; no gathered
// block and no collective scratch held between steps.
TEST(ZeroOverTp, EachRankHoldsItsTpShardOverDpAndTheBlocksInFlight) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int stage : {2, 3}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", stage " + std::to_string(stage));
      TrainerConfig c = tp_zero_config(2, 2, stage, dtype);
      c.steps = 2;
      const std::vector<RankRun> runs = run(c);
      const auto e = dtype_size(dtype);
      const ParamRegistry whole = make_gpt2_registry(c.model);
      for (int r = 0; r < c.ranks; ++r) {
        const RankRun& x = runs[std::size_t(r)];
        const ParamRegistry shard = make_gpt2_registry(c.model, GptStage{}, TensorShard{r % 2, 2});
        const auto p_t = static_cast<std::size_t>(shard.numel());
        ASSERT_LT(p_t, static_cast<std::size_t>(whole.numel()));
        const auto padded = static_cast<std::size_t>(x.padded);
        ASSERT_GE(padded, p_t);
        EXPECT_LT(padded - p_t, 2 * x.buckets) << "rank " << r;  // under dp per bucket
        if (stage == 3) {
          EXPECT_EQ(x.buckets, std::size_t(c.model.n_layer + 2));  // one bucket a unit
        }
        std::size_t owned = 0;
        for (const ch05::ShardPiece& p : x.pieces) owned += static_cast<std::size_t>(p.count);
        const std::size_t share = padded / 2;
        const std::size_t copy = dtype == DType::kF32 ? 0 : 4 * owned;
        auto at = [&](MemCategory k) { return x.mem[static_cast<std::size_t>(k)]; };
        EXPECT_EQ(at(MemCategory::kGradients), e * share + copy) << "rank " << r;
        EXPECT_EQ(at(MemCategory::kMasterParams), dtype == DType::kF32 ? 0 : 4 * owned);
        EXPECT_EQ(at(MemCategory::kOptimizerState), 8 * owned) << "rank " << r;
        EXPECT_EQ(at(MemCategory::kCommBuffers), 0u) << "rank " << r;
        if (stage == 2) {
          EXPECT_EQ(at(MemCategory::kParameters), e * p_t) << "rank " << r;
        } else {
          EXPECT_EQ(at(MemCategory::kParameters), e * share) << "rank " << r;
          EXPECT_EQ(x.gathered_between_steps, 0u);
          EXPECT_EQ(x.params_peak, e * share + x.inflight_max) << "rank " << r;
        }
      }
    }
  }
}

// mixpar-mem --tp 2 --dp 2 --zero-stage K (chapter 3's calculator on the tiny model's shape)
// against rank 0's ledger after a run with one bucket: the device's slice is its tp shard's
// elements, and parameters, masters and moments agree to the byte (ZeRO-3 pads each unit,
// fewer than one element a unit per rank); the ledger's gradients add the FP32 copy unscaling
// needs (4 bytes per element the optimizer steps).
TEST(ZeroOverTp, MixparMemWithTpAgreesWithTheLedger) {
  for (int stage : {0, 1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    TrainerConfig c = tp_zero_config(2, 2, stage, DType::kBF16);
    c.bucket_mb = 25;
    c.steps = 2;
    const RankRun r = run(c)[0];
    mem::TrainingSetup setup;
    setup.shape = mem::GptShape{c.model.n_layer, c.model.n_embd, c.model.n_head,
                                c.model.vocab_size, c.seq, c.batch, c.model.n_positions};
    setup.precision = mem::Precision::kBf16;
    setup.layout.zero_stage = stage;
    setup.layout.dp = 2;
    setup.layout.tp = 2;
    const mem::MemoryBill bill = mem::compute_bill(setup);
    const std::int64_t p_t = make_gpt2_registry(c.model, GptStage{}, TensorShard{0, 2}).numel();
    EXPECT_EQ(bill.device_params, p_t);
    const std::int64_t ceil_shard = (p_t + 1) / 2;
    const std::int64_t pad = stage == 3 ? r.padded / 2 - ceil_shard : 0;
    const std::int64_t stepped = stage == 0 ? p_t : ceil_shard + pad;
    auto at = [&](MemCategory k) {
      return static_cast<std::int64_t>(r.mem[static_cast<std::size_t>(k)]);
    };
    const mem::ModelStates& s = bill.states;
    EXPECT_EQ(at(MemCategory::kParameters), s.parameters + 2 * pad);
    EXPECT_EQ(at(MemCategory::kMasterParams), s.master_params + 4 * pad);
    EXPECT_EQ(at(MemCategory::kOptimizerState), s.optimizer_state + 8 * pad);
    EXPECT_EQ(at(MemCategory::kGradients), s.gradients + 2 * pad + 4 * stepped);
    EXPECT_GE(pad, 0);
    EXPECT_LT(pad, c.model.n_layer + 2);
  }
}

// ---- train_gpt as a user runs it ----------------------------------------------------------

using test::CliRun;
using test::read_jsonl;
using test::run_shell;
using test::TempDir;
using test::train_gpt;

const std::string kRun =
    "--n-layer 2 --n-head 2 --n-embd 16 --seq 8 --batch 2 --threads 1 --steps 6 "
    "--data-order sequential --eval-every 0 --grad-clip 0.05 --bucket-mb 0.004 --dtype bf16 ";

// The JSONL numbers are shortest round-trip decimals: equal text, equal bits.
void expect_same_jsonl(const std::string& a, const std::string& b) {
  const std::vector<Json> x = read_jsonl(a), y = read_jsonl(b);
  ASSERT_EQ(x.size(), y.size());
  ASSERT_FALSE(x.empty());
  for (std::size_t i = 0; i < x.size(); ++i) {
    for (const char* key : {"loss", "grad_norm", "clip_coef"}) {
      EXPECT_EQ(x[i].at(key).as_double(), y[i].at(key).as_double()) << key << " step " << i + 1;
    }
  }
}

TEST(TrainGptZeroOverTp, Tp2Dp2StagesTwoAndThreeLogStageZerosLossesBitForBit) {
  TempDir d;
  const std::string grid = "--ranks 4 --tp 2 --dp 2 ";
  ASSERT_EQ(train_gpt(d, kRun + grid + "--log-jsonl " + d.file("z0.jsonl")).code, 0);
  for (const char* stage : {"2", "3"}) {
    const std::string log = d.file(std::string("z") + stage + ".jsonl");
    const CliRun r = train_gpt(d, kRun + grid + "--zero-stage " + stage + " --log-jsonl " + log);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find(std::string("ZeRO stage ") + stage), std::string::npos) << r.out;
    expect_same_jsonl(log, d.file("z0.jsonl"));
  }
}

#if defined(MIXPAR_MPIEXEC)
using test::mpirun_train_gpt;

// Four MPI processes on tp 2 x dp 2 at ZeRO-3: each process's compute thread runs the tp
// all-reduces while ZeRO-3's thread gathers over dp (MPI_THREAD_MULTIPLE); the threads run's
// losses, norms and clip coefficients, bit for bit.
TEST(TrainGptZeroOverTpMpi, FourProcessesAtZeroThreeLogTheThreadsRunBitForBit) {
  TempDir d;
  const std::string grid = "--tp 2 --dp 2 --zero-stage 3 ";
  const std::string local = d.file("local.jsonl"), mpi = d.file("mpi.jsonl");
  ASSERT_EQ(train_gpt(d, kRun + grid + "--ranks 4 --log-jsonl " + local).code, 0);
  const CliRun r = run_shell(d, mpirun_train_gpt(4) + kRun + grid + "--log-jsonl " + mpi);
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_jsonl(mpi, local);
}
#endif

}  // namespace
}  // namespace mixpar::ch08
