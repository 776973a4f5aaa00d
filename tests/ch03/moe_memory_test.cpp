// The MoE blocks' bill (moe_memory.h) on a shape small enough to add by hand: 4 layers of
// C = 8, every 2nd an MoE block of 4 experts, top-2, micro-batches of T = 8 tokens; and
// mixpar-mem --n-experts printing the library's numbers and refusing bad MoE flags. That the
// bill is what train_gpt allocates is tests/ch08/moe/moe_trainer_test.cpp's (the ledger).
#include "ch03_master_weights/moe_memory.h"

#include <gtest/gtest.h>

#include <string>

#include "command.h"
#include "util/errors.h"
#include "util/json.h"

namespace mixpar::mem {
namespace {

TrainingSetup moe_setup(std::int64_t ep, std::int64_t dp, int zero, double capacity = 0) {
  TrainingSetup t;
  t.shape = GptShape{4, 8, 2, 16, 4, 2, 4};  // L, C, heads, vocab, seq, micro-batch, positions
  t.precision = Precision::kFp32;
  t.layout.dp = dp;
  t.layout.zero_stage = zero;
  t.layout.moe = MoeShape{4, 2, 2, ep, capacity};
  return t;
}

TEST(MoeMemory, MoeBlocksAreEveryKthLayerOfARange) {
  EXPECT_EQ(moe_blocks_in(0, 4, 2), 2);  // layers 1 and 3
  EXPECT_EQ(moe_blocks_in(0, 4, 1), 4);
  EXPECT_EQ(moe_blocks_in(1, 3, 2), 1);  // layer 1
  EXPECT_EQ(moe_blocks_in(2, 4, 2), 1);  // layer 3
  EXPECT_EQ(moe_blocks_in(0, 4, 3), 1);  // layer 2
  EXPECT_EQ(moe_blocks_in(0, 2, 3), 0);
}

// ep 2 over dp 4 under ZeRO-1 (edp 2), fp32 AdamW. Per block: router 8 x 4 = 32, two experts
// of 8 x 64 + 5 x 8 = 552. Moments: the routers' whole (8 x 64), each expert tensor's half
// (2 x 8 x 32, 2 x 32, 2 x 32 x 8, 2 x 8 halved: 552 a block). Rows: T k = 16 sent, at worst
// ep T min(k, El) = 32 run. Activations a block: 4 (2 T E + 32 (2C + 2 4C) + 16 C) bytes.
TEST(MoeMemory, TheBillOfEp2UnderZero1AddsUpByHand) {
  const MemoryBill b = compute_bill(moe_setup(2, 4, 1));
  ASSERT_TRUE(b.moe.has_value());
  const MoeBill& m = *b.moe;
  EXPECT_EQ(m.blocks, 2);
  EXPECT_EQ(m.experts_per_rank, 2);
  EXPECT_EQ(m.edp, 2);
  EXPECT_EQ(m.router_params, 2 * 32);
  EXPECT_EQ(m.expert_params, 2 * 2 * 552);
  EXPECT_EQ(m.states.parameters, 4 * 2272);
  EXPECT_EQ(m.states.gradients, 4 * 2272);  // whole: ZeRO-1 shards no gradient
  EXPECT_EQ(m.states.master_params, 0);
  EXPECT_EQ(m.states.optimizer_state, 8 * 64 + 8 * 2 * 552);
  EXPECT_EQ(m.tokens, 8);
  EXPECT_EQ(m.capacity, -1);
  EXPECT_EQ(m.rows_sent, 16);
  EXPECT_EQ(m.rows_run, 32);
  EXPECT_EQ(m.activations_per_block, 4 * (2 * 8 * 4 + 32 * (16 + 64) + 16 * 8));
  EXPECT_EQ(m.activations, 2 * m.activations_per_block);
  EXPECT_EQ(m.dispatch_send, 4 * 16 * 8);
  EXPECT_EQ(m.dispatch_receive, 4 * 32 * 8);
  // Inside the device's bill: the dense model's (its MLP tensors kept) plus the MoE part.
  TrainingSetup dense = moe_setup(1, 4, 1);
  dense.layout.moe = MoeShape{};
  const MemoryBill d = compute_bill(dense);
  EXPECT_EQ(b.device_params, d.device_params + 2272);
  EXPECT_EQ(b.model_params, d.model_params + 2 * (32 + 4 * 552));
  EXPECT_EQ(b.states.optimizer_state, d.states.optimizer_state + m.states.optimizer_state);
  EXPECT_EQ(*b.activations, *d.activations + m.activations);
  EXPECT_EQ(b.total_bytes, d.total_bytes + m.states.total() + m.activations + m.dispatch());
}

// ZeRO-2 leaves the expert gradients whole (as train_gpt); ZeRO-3 shards them and the
// parameters too; ep 1 has no dispatch and runs exactly the rows it sends.
TEST(MoeMemory, ZeroStagesAndEpOneBillWhatTheyShard) {
  const MoeBill z1 = *compute_bill(moe_setup(2, 4, 1)).moe;
  const MoeBill z2 = *compute_bill(moe_setup(2, 4, 2)).moe;
  EXPECT_EQ(z2.states.gradients, z1.states.gradients);
  EXPECT_EQ(z2.states.optimizer_state, z1.states.optimizer_state);
  const MoeBill z3 = *compute_bill(moe_setup(2, 4, 3)).moe;
  EXPECT_EQ(z3.states.parameters, 4 * (2 * 32 + 2 * 552));
  const MoeBill z0 = *compute_bill(moe_setup(2, 4, 0)).moe;
  EXPECT_EQ(z0.states.optimizer_state, 8 * 2272);
  const MoeBill one = *compute_bill(moe_setup(1, 4, 0)).moe;
  EXPECT_EQ(one.rows_run, one.rows_sent);
  EXPECT_EQ(one.dispatch(), 0);
  EXPECT_EQ(one.expert_params, 2 * 4 * 552);
}

// A capacity bounds both: cap = ceil(f T k / E) per expert and rank; factor 0.5 gives 2, so
// a rank sends at most E cap = 8 rows and its experts run at most ep El cap = 8.
TEST(MoeMemory, ACapacityBoundsTheRowsSentAndRun) {
  const MoeBill m = *compute_bill(moe_setup(2, 4, 0, 0.5)).moe;
  EXPECT_EQ(m.capacity, 2);
  EXPECT_EQ(m.rows_sent, 8);
  EXPECT_EQ(m.rows_run, 8);
  EXPECT_EQ(compute_bill(moe_setup(2, 4, 0, 1.0)).moe->rows_run, 16);
}

TEST(MoeMemory, BadLayoutsAreInputErrors) {
  const auto with = [](auto edit) {
    TrainingSetup t = moe_setup(2, 4, 0);
    edit(t);
    return t;
  };
  EXPECT_THROW(validate(with([](TrainingSetup& t) { t.layout.moe.ep = 3; })), InputError);
  EXPECT_THROW(validate(with([](TrainingSetup& t) { t.layout.dp = 2; t.layout.moe.ep = 4; })),
               InputError);
  EXPECT_THROW(validate(with([](TrainingSetup& t) { t.layout.moe.top_k = 5; })), InputError);
  EXPECT_THROW(validate(with([](TrainingSetup& t) { t.layout.moe.moe_every = 5; })), InputError);
  EXPECT_THROW(validate(with([](TrainingSetup& t) { t.layout.moe.capacity_factor = 0.1; })),
               InputError);  // 0.1 x 8 x 2 / 4 = 0.4 tokens
  EXPECT_THROW(validate(with([](TrainingSetup& t) {
                 t.shape.reset();
                 t.params = 1000;
               })),
               InputError);  // experts need a shape
  EXPECT_NO_THROW(validate(moe_setup(2, 4, 0)));
}

const std::string kShape =
    " --n-layer 4 --n-embd 8 --n-head 2 --vocab-size 16 --seq 4 --micro-batch 2 --n-positions 4"
    " --precision fp32";

test_support::CliRun tool(const test_support::TempDir& d, const std::string& flags) {
  return test_support::run_shell(d, std::string("'") + MIXPAR_MEM_PATH + "'" + flags);
}

TEST(MoeMemory, ToolPrintsTheLibrarysBill) {
  const test_support::TempDir d;
  const std::string flags = kShape + " --dp 4 --zero-stage 1 --n-experts 4 --moe-every 2 --ep 2";
  const test_support::CliRun j = tool(d, flags + " --json");
  ASSERT_EQ(j.code, 0) << j.err;
  const MemoryBill b = compute_bill(moe_setup(2, 4, 1));
  const Json out = Json::parse(j.out, "mixpar-mem --json");
  EXPECT_EQ(out.at("total_bytes").as_int(), b.total_bytes);
  const Json& moe = out.at("moe");
  EXPECT_EQ(moe.at("optimizer_state_bytes").as_int(), b.moe->states.optimizer_state);
  EXPECT_EQ(moe.at("activations_bytes").as_int(), b.moe->activations);
  EXPECT_EQ(moe.at("rows_run").as_int(), 32);
  EXPECT_EQ(moe.at("rows_bound").as_string(), "worst case");
  const test_support::CliRun t = tool(d, flags);
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("all-to-all buffers (one MoE block)"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("worst case"), std::string::npos) << t.out;
}

TEST(MoeMemory, ToolRefusesBadMoeFlagsWithOneLine) {
  const test_support::TempDir d;
  for (const std::string& flags :
       {kShape + " --top-k 2", kShape + " --ep 2 --dp 2", kShape + " --n-experts 4 --ep 3",
        kShape + " --n-experts 4 --ep 4 --dp 2", kShape + " --n-experts 4 --top-k 5",
        kShape + " --n-experts 4 --capacity-factor 0.1",
        std::string(" --params 7e9 --n-experts 8")}) {
    test_support::expect_one_line_error(tool(d, flags), "mixpar-mem", "", flags);
  }
}

}  // namespace
}  // namespace mixpar::mem
