// MoE blocks in a 16-bit run: the experts compute as the dense MLP of that dtype (inputs and
// working weights rounded to it, FP32 accumulation, outputs rounded once), their FP32 tensors
// are their own masters, the router stays FP32. One expert, top-1, computes the dense bf16
// MLP's forward bit for bit; dp x ep (and ZeRO-3) trains like one device of the same dtype
// within the dtype's few ulps (chapter 8's 16-bit grid tests' bound); an fp16 overflow skips
// the step and leaves the experts' weights and moments untouched; the bill is the ledger's.
#include <gtest/gtest.h>

#include <array>
#include <limits>
#include <string>
#include <vector>

#include "moe_test_util.h"
#include "preflight.h"
#include "tensor/ledger.h"

namespace mixpar::ch08 {
namespace {

using namespace moe_test;

double ulp_of(DType d) { return d == DType::kBF16 ? 0x1p-8 : 0x1p-11; }

TEST(MoePrecision, OneExpertTopOneInBf16ComputesTheDenseBf16MlpsForwardBitForBit) {
  const TrainingData data = random_data(4000);
  TrainerConfig dense = moe_config(1, 2);
  dense.moe.n_experts = 0;
  dense.dtype = DType::kBF16;
  dense.grad_clip = 0;
  TrainerConfig moe = dense;
  moe.moe.n_experts = 1;
  moe.moe.top_k = 1;
  Trainer d(dense, data), m(moe, data);
  // The router and the experts are FP32 tensors whatever the dtype (their own masters).
  EXPECT_EQ(m.moe()->layer(0).router_weight().dtype(), DType::kF32);
  EXPECT_EQ(m.moe()->layer(0).experts().fc_w.dtype(), DType::kF32);
  copy_dense_mlp_into_expert_zero(d, m, 2);  // expert 0 from the block's own (bf16) MLP
  // Step 1's forward is the same computation; then the experts' FP32 gradients (the dense
  // MLP's are rounded to bf16) part the weights by roundings.
  for (int s = 0; s < moe.steps; ++s) {
    const StepStats a = d.train_step(), b = m.train_step();
    if (s == 0) {
      EXPECT_EQ(a.loss, b.loss);
    }
    EXPECT_LE(rel(a.loss, b.loss), 4 * ulp_of(DType::kBF16)) << "step " << s + 1;
  }
}

struct Layout {
  int dp, ep, zero;
};

TEST(MoePrecision, SixteenBitExpertParallelRunsTrainLikeOneDeviceOfTheSameDtype) {
  const TrainingData data = random_data(4000);
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    TrainerConfig one = moe_config(1, 8);
    one.dtype = dtype;
    one.moe.aux_loss_coef = 1e-2;
    one.moe.z_loss_coef = 1e-3;
    const MoeRun base = run(one, data);
    for (const Layout l : {Layout{4, 2, 0}, Layout{4, 2, 3}}) {
      const std::string what = std::string(dtype_name(dtype)) + " dp " + std::to_string(l.dp) +
                                " x ep " + std::to_string(l.ep) + ", zero " +
                                std::to_string(l.zero);
      SCOPED_TRACE(what);
      TrainerConfig c = one;
      c.batch = 8 / l.dp;
      c.ranks = c.dp = l.dp;
      c.ep = l.ep;
      c.zero_stage = l.zero;
      const MoeRun r = run(c, data);
      ASSERT_EQ(r.steps.size(), base.steps.size());
      for (std::size_t s = 0; s < r.steps.size(); ++s) {
        EXPECT_EQ(r.steps[s].skipped, base.steps[s].skipped) << "step " << s + 1;
        EXPECT_EQ(r.steps[s].loss_scale, base.steps[s].loss_scale) << "step " << s + 1;
        EXPECT_LE(rel(r.steps[s].loss, base.steps[s].loss), 4 * ulp_of(dtype))
            << "step " << s + 1 << ": " << r.steps[s].loss << " vs " << base.steps[s].loss;
      }
    }
  }
}

// aux_loss_scale.h's rule in an fp16 run: the aux and z-loss seeds carry the loss scale as
// the main loss's seed does, so the unscaled gradient is the fp32 run's. With coefficients
// large enough that the router's balance gradients lead step 1's norm, the fp16 norm is the
// fp32 one to fp16's rounding; a seed without the scale would leave them 256 times too small
// after unscaling, near the norm of a run without them (far from it: the check can fail).
TEST(MoePrecision, TheAuxAndZLossGradientsCarryTheFp16LossScale) {
  const TrainingData data = random_data(4000);
  const auto step_one_norm = [&](DType dtype, double aux, double z) {
    TrainerConfig c = moe_config(2, 2);
    c.ep = 2;
    c.steps = 1;
    c.dtype = dtype;
    c.loss_scale = 256;  // the balance gradients x 256 stay inside fp16's range
    c.moe.aux_loss_coef = aux;
    c.moe.z_loss_coef = z;
    return test::train_on_each_rank(c, data, [](Trainer& t, int) {
      return t.train_step().grad_norm;
    })[0];
  };
  const double fp32 = step_one_norm(DType::kF32, 10.0, 1.0);
  const double fp16 = step_one_norm(DType::kF16, 10.0, 1.0);
  const double without = step_one_norm(DType::kF32, 0.0, 0.0);
  EXPECT_LE(rel(fp16, fp32), 1e-2) << fp16 << " vs " << fp32;
  EXPECT_GT(rel(without, fp32), 0.1) << without << " vs " << fp32;
}

// The experts' FP32 tensors the optimizer steps, and their first moments, flat: this rank's.
std::array<std::vector<float>, 2> expert_states(Trainer& t) {
  const std::vector<Tensor> params = t.moe()->params();
  const ch03::MixedPrecisionOptimizer& o = t.optimizer();
  const std::size_t first = o.stepped_params().size() - params.size();
  std::array<std::vector<float>, 2> out;
  for (std::size_t j = 0; j < params.size(); ++j) {
    if (!t.moe()->is_expert_tensor(j)) continue;
    const Tensor states[] = {params[j], o.adamw()->exp_avg(first + j)};
    for (std::size_t k = 0; k < 2; ++k) {
      const std::vector<float> v = states[k].to_floats();
      out[k].insert(out[k].end(), v.begin(), v.end());
    }
  }
  return out;
}

// fp16 with a loss scale of 2^30: the scaled gradients overflow fp16, the world's found-inf
// vote skips the step, the scale halves, and the experts' weights and moments (sharded over
// edp by ZeRO-3 here) are what they were. With the default scale the same step is taken and
// moves both: the check can fail.
TEST(MoePrecision, AnFp16OverflowSkipsTheStepAndLeavesTheExpertStatesUntouched) {
  const TrainingData data = random_data(4000);
  for (const double scale : {0x1p30, 65536.0}) {
    SCOPED_TRACE("loss scale " + std::to_string(scale));
    TrainerConfig c = moe_config(4, 2);
    c.dtype = DType::kF16;
    c.ep = 2;
    c.zero_stage = 3;
    c.loss_scale = scale;
    c.moe.aux_loss_coef = 1e-2;
    const bool overflows = scale > 65536.0;
    test::train_on_each_rank(c, data, [&](Trainer& t, int) {
      const auto before = expert_states(t);
      const StepStats s = t.train_step();
      const auto after = expert_states(t);
      EXPECT_EQ(s.skipped, overflows);
      EXPECT_EQ(t.optimizer().loss_scale(), static_cast<float>(overflows ? scale / 2 : scale));
      EXPECT_EQ(after[0] == before[0], overflows);
      EXPECT_EQ(after[1] == before[1], overflows);
      return 0;
    });
  }
}

// In a 16-bit run the MoE tensors are their own masters and FP32 gradients: the bill adds no
// copy of them, and is the ledger's after a step (ZeRO-3's ranges too).
TEST(MoePrecision, TheBillOfASixteenBitMoeRunIsTheLedgers) {
  const TrainingData data = random_data(4000);
  for (const int zero : {0, 3}) {
    SCOPED_TRACE("zero " + std::to_string(zero));
    TrainerConfig c = moe_config(2, 2);
    c.dtype = DType::kBF16;
    c.zero_stage = zero;
    c.moe_every = 2;
    const RankBill bill = estimate_rank_bill(c);
    const auto live = test::train_on_each_rank(c, data, [](Trainer& t, int) {
      t.train_step();
      const MemoryLedger& l = current_ledger();
      const auto at = [&](MemCategory k) { return static_cast<std::int64_t>(l.live(k)); };
      return std::array<std::int64_t, 4>{at(MemCategory::kParameters), at(MemCategory::kGradients),
                                         at(MemCategory::kMasterParams),
                                         at(MemCategory::kOptimizerState)};
    });
    for (const auto& rank : live) {
      EXPECT_EQ(rank[0], bill.param_bytes);
      EXPECT_EQ(rank[1], bill.grad_bytes + bill.fp32_grad_bytes);
      EXPECT_EQ(rank[2], bill.master_bytes);
      EXPECT_EQ(rank[3], bill.optimizer_bytes);
    }
  }
}

// A bf16 and an fp16 checkpoint of dp 2 x ep 2 resume bit for bit (the MoE tensors, their own
// masters, read back in place; the scaler's state with them).
TEST(MoePrecision, SixteenBitCheckpointsResumeBitForBit) {
  const TrainingData data = random_data(4000);
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    test::TempDir dir;
    TrainerConfig c = moe_config(2, 2);
    c.dtype = dtype;
    c.ep = 2;
    c.moe.aux_loss_coef = 1e-2;
    c.checkpoint_dir = dir.file("ckpt");
    const MoeRun straight = run(c, data);
    test::train_on_each_rank(c, data, [&](Trainer& t, int) {
      for (int i = 0; i < 3; ++i) t.train_step();
      t.save_checkpoint();
    });
    TrainerConfig again = c;
    again.resume = true;
    const MoeRun resumed = test::train_on_each_rank(again, data, [](Trainer& t, int) {
      t.resume();
      return train(t);
    })[0];
    ASSERT_EQ(resumed.steps.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(resumed.steps[i].loss, straight.steps[i + 3].loss) << "step " << i + 4;
    }
    EXPECT_EQ(resumed.dense, straight.dense);
    EXPECT_EQ(resumed.experts, straight.experts);
  }
}

}  // namespace
}  // namespace mixpar::ch08
