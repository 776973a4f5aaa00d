// Chapter 8's composition: data parallelism (DDP or ZeRO-1) x tensor x pipeline parallelism in
// one trainer. A 2 x 2 x 2 grid with ZeRO-1 and 1F1B trains like one device reading the same
// global batch (dp x B x m sequences, the same token windows); the gradient norm of step 1 is
// the same number on every layout of 8 ranks (count-once); and mpirun -np 8 logs what the
// threads log.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ch08_test_util.h"
#include "preflight.h"
#include "train_gpt_cli.h"
#include "trainer.h"

namespace mixpar::ch08 {
namespace {

using test::random_data;
using test::TempDir;
using test::tiny_config;

// Every rank's steps and rank 0's final FP32 weights (gathered from the grid).
struct GridRun {
  std::vector<std::vector<StepStats>> steps;  // by rank
  std::vector<std::vector<float>> weights;    // rank 0: by parameter, HF order
};

std::vector<std::vector<float>> weights_of(GptModel& m) {
  std::vector<std::vector<float>> out;
  for (const NamedTensor& p : m.parameters()) {
    Tensor f = Tensor::empty(p.tensor.shape(), DType::kF32);
    f.copy_from(p.tensor);
    const float* v = f.data_as<float>();
    out.emplace_back(v, v + f.numel());
  }
  return out;
}

GridRun run(const TrainerConfig& c, const TrainingData& data) {
  GridRun r;
  r.steps = test::train_on_each_rank(c, data, [&](Trainer& t, int rank) {
    std::vector<StepStats> mine;
    while (t.step() < c.steps) mine.push_back(t.train_step());
    if (c.ranks == 1) {
      r.weights = weights_of(t.model());  // one device: the model is whole
    } else {
      t.prepare_eval_model();  // collective: the whole model gathered on rank 0
      if (rank == 0) r.weights = weights_of(t.eval_model());
    }
    return mine;
  });
  return r;
}

// A grid of dp x tp x pp ranks, B rows per replica, m micro-batches per step.
TrainerConfig grid_config(int dp, int tp, int pp, std::int64_t batch, std::int64_t m) {
  TrainerConfig c = tiny_config();
  c.data_order = DataOrder::kSequential;
  c.batch = batch;
  c.grad_accum = m;
  c.threads = 1;
  c.dp = dp;
  c.tp = tp;
  c.pp = pp;
  c.ranks = dp * tp * pp;
  c.pipeline_schedule = "1f1b";
  return c;
}

// One device reading what the grid's replicas read together: batch dp x B, the same m.
TrainerConfig one_device_like(const TrainerConfig& grid) {
  TrainerConfig c = grid;
  c.batch = grid.batch * grid.dp;
  c.dp = c.tp = c.pp = c.ranks = 1;
  c.zero_stage = 0;
  return c;
}

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

// The tolerance, derived: in FP32 (unit roundoff u = 2^-24 = 6e-8) the grid and the device
// sum the same terms in other orders: the dp mean (2 terms), the row-parallel partial sums
// (tp = 2), the tied wte's two halves, and the gradient norm's squares by owner. Each
// reordering of a sum of k terms moves it by at most (k - 1) u relative, a few u per step.
// AdamW's update m / (sqrt(v) + eps) is scale-free, so a relative change of the gradient
// moves the update by about as much, and the weights' relative differences grow by at most
// that per step: after 20 steps a few x 20 x 6e-8 ~ 1e-5 on losses and norms (the bound
// chapter 4 states for its reordered sums). Single weights are looser: Adam divides by
// sqrt(v), so an element whose gradient is near the rounding level moves by up to lr per step
// in a direction the rounding picks. 1e-3 of each tensor's largest element (measured: 1.2e-4
// with ZeRO-1 and 1F1B, 1.9e-4 with DDP and AFAB, at lr 1e-2) still catches any real mistake
// (a shard stepped twice, a tied half lost, moves weights by lr, 1e-2).
constexpr double kLossTol = 1e-5, kNormTol = 1e-5, kWeightTol = 1e-3;

void expect_same_trajectory(const GridRun& grid, const GridRun& one, const std::string& what) {
  const auto& ref = one.steps[0];
  for (std::size_t r = 0; r < grid.steps.size(); ++r) {
    ASSERT_EQ(grid.steps[r].size(), ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i) {
      const std::string at = what + " rank " + std::to_string(r) + " step " + std::to_string(i + 1);
      EXPECT_LE(rel(grid.steps[r][i].loss, ref[i].loss), kLossTol)
          << at << ": " << grid.steps[r][i].loss << " vs " << ref[i].loss;
      EXPECT_LE(rel(grid.steps[r][i].grad_norm, ref[i].grad_norm), kNormTol)
          << at << ": " << grid.steps[r][i].grad_norm << " vs " << ref[i].grad_norm;
      // Every rank logs the same global numbers.
      EXPECT_EQ(grid.steps[r][i].loss, grid.steps[0][i].loss) << at;
      EXPECT_EQ(grid.steps[r][i].grad_norm, grid.steps[0][i].grad_norm) << at;
    }
  }
  ASSERT_EQ(grid.weights.size(), one.weights.size());
  // Per tensor: the largest difference against the tensor's largest value (a bias that
  // started at 0 has elements near 0, whose own relative difference says nothing).
  double worst = 0;
  for (std::size_t p = 0; p < one.weights.size(); ++p) {
    ASSERT_EQ(grid.weights[p].size(), one.weights[p].size()) << what << " parameter " << p;
    double diff = 0, scale = 0;
    for (std::size_t k = 0; k < one.weights[p].size(); ++k) {
      diff = std::max(diff, std::abs(double(grid.weights[p][k]) - one.weights[p][k]));
      scale = std::max(scale, std::abs(double(one.weights[p][k])));
    }
    worst = std::max(worst, diff / scale);
  }
  EXPECT_LE(worst, kWeightTol) << what << ": the weights after " << ref.size() << " steps";
  std::printf("%s: %zu steps, final loss %.6f vs %.6f on one device, weights within %.2e\n",
              what.c_str(), ref.size(), grid.steps[0].back().loss, ref.back().loss, worst);
}

TEST(Full3d, TwoByTwoByTwoZero1OneFOneBTrainsLikeOneDeviceWithTheGlobalBatchFor20Steps) {
  const TrainingData data = random_data(1 << 14);
  TrainerConfig c = grid_config(2, 2, 2, 2, 2);
  c.zero_stage = 1;
  c.steps = 20;
  c.schedule = LrSchedule{LrScheduleKind::kCosine, 1e-2, 1e-3, 2, 20};
  const GridRun one = run(one_device_like(c), data);
  expect_same_trajectory(run(c, data), one, "dp 2 x tp 2 x pp 2, ZeRO-1, 1F1B, m 2");
  // DDP and AFAB on the same grid: the sync and the schedule do not change the arithmetic.
  c.zero_stage = 0;
  c.pipeline_schedule = "afab";
  expect_same_trajectory(run(c, data), one, "dp 2 x tp 2 x pp 2, DDP, AFAB, m 2");
}

// The 16-bit precisions, recompute and accumulation on the 3-D grid: a bf16 or fp16 step
// rounds every activation to 8 or 11 significant bits, so the grid's reordered sums show in
// the third digit; what must hold is the first step (the same forward), then losses that stay
// within the precision's few ulps of one device's, and replicas that agree.
TEST(Full3d, SixteenBitRecomputeAndAccumulationComposeOnTheGrid) {
  const TrainingData data = random_data(1 << 14);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    TrainerConfig c = grid_config(2, 2, 2, 2, 3);
    c.zero_stage = 1;
    c.dtype = dtype;
    c.recompute = true;
    c.loss_scale = 1024;
    c.steps = 6;
    c.check_replicas_every = 1;
    const std::string what = std::string(dtype_name(dtype)) + " recompute m 3";
    const GridRun one = run(one_device_like(c), data);
    const GridRun grid = run(c, data);
    const double ulp = dtype == DType::kBF16 ? 0x1p-8 : 0x1p-11;
    for (std::size_t i = 0; i < one.steps[0].size(); ++i) {
      const StepStats& g = grid.steps[0][i];
      const StepStats& o = one.steps[0][i];
      EXPECT_EQ(g.skipped, o.skipped) << what << " step " << i + 1;
      EXPECT_LE(rel(g.loss, o.loss), 4 * ulp) << what << " step " << i + 1 << ": " << g.loss
                                              << " vs " << o.loss;
      for (const auto& rank : grid.steps) EXPECT_EQ(rank[i].loss, g.loss) << what;
    }
  }
}

// Count-once: each element of the gradient enters the norm exactly once whatever the layout
// (replicas, tp shards and replicated LayerNorms, the tied wte on two stages, ZeRO's shards),
// so step 1's norm is one number on every grid of 8 ranks with the same global batch.
TEST(Full3d, StepOneGradientNormIsTheSameOnEveryLayoutOfEightRanks) {
  const TrainingData data = random_data(1 << 14);
  TrainerConfig base = tiny_config();
  base.model = GptConfig{8, 8, 32, 8, 256};  // 8 heads for tp 8, 8 blocks for pp 8
  base.steps = 1;
  const std::int64_t global = 8;
  TrainerConfig single = grid_config(1, 1, 1, global, 2);
  single.model = base.model;
  single.steps = 1;
  const double ref = run(single, data).steps[0][0].grad_norm;
  std::printf("step-1 gradient norm, one device (batch %lld, m 2): %.9f\n",
              static_cast<long long>(global), ref);
  int layouts = 0;
  for (int dp : {1, 2, 4, 8}) {
    for (int tp : {1, 2, 4, 8}) {
      if (8 % (dp * tp) != 0) continue;
      const int pp = 8 / (dp * tp);
      for (int zero : {0, 1}) {
        if (zero == 1 && dp == 1) continue;
        TrainerConfig c = grid_config(dp, tp, pp, global / dp, 2);
        c.model = base.model;
        c.steps = 1;
        c.zero_stage = zero;
        const double norm = run(c, data).steps[0][0].grad_norm;
        std::printf("  dp %d x tp %d x pp %d, ZeRO-%d: %.9f (relative difference %.1e)\n", dp,
                    tp, pp, zero, norm, rel(norm, ref));
        EXPECT_LE(rel(norm, ref), 1e-6) << "dp " << dp << " tp " << tp << " pp " << pp;
        ++layouts;
      }
    }
  }
  EXPECT_EQ(layouts, 16);  // the 10 factorisations of 8, the 6 with dp > 1 also with ZeRO-1
}

// --dry-run prints the checklist of a 3-D layout and exits 0 having trained nothing; a budget
// the estimate exceeds, and a model larger than this machine's memory, are one line naming the
// bill, exit code 2, before any compute.
TEST(Full3dPreflight, DryRunPrintsTheChecklistAndOverBudgetIsOneLineWithTheBill) {
  TempDir d;
  const std::string grid = "--ranks 8 --dp 2 --tp 2 --pp 2 --zero-stage 1 --batch 4 ";
  const test::CliRun r = test::train_gpt(d, grid + "--dry-run");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* line :
       {"  ok  grid: dp 2 x tp 2 x pp 2 = 8 ranks | tp groups {0,1} {2,3} {4,5} {6,7} | dp groups "
        "{0,2} {1,3} {4,6} {5,7} | pp groups {0,4} {1,5} {2,6} {3,7}",
        "  ok  batch: global batch = dp 2 x B 4 x m 1 = 8 sequences x T 64 = 512 tokens per step",
        "  ok  pipeline: 1f1b pipeline: 2 stages x 1 micro-batches", "  ok  memory: per rank ",
        "  ok  traffic: ", "  ok  data: ", "dry run: nothing trained"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << "want '" << line << "' in:\n" << r.out;
  }
  EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << r.out;
  test::expect_one_line_error(d, grid + "--device-memory 1MiB",
                              "over --device-memory 1.00 MiB: parameters ");
  // About 10 TiB of model states: more than any machine this runs on has available.
  if (mem_available_bytes() >= 0) {
    test::expect_one_line_error(d, "--n-layer 48 --n-embd 32768 --n-head 64 --steps 1",
                                "on this machine needs ");
  }
}

#if defined(MIXPAR_MPIEXEC)
TEST(Full3dMpi, EightProcessesOnATwoByTwoByTwoGridLogWhatOneDeviceLogs) {
  TempDir d;
  const std::string common =
      "--n-layer 2 --n-head 2 --n-embd 16 --seq 8 --data-order sequential --steps 20 "
      "--warmup 2 --lr 0.01 --eval-every 0 --threads 1 --grad-accum 2 ";
  const std::string one = d.file("one.jsonl"), many = d.file("mpi.jsonl");
  ASSERT_EQ(test::train_gpt(d, common + "--batch 4 --log-jsonl " + one).code, 0);
  const test::CliRun r = test::run_shell(d, test::mpirun_train_gpt(8) + common +
                                                "--batch 2 --dp 2 --tp 2 --pp 2 --zero-stage 1 "
                                                "--schedule 1f1b --log-jsonl " + many);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("parallel: dp 2 x tp 2 x pp 2 grid over 8 ranks (MPI"), std::string::npos)
      << r.out;
  const std::vector<Json> a = test::read_jsonl(many), b = test::read_jsonl(one);
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  for (std::size_t i = 0; i < a.size(); ++i) {
    for (const char* key : {"loss", "grad_norm"}) {
      EXPECT_LE(rel(a[i].at(key).as_double(), b[i].at(key).as_double()), kLossTol)
          << key << " step " << i + 1;
    }
  }
}
#else
TEST(Full3dMpi, EightProcessesOnATwoByTwoByTwoGridLogWhatOneDeviceLogs) {
  GTEST_SKIP() << "this build has no MPI (install libopenmpi-dev and reconfigure)";
}
#endif

}  // namespace
}  // namespace mixpar::ch08
