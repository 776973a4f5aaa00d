// train_gpt's MoE blocks (chapter 9 in chapter 8's trainer): one expert, top-1, no capacity
// limit is the dense model bit for bit; ep 1, 2 and 4 over dp 4 train like one device with
// the whole batch (aux loss and z-loss on: their statistics are the global batch's); the
// all-to-all and the all-gather dispatch train bit for bit alike; the all-to-all's bytes are
// the formula's; the statistics count every assignment; bad layouts are refused before any
// work.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "ch03_master_weights/memory_calculator.h"
#include "ch03_master_weights/moe_memory.h"
#include "ch04_ddp/ddp_tolerances.h"
#include "moe_test_util.h"
#include "mesh_rules.h"
#include "preflight.h"
#include "tensor/ledger.h"

namespace mixpar::ch08 {
namespace {

using namespace moe_test;

TEST(MoeTrainer, OneExpertTopOneWithoutCapacityTrainsBitForBitLikeTheDenseModel) {
  const TrainingData data = random_data(4000);
  TrainerConfig dense = moe_config(1, 2);
  dense.moe.n_experts = 0;
  // The global norm sums the same squares in another order (the experts' after the
  // registry's): without clipping it is only reported, and the step is the dense one's.
  dense.grad_clip = 0;
  TrainerConfig moe = dense;
  moe.moe.n_experts = 1;
  moe.moe.top_k = 1;
  Trainer d(dense, data), m(moe, data);
  ASSERT_NE(m.moe(), nullptr);
  ASSERT_EQ(m.moe()->blocks(), 2u);
  // Expert 0 of each block starts from the block's own MLP weights.
  copy_dense_mlp_into_expert_zero(d, m, 2);
  for (int s = 0; s < moe.steps; ++s) {
    const StepStats a = d.train_step(), b = m.train_step();
    EXPECT_EQ(a.loss, b.loss) << "step " << s;
    EXPECT_LE(rel(a.grad_norm, b.grad_norm), 1e-12) << "step " << s;
  }
  for (std::size_t i = 0; i < 2; ++i) {
    const std::string h = "h." + std::to_string(i) + ".mlp.";
    ch09::ExpertWeights& e = m.moe()->layer(i).experts();
    EXPECT_EQ(test::bytes_of(e.fc_w), test::bytes_of(d.model().param(h + "c_fc.weight")));
    EXPECT_EQ(test::bytes_of(e.proj_b), test::bytes_of(d.model().param(h + "c_proj.bias")));
  }
  EXPECT_EQ(test::bytes_of(d.model().param("h.1.attn.c_attn.weight")),
            test::bytes_of(m.model().param("h.1.attn.c_attn.weight")));
}

// Every sum but the experts' is the same; an expert's gradient over 4 ranks' tokens is one
// GEMM with ep 4 and a sum of 4 GEMMs with ep 1: the same terms in another order, so the
// runs agree to rounding (chapter 4's tolerances of N ranks against one device).
TEST(MoeTrainer, ExpertParallelOneTwoFourOverDpFourTrainLikeOneDeviceWithTheWholeBatch) {
  const TrainingData data = random_data(4000);
  TrainerConfig one = moe_config(1, 8);
  one.moe.aux_loss_coef = 1e-2;
  one.moe.z_loss_coef = 1e-3;
  const MoeRun base = run(one, data);
  for (int ep : {1, 2, 4}) {
    SCOPED_TRACE("ep " + std::to_string(ep));
    TrainerConfig c = one;
    c.batch = 2;
    c.ranks = c.dp = 4;
    c.ep = ep;
    const MoeRun r = run(c, data);
    ASSERT_EQ(r.steps.size(), base.steps.size());
    for (std::size_t s = 0; s < r.steps.size(); ++s) {
      EXPECT_LE(rel(r.steps[s].loss, base.steps[s].loss), ch04::kLossTolerance) << "step " << s;
      EXPECT_LE(rel(r.steps[s].grad_norm, base.steps[s].grad_norm), ch04::kLossTolerance)
          << "step " << s;
      const Json& b0 = r.steps[s].moe.at("blocks").at(0);
      const Json& o0 = base.steps[s].moe.at("blocks").at(0);
      EXPECT_LE(rel(b0.at("aux_loss").as_double(), o0.at("aux_loss").as_double()),
                ch04::kLossTolerance);
    }
    EXPECT_LE(worst(r.dense, base.dense), ch04::kWeightsTolerance);
    EXPECT_LE(worst(r.experts, base.experts), ch04::kWeightsTolerance);
  }
}

// With tp every tp rank of a place runs the same MoE layer on the same tokens: dp 2 x ep 2
// beside tp 2 trains like one device with the whole batch, and every expert is counted once
// in the norm (tp rank 0 of its edp group).
TEST(MoeTrainer, TensorParallelBesideExpertParallelTrainsLikeOneDevice) {
  const TrainingData data = random_data(4000);
  TrainerConfig one = moe_config(1, 4);
  one.moe.aux_loss_coef = 1e-2;
  const MoeRun base = run(one, data);
  TrainerConfig c = one;
  c.batch = 2;
  c.ranks = 4;
  c.dp = c.tp = c.ep = 2;
  expect_within_ddp_tolerances(run(c, data), base);
}

TEST(MoeTrainer, AllToAllAndAllGatherDispatchTrainBitForBitAlike) {
  const TrainingData data = random_data(4000);
  TrainerConfig c = moe_config(2, 2);
  c.ep = 2;
  c.moe.capacity_factor = 1.0;  // with drops too
  const MoeRun a2a = run(c, data);
  c.moe_dispatch = ch09::DispatchKind::kAllGather;
  const MoeRun ag = run(c, data);
  for (std::size_t s = 0; s < a2a.steps.size(); ++s) {
    EXPECT_EQ(a2a.steps[s].loss, ag.steps[s].loss) << "step " << s;
    EXPECT_EQ(a2a.steps[s].grad_norm, ag.steps[s].grad_norm) << "step " << s;
  }
  EXPECT_EQ(a2a.dense, ag.dense);
  EXPECT_EQ(a2a.experts, ag.experts);
}

TEST(MoeTrainer, AllToAllBytesEqualTheFormulaAndTheCountsCoverEveryAssignment) {
  const TrainingData data = random_data(4000);
  TrainerConfig c = moe_config(4, 2);
  c.ep = 2;
  c.grad_accum = 2;
  c.moe.capacity_factor = 1.0;
  const std::vector<std::vector<StepStats>> logs = test::train_on_each_rank(
      c, data, [](Trainer& t, int) {
        std::vector<StepStats> out;
        for (int s = 0; s < 3; ++s) out.push_back(t.train_step());
        return out;
      });
  bool dropped = false;
  for (const auto& log : logs) {
    for (const StepStats& s : log) {
      EXPECT_GT(s.moe.at("a2a_bytes").as_double(), 0);
      EXPECT_EQ(s.moe.at("a2a_bytes").as_double(), s.moe.at("a2a_bytes_formula").as_double());
      for (std::size_t b = 0; b < s.moe.at("blocks").size(); ++b) {
        const Json& blk = s.moe.at("blocks").at(b);
        double total = 0;
        for (std::size_t e = 0; e < blk.at("expert_tokens").size(); ++e) {
          total += blk.at("expert_tokens").at(e).as_double();
        }
        // The global batch's tokens x top-k, before drops.
        EXPECT_EQ(total, double(c.tokens_per_step() * c.moe.top_k));
        EXPECT_GE(blk.at("load_max_over_mean").as_double(), 1.0);
        dropped = dropped || blk.at("dropped_frac").as_double() > 0;
      }
    }
  }
  EXPECT_TRUE(dropped);  // capacity factor 1 on 16 tokens drops some
}

// ZeRO-1 and 2 shard the registry's states over dp; the MoE blocks' tensors stay whole on
// every rank of their edp group and take the same step: the run is DDP's bit for bit.
// ZeRO over ep 1 (edp 2): the experts' AdamW states are sharded over edp too, each edp rank
// stepping its range and the ranges gathered after the step: still DDP's bits. The global
// norm sums the same squares in another order (each rank's ranges, then the world): equal to
// rounding.
TEST(MoeTrainer, ZeroOneAndTwoTrainBitForBitLikeDdp) {
  const TrainingData data = random_data(4000);
  TrainerConfig c = moe_config(2, 2);
  c.ep = 1;
  c.moe.aux_loss_coef = 1e-2;
  const MoeRun ddp = run(c, data);
  for (int stage : {1, 2}) {
    SCOPED_TRACE("zero " + std::to_string(stage));
    c.zero_stage = stage;
    expect_bit_for_bit(run(c, data), ddp);
  }
}

// DeepSeek-V3's bias steps on counts reduced over dp x cp: every replica routes with the same
// bias, the one device's with the whole batch (the counts are whole numbers: exact sums).
TEST(MoeTrainer, TheExpertBiasStaysReplicatedAndEqualsOneDevicesWholeBatch) {
  const TrainingData data = random_data(4000);
  TrainerConfig one = moe_config(1, 8);
  one.moe.bias_update_rate = 1e-2;
  TrainerConfig four = one;
  four.batch = 2;
  four.ranks = four.dp = 4;
  four.ep = 2;
  const auto biases = [&](const TrainerConfig& c) {
    return test::train_on_each_rank(c, data, [](Trainer& t, int) {
      std::vector<float> b;
      for (int s = 0; s < t.config().steps; ++s) t.train_step();
      for (std::size_t i = 0; i < t.moe()->blocks(); ++i) {
        const std::vector<float>& v = t.moe()->layer(i).expert_bias();
        b.insert(b.end(), v.begin(), v.end());
      }
      return b;
    });
  };
  const std::vector<float> base = biases(one)[0];
  bool moved = false;
  for (float v : base) moved = moved || v != 0;
  EXPECT_TRUE(moved);
  for (const std::vector<float>& b : biases(four)) EXPECT_EQ(b, base);
}

// A checkpoint stores every expert by global index (and the routers, moments and expert
// biases): resumed on the layout that wrote it the run continues bit for bit; on ep 2 and 1,
// or under ZeRO-2, each rank reads its own experts and the run continues within chapter 4's
// tolerances (an expert's gradient is summed in another order on another ep).
TEST(MoeTrainer, ACheckpointHoldsExpertsByGlobalIndexAndResumesOnAnyEp) {
  test::TempDir dir;
  const TrainingData data = random_data(4000);
  TrainerConfig c = moe_config(4, 2);
  c.ep = 4;
  c.moe.aux_loss_coef = 1e-2;
  c.moe.bias_update_rate = 1e-2;
  c.checkpoint_dir = dir.file("ckpt");
  const MoeRun straight = run(c, data);
  test::train_on_each_rank(c, data, [&](Trainer& t, int) {
    for (int i = 0; i < 3; ++i) t.train_step();
    t.save_checkpoint();
  });
  struct Layout {
    int ep, zero;
  };
  for (const Layout l : {Layout{4, 0}, Layout{2, 0}, Layout{1, 0}, Layout{2, 2}, Layout{1, 1}}) {
    SCOPED_TRACE("ep " + std::to_string(l.ep) + ", zero " + std::to_string(l.zero));
    TrainerConfig again = c;
    again.ep = l.ep;
    again.zero_stage = l.zero;
    const MoeRun resumed = resume_after_step_3(again, data);
    ASSERT_EQ(resumed.steps.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
      const StepStats& a = resumed.steps[i];
      const StepStats& b = straight.steps[i + 3];
      if (l.ep == c.ep && l.zero == 0) {
        EXPECT_EQ(a.loss, b.loss) << "step " << i + 4;
      } else {
        EXPECT_LE(rel(a.loss, b.loss), ch04::kLossTolerance) << "step " << i + 4;
      }
    }
    if (l.ep == c.ep && l.zero == 0) {
      EXPECT_EQ(resumed.dense, straight.dense);
      EXPECT_EQ(resumed.experts, straight.experts);
    } else {
      EXPECT_LE(worst(resumed.experts, straight.experts), ch04::kWeightsTolerance);
    }
  }
}

// mixpar-mem's bill of the MoE blocks (chapter 3's calculator, moe_memory.h), and the
// pre-flight's, which calls it, against each rank's ledger after a step, on ep 1 and 2, with
// and without ZeRO-1 (dp 4 x ep 2: edp 2 shards the experts' moments), under ZeRO-3 (the
// experts' parameters and gradients held as edp ranges between steps) and with a capacity:
// parameters, gradients and AdamW moments to the byte; the activations the MoE blocks keep
// (the ledger's beyond the same run's without experts, whose blocks hold the same buffers)
// are the calculator's formula at the rows each rank measured, and at most the billed rows
// (exact with ep 1 and no capacity; the capacity's bound, or the worst case, otherwise).
TEST(MoeTrainer, MixparMemAndThePreflightBillTheExpertsAsTheLedgerCountsThem) {
  const TrainingData data = random_data(4000);
  struct Case {
    int dp, ep, zero;
    double capacity;
  };
  struct Live {
    std::int64_t params, grads, moments, acts, rows_sent, rows_run;
  };
  for (const Case k : {Case{2, 1, 0, 0}, Case{2, 2, 0, 0}, Case{2, 1, 1, 0}, Case{4, 2, 1, 0},
                       Case{2, 2, 0, 1.0}, Case{2, 1, 3, 0}}) {
    SCOPED_TRACE("dp " + std::to_string(k.dp) + ", ep " + std::to_string(k.ep) + ", zero " +
                 std::to_string(k.zero) + ", capacity " + std::to_string(k.capacity));
    TrainerConfig c = moe_config(k.dp, 2);
    c.ep = k.ep;
    c.zero_stage = k.zero;
    c.bucket_mb = 25;   // one bucket: ZeRO-1's dense shard is the calculator's ceil(P / dp)
    c.moe_every = 2;    // block 1 only
    c.moe.capacity_factor = k.capacity;
    mem::TrainingSetup setup;
    setup.shape = mem::GptShape{c.model.n_layer, c.model.n_embd, c.model.n_head,
                                c.model.vocab_size, c.seq, c.batch, c.model.n_positions};
    setup.precision = mem::Precision::kFp32;
    setup.layout.zero_stage = k.zero;
    setup.layout.dp = k.dp;
    setup.layout.moe = {c.moe.n_experts, c.moe.top_k, c.moe_every, c.ep, k.capacity};
    const mem::MemoryBill tool = mem::compute_bill(setup);
    ASSERT_TRUE(tool.moe.has_value());
    const mem::MoeBill& moe = *tool.moe;
    const RankBill bill = estimate_rank_bill(c);
    const std::int64_t C = c.model.n_embd;
    EXPECT_EQ(bill.moe_parameters, C * 4 + (4 / k.ep) * (8 * C * C + 5 * C));
    EXPECT_EQ(moe.router_params + moe.expert_params, bill.moe_parameters);
    // Each rank thread of the local backend charges its own ledger.
    const auto live_of = [&](const TrainerConfig& run) {
      return test::train_on_each_rank(run, data, [](Trainer& t, int) {
        // The MoE layer frees a micro-batch's saved state in its backward: its activations
        // are seen at the step's peak.
        current_ledger().reset_peaks();
        t.train_step();
        const MemoryLedger& l = current_ledger();
        const auto at = [&](MemCategory m) { return static_cast<std::int64_t>(l.live(m)); };
        Live r{at(MemCategory::kParameters), at(MemCategory::kGradients),
               at(MemCategory::kOptimizerState),
               static_cast<std::int64_t>(l.peak(MemCategory::kActivations)), 0, 0};
        if (t.moe() != nullptr) {
          const ch09::MoeStats& s = t.moe()->layer(0).stats();
          r.rows_sent = s.assignments - s.dropped;
          r.rows_run = s.expert_rows;
        }
        return r;
      });
    };
    TrainerConfig dense = c;
    dense.moe.n_experts = 0;
    dense.ep = 1;
    const std::vector<Live> base = live_of(dense);
    const std::vector<Live> live = live_of(c);
    for (std::size_t r = 0; r < live.size(); ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const Live& x = live[r];
      EXPECT_EQ(x.params, tool.states.parameters);
      EXPECT_EQ(x.grads, tool.states.gradients);
      EXPECT_EQ(x.moments, tool.states.optimizer_state);
      EXPECT_EQ(x.params, bill.param_bytes);
      EXPECT_EQ(x.grads, bill.grad_bytes);
      EXPECT_EQ(x.moments, bill.optimizer_bytes);
      const mem::MoeShape& m = setup.layout.moe;
      // The step's peak is the forward's end: the state the layer keeps for backward (the
      // bill) and, still live there, its output [T, C] before the block copies it and, with
      // ep > 1, the permuted rows it dispatched [rows sent, C] (FP32, freed at once).
      const std::int64_t transient = 4 * C * (moe.tokens + (k.ep > 1 ? x.rows_sent : 0));
      EXPECT_EQ(x.acts - base[r].acts - transient,
                mem::moe_activation_bytes(C, m, moe.tokens, x.rows_sent, x.rows_run,
                                          mem::Precision::kFp32));
      EXPECT_LE(x.rows_sent, moe.rows_sent);
      EXPECT_LE(x.rows_run, moe.rows_run);
      if (k.ep == 1 && k.capacity == 0) {
        EXPECT_EQ(x.acts - base[r].acts - transient, moe.activations);
        EXPECT_EQ(x.rows_run, moe.rows_run);
      }
    }
    // The pre-flight adds the same activations and buffers to its dense bill.
    EXPECT_EQ(bill.moe_dispatch_bytes, moe.dispatch());
    EXPECT_EQ(moe.dispatch(), k.ep == 1 ? 0 : 4 * C * (moe.rows_sent + moe.rows_run));
  }
}

TEST(MoeTrainer, BadLayoutsAreRefusedBeforeAnyWork) {
  const auto refusal = [](TrainerConfig c) { return test::input_error_of([&] { validate(c); }); };
  TrainerConfig c = moe_config(4, 2);
  c.ep = 3;
  EXPECT_NE(refusal(c).find("mesh rule ep-divides-experts"), std::string::npos);
  c = moe_config(2, 2);
  c.ep = 4;
  EXPECT_NE(refusal(c).find("mesh rule ep-divides-dp-cp"), std::string::npos);
  c = moe_config(1, 2);
  c.moe.top_k = 5;
  EXPECT_NE(refusal(c).find("--top-k 5 is above --n-experts 4"), std::string::npos);
  c = moe_config(1, 2);
  c.moe.capacity_factor = 0.1;  // 0.1 x 16 tokens x 2 / 4 = 0.8 tokens
  EXPECT_NE(refusal(c).find("below one token"), std::string::npos);
  c = moe_config(2, 2);
  c.dp = 1;
  c.tp = 2;
  c.sequence_parallel = true;
  EXPECT_NE(refusal(c).find("mesh rule moe-dimensions: --sequence-parallel"), std::string::npos);
  c = moe_config(1, 2);
  c.moe.n_experts = 0;
  c.ep = 2;
  c.ranks = c.dp = 2;
  EXPECT_NE(refusal(c).find("mesh rule ep-needs-experts"), std::string::npos);
}

}  // namespace
}  // namespace mixpar::ch08
