// train_gpt --dtype fp8 with --tp: each rank casts its own shard of every split GEMM (chapter
// 6's column- and row-parallel layers through the FP8 seam, ch03_master_weights/fp8_linear.h)
// and every per-tensor amax is the max over the tp group, so each recipe at tp 2 (with and
// without sequence parallelism, and dp 2 x tp 2) follows one device; the ranks' scales are the
// whole tensors' (one device's, step 1); a delayed checkpoint written at tp 2 resumes at tp 1
// with the same scaling state; blockwise shards that split a 128-wide tile are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "../ch08_test_util.h"

namespace mixpar::ch08 {
namespace {

using test::random_data;
using test::TempDir;
using test::tiny_config;

// Blockwise needs n_embd / tp a multiple of 128 (its tiles must not straddle shards): 256 at
// tp 2, one block to keep the emulated GEMMs fast. The per-tensor recipes run the tiny model.
TrainerConfig fp8_config(fp8::Recipe r) {
  TrainerConfig c = tiny_config();
  if (r == fp8::Recipe::kBlockwise) c.model = GptConfig{1, 2, 256, 8, 256};
  c.dtype = DType::kBF16;
  c.fp8 = fp8::Fp8LinearConfig{r, 3, 0};
  c.threads = 1;
  c.data_order = DataOrder::kSequential;
  c.batch = 4;
  c.steps = 4;
  c.schedule = LrSchedule{LrScheduleKind::kCosine, 1e-2, 1e-3, 1, 4};
  return c;
}

TrainerConfig layout(TrainerConfig c, int dp, int tp, bool sp) {
  c.dp = dp;
  c.tp = tp;
  c.ranks = dp * tp;
  c.batch /= dp;
  c.sequence_parallel = sp;
  return c;
}

struct Fp8Run {
  std::vector<double> losses;                     // rank 0's
  std::vector<Json> first_step_fp8;               // every rank's step-1 fp8 record
  std::vector<float> fp8_state, resumed_state;    // rank 0's at the end, right after resume()
  std::vector<std::vector<float>> state_by_rank;  // every rank's at the end
};

Fp8Run run(const TrainerConfig& c, const TrainingData& data, bool resume = false) {
  Fp8Run out;
  out.first_step_fp8.resize(std::size_t(c.ranks));
  out.state_by_rank.resize(std::size_t(c.ranks));
  test::train_on_each_rank(c, data, [&](Trainer& t, int rank) {
    if (resume) t.resume();
    if (resume && rank == 0) out.resumed_state = t.fp8_gemms()->state();
    while (t.step() < c.steps) {
      const bool first = t.step() == 0;
      const StepStats s = t.train_step();
      if (first) out.first_step_fp8[std::size_t(rank)] = s.fp8;
      if (rank == 0) out.losses.push_back(s.loss);
    }
    if (!resume && !c.checkpoint_dir.empty()) t.save_checkpoint();
    t.verify_replicas();
    out.state_by_rank[std::size_t(rank)] = t.fp8_gemms()->state();
    if (rank == 0) out.fp8_state = t.fp8_gemms()->state();
    return 0;
  });
  return out;
}

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

// The tolerance, derived from the same runs without FP8: tp changes only summation orders (a
// row-parallel product is tp partial sums, each rounded into bf16, then added by g; a
// column-parallel input gradient likewise by f; blockwise promotes per rank), so the bf16 run
// at the same layout shows how far they move the loss (its gap to one device, measured). A
// value one bf16 ulp (2^-8 relative) away can be cast on the neighbouring E4M3 code, 2^-3 away:
// FP8 magnifies that gap by at most the ratio of the steps, 2^5.
constexpr double kBf16Ulp = 1.0 / 256, kE4M3Step = 1.0 / 8;

// Rank 0's losses of c without FP8 (the recipes share them: each layout runs once).
const std::vector<double>& bf16_losses(TrainerConfig c, const TrainingData& data) {
  static std::map<std::string, std::vector<double>> cache;
  const std::string key = std::to_string(c.model.n_embd) + " " + std::to_string(c.dp) + " " +
                          std::to_string(c.tp) + " " + std::to_string(c.sequence_parallel) +
                          " " + std::to_string(c.steps);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  c.fp8.reset();
  c.checkpoint_dir.clear();
  std::vector<double> losses;
  test::train_on_each_rank(c, data, [&](Trainer& t, int rank) {
    while (t.step() < c.steps) {
      const double loss = t.train_step().loss;
      if (rank == 0) losses.push_back(loss);
    }
    return 0;
  });
  return cache[key] = losses;
}

// The largest relative loss gap of c's bf16 run (FP8 off) at `at` to one device, over c.steps.
double bf16_gap(const TrainerConfig& c, const TrainerConfig& at, const TrainingData& data) {
  const std::vector<double>& one = bf16_losses(c, data);
  const std::vector<double>& got = bf16_losses(at, data);
  double gap = 0;
  for (std::size_t i = 0; i < one.size() && i < got.size(); ++i) {
    gap = std::max(gap, rel(got[i], one[i]));
  }
  return gap;
}

// got (at layout `at` of c) against one device's run of c, from step `from` on.
void expect_follows(const Fp8Run& got, const Fp8Run& one, const TrainerConfig& c,
                    const TrainerConfig& at, const TrainingData& data, const std::string& what,
                    std::size_t from = 0) {
  ASSERT_EQ(got.losses.size() + from, one.losses.size()) << what;
  const double gap = bf16_gap(c, at, data);
  const double tolerance = (kE4M3Step / kBf16Ulp) * std::max(gap, 0x1p-24);
  double worst = 0;
  for (std::size_t i = 0; i < got.losses.size(); ++i) {
    const double d = rel(got.losses[i], one.losses[i + from]);
    worst = std::max(worst, d);
    EXPECT_LE(d, tolerance) << what << " step " << i + from + 1 << ": " << got.losses[i]
                            << " vs " << one.losses[i + from];
  }
  std::printf("%s: loss within %.2e of one device's; tolerance %.2e = 2^5 (E4M3 step / bf16 "
              "ulp) x %.2e (the bf16 run's gap at this layout)\n",
              what.c_str(), worst, tolerance, gap);
  // Delayed: every rank holds the world's (tp-reduced) histories.
  for (const std::vector<float>& s : got.state_by_rank) EXPECT_EQ(s, got.fp8_state) << what;
}

// The step-1 per-tensor scale of `tensor` ("h0.attn.weight") in a rank's fp8 record.
double scale_of(const Json& fp8, const std::string& tensor) {
  const Json* t = fp8.find("tensors");
  const Json* r = t == nullptr ? nullptr : t->find(tensor);
  const Json* s = r == nullptr ? nullptr : r->find("scale");
  return s == nullptr ? -1 : s->as_double();
}

TEST(Fp8Tp, EachRecipeAtTp2FollowsOneDeviceWithAndWithoutSequenceParallelAndUnderDp) {
  const TrainingData data = random_data(1 << 12);
  for (fp8::Recipe r : {fp8::Recipe::kDelayed, fp8::Recipe::kTensorwise, fp8::Recipe::kBlockwise}) {
    const std::string name(fp8::name(r));
    const TrainerConfig c = fp8_config(r);
    const Fp8Run one = run(c, data);
    std::vector<TrainerConfig> layouts = {layout(c, 1, 2, false), layout(c, 1, 2, true)};
    if (r != fp8::Recipe::kBlockwise) layouts.push_back(layout(c, 2, 2, false));  // tiny model
    for (const TrainerConfig& at : layouts) {
      const std::string what = name + (at.dp > 1 ? " dp 2 x" : "") + " tp 2" +
                               (at.sequence_parallel ? " sequence parallel" : "");
      expect_follows(run(at, data), one, c, at, data, what);
    }
  }
}

// The amax reduction over tp: with it, a per-tensor scale is the whole tensor's, the same on
// every tp rank and, for the weights (identical at step 1), exactly one device's; without it
// each rank would scale its shard by the shard's own amax.
TEST(Fp8Tp, PerTensorScalesAreTheWholeTensorsOnEveryTpRank) {
  const TrainingData data = random_data(1 << 12);
  static constexpr const char* kLinear[] = {"attn", "attn_proj", "fc", "fc_proj"};
  static constexpr const char* kRole[] = {"input", "weight", "grad"};
  for (bool sp : {false, true}) {
    TrainerConfig c = fp8_config(fp8::Recipe::kTensorwise);
    c.steps = 1;
    const Fp8Run one = run(c, data), two = run(layout(c, 1, 2, sp), data);
    for (std::int64_t l = 0; l < c.model.n_layer; ++l) {
      for (const char* linear : kLinear) {
        for (const char* role : kRole) {
          const std::string t = "h" + std::to_string(l) + "." + linear + "." + role;
          const double s0 = scale_of(two.first_step_fp8[0], t);
          EXPECT_GT(s0, 0) << t;
          EXPECT_EQ(s0, scale_of(two.first_step_fp8[1], t)) << t << " sp " << sp;
          if (std::string(role) == "weight") {
            EXPECT_EQ(s0, scale_of(one.first_step_fp8[0], t)) << t;
          }
        }
      }
    }
    // Delayed: the weights' amax histories after step 1 are one device's, bit for bit.
    TrainerConfig d = fp8_config(fp8::Recipe::kDelayed);
    d.steps = 1;
    const Fp8Run d1 = run(d, data), d2 = run(layout(d, 1, 2, sp), data);
    ASSERT_EQ(d1.fp8_state.size(), d2.fp8_state.size());
    const std::size_t per = std::size_t(d.fp8->amax_history) + 2;  // history, scale, pending
    for (std::size_t i = 0; i < d1.fp8_state.size(); ++i) {
      if (i / per % 3 == 1) {
        EXPECT_EQ(d1.fp8_state[i], d2.fp8_state[i]) << "value " << i;
      }
    }
  }
}

TEST(Fp8Tp, ADelayedCheckpointWrittenAtTp2ResumesAtTp1WithItsScalingState) {
  const TrainingData data = random_data(1 << 12);
  const TrainerConfig c = fp8_config(fp8::Recipe::kDelayed);
  const Fp8Run one = run(c, data);
  TempDir dir;
  TrainerConfig from = layout(c, 1, 2, true), to = c;
  from.checkpoint_dir = to.checkpoint_dir = dir.str();
  from.steps = 2;
  const Fp8Run before = run(from, data), after = run(to, data, true);
  EXPECT_FALSE(before.fp8_state.empty());
  EXPECT_EQ(after.resumed_state, before.fp8_state);
  expect_follows(after, one, c, layout(c, 1, 2, true), data, "delayed tp 2 -> tp 1", 2);
}

TEST(Fp8Tp, BlockwiseTilesThatWouldStraddleShardsAreRefused) {
  TrainerConfig c = layout(fp8_config(fp8::Recipe::kBlockwise), 1, 2, false);
  c.model = GptConfig{1, 2, 128, 8, 256};  // n_embd / tp = 64
  const std::string why = test::input_error_of([&] { validate(c); });
  EXPECT_NE(why.find("n_embd / tp = 64 is not a multiple of 128"), std::string::npos) << why;
  c.fp8->recipe = fp8::Recipe::kTensorwise;  // per-tensor scales: any split
  EXPECT_NO_THROW(validate(c));
}

}  // namespace
}  // namespace mixpar::ch08
