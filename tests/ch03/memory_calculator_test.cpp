// Chapter 3's memory calculator against the numbers of its sources: the source articles'
// (docs/SOURCES.md) corrected bills, the ZeRO paper's 7.5B-on-64-GPUs example, GPT-2 124M's parameter count,
// Korthikanti et al.'s activation formulas on a shape small enough to add by hand, and the
// mixpar-mem tool itself (exit code 2 on bad flags, --json equal to the library).
#include "ch03_master_weights/memory_calculator.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "util/errors.h"
#include "util/json.h"

namespace mixpar::mem {
namespace {

constexpr std::int64_t kGB = 1'000'000'000;

TrainingSetup params_setup(std::int64_t p, Precision precision, Optimizer o = Optimizer::kAdamW) {
  TrainingSetup t;
  t.params = p;
  t.precision = precision;
  t.optimizer = o;
  return t;
}

GptShape gpt2_small() {
  GptShape s;
  s.n_layer = 12;
  s.n_embd = 768;
  s.n_head = 12;
  s.vocab_size = 50257;
  s.seq = 1024;
  s.micro_batch = 4;
  s.n_positions = 1024;
  return s;
}

// s 8, b 2, h 16, a 4, L 2: sbh = 256 and as^2b = 512, easy to check by hand.
GptShape tiny() {
  GptShape s;
  s.n_layer = 2;
  s.n_embd = 16;
  s.n_head = 4;
  s.vocab_size = 32;
  s.seq = 8;
  s.micro_batch = 2;
  return s;
}

// ---- model states ----------------------------------------------------------------------

TEST(StateBytes, MixedAdamIsTwoPlusTwoPlusFourPlusFourPlusFour) {
  const StateBytesPerParam b = state_bytes_per_param(Precision::kBf16, Optimizer::kAdamW);
  EXPECT_EQ(b.parameters, 2);
  EXPECT_EQ(b.gradients, 2);
  EXPECT_EQ(b.master_params, 4);
  EXPECT_EQ(b.optimizer_state, 8);  // m 4 + v 4
  EXPECT_EQ(b.total(), 16);
  EXPECT_EQ(state_bytes_per_param(Precision::kFp16, Optimizer::kAdamW).total(), 16);
}

TEST(StateBytes, Fp32AdamIsFourPlusFourPlusEightWithNoMaster) {
  const StateBytesPerParam b = state_bytes_per_param(Precision::kFp32, Optimizer::kAdamW);
  EXPECT_EQ(b.parameters, 4);
  EXPECT_EQ(b.gradients, 4);
  EXPECT_EQ(b.master_params, 0);
  EXPECT_EQ(b.optimizer_state, 8);
}

TEST(StateBytes, SgdMomentumKeepsOneFp32Buffer) {
  EXPECT_EQ(state_bytes_per_param(Precision::kFp32, Optimizer::kSgdMomentum).total(), 4 + 4 + 4);
  EXPECT_EQ(state_bytes_per_param(Precision::kBf16, Optimizer::kSgdMomentum).total(),
            2 + 2 + 4 + 4);
}

TEST(Bill, SevenBillionMixedAdamIs112GBNot98) {
  const MemoryBill b = compute_bill(params_setup(7'000'000'000, Precision::kBf16));
  EXPECT_EQ(b.states.parameters, 14 * kGB);  // not article A's "7 GB for FP16 weights"
  EXPECT_EQ(b.states.gradients, 14 * kGB);
  EXPECT_EQ(b.states.master_params, 28 * kGB);
  EXPECT_EQ(b.states.optimizer_state, 56 * kGB);
  EXPECT_EQ(b.total_bytes, 112 * kGB);
  EXPECT_FALSE(b.activations.has_value());
  EXPECT_FALSE(b.fits);  // 80 GB by default
}

TEST(Bill, Gpt3Fp32AdamIs700Plus700Plus1400GB) {
  const MemoryBill b = compute_bill(params_setup(175'000'000'000, Precision::kFp32));
  EXPECT_EQ(b.states.parameters, 700 * kGB);
  EXPECT_EQ(b.states.gradients, 700 * kGB);
  EXPECT_EQ(b.states.master_params, 0);
  EXPECT_EQ(b.states.optimizer_state, 1400 * kGB);
  EXPECT_EQ(b.total_bytes, 2800 * kGB);
}

TEST(Bill, ModelStatesOfAnyParameterCountForTheLedger) {
  // The call a ledger comparison makes: n parameters on one device, no ZeRO.
  const ModelStates s = model_states(12'345, Precision::kFp16, Optimizer::kAdamW);
  EXPECT_EQ(s.parameters, 2 * 12'345);
  EXPECT_EQ(s.gradients, 2 * 12'345);
  EXPECT_EQ(s.master_params, 4 * 12'345);
  EXPECT_EQ(s.optimizer_state, 8 * 12'345);
  EXPECT_EQ(model_states(7, Precision::kFp32, Optimizer::kSgdMomentum).total(), 12 * 7);
}

TEST(Bill, FitsComparesTotalWithDeviceMemory) {
  TrainingSetup t = params_setup(5'000'000'000, Precision::kBf16);  // 80 GB exactly
  EXPECT_TRUE(compute_bill(t).fits);
  t.device_memory_bytes = 79.9e9;
  EXPECT_FALSE(compute_bill(t).fits);
}

// ---- ZeRO ------------------------------------------------------------------------------

// ZeRO-Offload (Ren et al. 2021): the device keeps (2 + 2) P of 16-bit parameters and
// gradients (divided by the stage as before), the host the 12P/N of masters and moments. 7B
// bf16 on dp 8: ZeRO-1 keeps 28 GB on each device and 10.5 GB on its host, ZeRO-2 15.75 and
// 10.5; stage 0 on one device 28 GB and 84 GB. fits compares the device's share only.
TEST(Offload, DeviceKeepsTwoPlusTwoAndTheHostTwelvePOverN) {
  for (int stage : {0, 1, 2, 3}) {
    TrainingSetup t = params_setup(7'000'000'000, Precision::kBf16);
    t.layout.zero_stage = stage;
    t.layout.dp = stage == 0 ? 1 : 8;
    const MemoryBill plain = compute_bill(t);
    t.offload_optimizer = true;
    const MemoryBill off = compute_bill(t);
    const std::int64_t n = t.layout.dp;
    EXPECT_EQ(off.host_bytes, 12 * 7 * kGB / n) << "stage " << stage;
    EXPECT_EQ(off.total_bytes + off.host_bytes, plain.total_bytes) << "stage " << stage;
    EXPECT_EQ(plain.host_bytes, 0);
  }
  TrainingSetup t = params_setup(7'000'000'000, Precision::kBf16);
  t.layout.zero_stage = 1;
  t.layout.dp = 8;
  t.offload_optimizer = true;
  EXPECT_EQ(compute_bill(t).total_bytes, 28 * kGB);
  t.layout.zero_stage = 2;
  EXPECT_EQ(compute_bill(t).total_bytes, 14 * kGB + 14 * kGB / 8);
  // One device, 7B: 112 GB does not fit 80 GB; offloaded, 28 GB on the device does.
  TrainingSetup one = params_setup(7'000'000'000, Precision::kBf16);
  EXPECT_FALSE(compute_bill(one).fits);
  one.offload_optimizer = true;
  EXPECT_TRUE(compute_bill(one).fits);
  EXPECT_EQ(compute_bill(one).total_bytes, 28 * kGB);
  EXPECT_EQ(compute_bill(one).host_bytes, 84 * kGB);
  // fp32 Adam: no masters; the host holds the two moments, 8P.
  TrainingSetup fp32 = params_setup(1000, Precision::kFp32);
  fp32.offload_optimizer = true;
  EXPECT_EQ(compute_bill(fp32).host_bytes, 8000);
  EXPECT_EQ(compute_bill(fp32).total_bytes, 8000);
}

TEST(Zero, PaperExample7p5BOn64Gpus) {
  // ZeRO paper Figure 1: 120 GB -> 31.4 -> 16.6 -> 1.9 GB; exactly:
  //   stage 0: 16P = 120e9; stage 1: (4 + 12/64)P = 31.40625e9;
  //   stage 2: (2 + 14/64)P = 16.640625e9; stage 3: 16P/64 = 1.875e9.
  TrainingSetup t = params_setup(7'500'000'000, Precision::kFp16);
  t.layout.dp = 64;
  const std::int64_t expected[] = {120'000'000'000, 31'406'250'000, 16'640'625'000, 1'875'000'000};
  for (int stage = 0; stage <= 3; ++stage) {
    t.layout.zero_stage = stage;
    EXPECT_EQ(compute_bill(t).total_bytes, expected[stage]) << "stage " << stage;
  }
}

TEST(Zero, ExactFormulasForSeveralDataParallelDegrees) {
  const std::int64_t p = 1'048'576'000;  // 2^23 x 125: every N below divides it
  for (std::int64_t n : {1, 2, 4, 8, 16, 64, 1024}) {
    const auto bytes = [&](int stage) {
      return model_states(p, Precision::kBf16, Optimizer::kAdamW, stage, n).total();
    };
    EXPECT_EQ(bytes(0), 16 * p) << "N " << n;
    EXPECT_EQ(bytes(1), 2 * p + 2 * p + 12 * p / n) << "N " << n;  // (2 + 2 + 12/N)P
    EXPECT_EQ(bytes(2), 2 * p + 14 * p / n) << "N " << n;          // (2 + 14/N)P
    EXPECT_EQ(bytes(3), 16 * p / n) << "N " << n;                  // 16P/N
  }
}

TEST(Zero, Stage1ShardsMasterAndMomentsOnly) {
  const ModelStates s = model_states(800, Precision::kBf16, Optimizer::kAdamW, 1, 8);
  EXPECT_EQ(s.parameters, 1600);
  EXPECT_EQ(s.gradients, 1600);
  EXPECT_EQ(s.master_params, 400);    // 4 x 800/8
  EXPECT_EQ(s.optimizer_state, 800);  // 8 x 800/8
}

TEST(Zero, SeedZero1ExampleIs38p5GBNot25) {
  TrainingSetup t = params_setup(7'000'000'000, Precision::kBf16);
  t.layout.zero_stage = 1;
  t.layout.dp = 8;
  EXPECT_EQ(compute_bill(t).total_bytes, 38'500'000'000);  // 14 + 14 + 84/8
}

TEST(Zero, ShardsRoundUpWhenDpDoesNotDivide) {
  // 10 parameters over 4 ranks: each rank owns ceil(10/4) = 3 elements of the padded buffer.
  EXPECT_EQ(model_states(10, Precision::kBf16, Optimizer::kAdamW, 3, 4).total(), 16 * 3);
}

// ---- GPT-2 shapes, TP and PP -------------------------------------------------------------

TEST(Gpt2, SmallShapeHas124439808Parameters) {
  EXPECT_EQ(gpt2_param_count(gpt2_small()), 124'439'808);
}

TEST(Gpt2, PositionTableDefaultsToSeq) {
  GptShape s = gpt2_small();
  s.n_positions = 0;
  EXPECT_EQ(s.positions(), 1024);
  EXPECT_EQ(gpt2_param_count(s), 124'439'808);
}

TEST(Gpt2, TensorParallelSplitsMatricesAndKeepsNormsWhole) {
  GptShape s = gpt2_small();
  s.vocab_size = 50304;  // padded so that tp divides it
  const std::int64_t c = 768, t = 4;
  const std::int64_t block = 12 * c * c / t + 7 * c / t + 6 * c;  // 6C: two LNs, two row biases
  const std::int64_t expected = 50304 * c / t + 1024 * c + 12 * block + 2 * c;
  EXPECT_EQ(gpt2_stage_param_count(s, t, 1, 0), expected);
  EXPECT_EQ(gpt2_stage_param_count(s, 1, 1, 0), gpt2_param_count(s));
}

TEST(Gpt2, PipelineStagesSplitLayersAndTheLastHoldsTheTiedHead) {
  const GptShape s = gpt2_small();
  const std::int64_t c = 768, block = 12 * c * c + 13 * c, wte = 50257 * c;
  EXPECT_EQ(gpt2_stage_param_count(s, 1, 2, 0), wte + 1024 * c + 6 * block);
  EXPECT_EQ(gpt2_stage_param_count(s, 1, 2, 1), 6 * block + 2 * c + wte);
  EXPECT_EQ(gpt2_stage_param_count(s, 1, 4, 1), 3 * block);
}

TEST(Gpt2, BillChargesTheLargestPipelineStage) {
  TrainingSetup t;
  t.shape = gpt2_small();
  t.layout.pp = 4;
  const MemoryBill b = compute_bill(t);
  for (std::int64_t stage = 0; stage < 4; ++stage) {
    const std::int64_t states =
        model_states(gpt2_stage_param_count(*t.shape, 1, 4, stage), t.precision, t.optimizer)
            .total();
    const std::int64_t acts = 3 * (4 - stage) * b.activations_per_layer;
    EXPECT_LE(states + acts, b.total_bytes) << "stage " << stage;
  }
  EXPECT_EQ(b.stage, 0);  // four micro-batches in flight outweigh the head copy
  EXPECT_EQ(b.micro_batches_in_flight, 4);
}

TEST(Gpt2, ParamsOnlyBillSplitsEvenlyOverTpAndPp) {
  TrainingSetup t = params_setup(8'000, Precision::kBf16);
  t.layout.tp = 2;
  t.layout.pp = 4;
  EXPECT_EQ(compute_bill(t).device_params, 1'000);
}

// ---- activations (Korthikanti et al. 2022) ---------------------------------------------

TEST(Activations, NoParallelismIs34sbhPlus5as2b) {
  // Eq. 1: 34 x 256 + 5 x 512 = 8704 + 2560
  EXPECT_EQ(activation_bytes_per_layer(tiny(), Precision::kBf16, 1, false, Recompute::kNone),
            11264);
}

TEST(Activations, TensorParallelMatchesEq2) {
  // sbh(10 + 24/t + 5as/(ht)), t = 2: 2560 + 3072 + 1280
  EXPECT_EQ(activation_bytes_per_layer(tiny(), Precision::kBf16, 2, false, Recompute::kNone), 6912);
}

TEST(Activations, SequenceParallelDividesEverythingByT) {
  // (sbh/t)(34 + 5as/h), t = 2: 128 x (34 + 10)
  EXPECT_EQ(activation_bytes_per_layer(tiny(), Precision::kBf16, 2, true, Recompute::kNone), 5632);
}

TEST(Activations, SelectiveRecomputeDropsTheAttentionScores) {
  // Table 2: sbh(10 + 24/t) = 256 x 22; with SP 34 sbh/t = 34 x 128
  EXPECT_EQ(activation_bytes_per_layer(tiny(), Precision::kBf16, 2, false, Recompute::kSelective),
            5632);
  EXPECT_EQ(activation_bytes_per_layer(tiny(), Precision::kBf16, 2, true, Recompute::kSelective),
            4352);
  EXPECT_EQ(activation_bytes_per_layer(tiny(), Precision::kBf16, 1, false, Recompute::kSelective),
            34 * 256);
}

TEST(Activations, FullRecomputeKeepsOnlyTheLayerInput) {
  EXPECT_EQ(activation_bytes_per_layer(tiny(), Precision::kBf16, 1, false, Recompute::kFull),
            2 * 256);
  EXPECT_EQ(activation_bytes_per_layer(tiny(), Precision::kBf16, 2, true, Recompute::kFull), 256);
}

TEST(Activations, Fp32ValuesAreFourBytesMasksStayOne) {
  // (16e + 2) sbh + (2e + 1) as^2b with e = 4: 66 x 256 + 9 x 512
  EXPECT_EQ(activation_bytes_per_layer(tiny(), Precision::kFp32, 1, false, Recompute::kNone),
            21504);
}

TEST(Activations, Gpt3LayerMatchesTheClosedForm) {
  GptShape s;  // GPT-3 175B: s 2048, h 12288, a 96, b 1
  s.n_layer = 96;
  s.n_embd = 12288;
  s.n_head = 96;
  s.vocab_size = 51200;
  s.seq = 2048;
  s.micro_batch = 1;
  const std::int64_t sbh = 2048LL * 12288;
  const std::int64_t as2b = 96LL * 2048 * 2048;
  EXPECT_EQ(activation_bytes_per_layer(s, Precision::kBf16, 1, false, Recompute::kNone),
            34 * sbh + 5 * as2b);
  EXPECT_EQ(activation_bytes_per_layer(s, Precision::kBf16, 8, false, Recompute::kNone),
            10 * sbh + 24 * sbh / 8 + 5 * as2b / 8);
}

TEST(Activations, BillCountsLayersTimesMicroBatchesInFlight) {
  TrainingSetup t;
  t.shape = tiny();
  t.layout.pp = 2;  // one layer per stage; stage 0 holds 2 micro-batches under 1F1B
  const MemoryBill b = compute_bill(t);
  EXPECT_EQ(micro_batches_in_flight(2, 0), 2);
  EXPECT_EQ(micro_batches_in_flight(2, 1), 1);
  EXPECT_EQ(b.activations.value(), 1 * 2 * 11264);
  EXPECT_EQ(b.total_bytes, b.states.total() + *b.activations);
}

// ---- invalid configurations --------------------------------------------------------------

TEST(Invalid, BadConfigurationsThrowInputError) {
  const auto with_shape = [](auto edit) {
    TrainingSetup t;
    t.shape = gpt2_small();
    edit(t);
    return t;
  };
  EXPECT_THROW(validate(with_shape([](TrainingSetup& t) { t.shape->n_head = 5; })), InputError);
  EXPECT_THROW(validate(with_shape([](TrainingSetup& t) { t.layout.tp = 5; })), InputError);
  // tp 2 does not divide GPT-2's vocabulary of 50257
  EXPECT_THROW(validate(with_shape([](TrainingSetup& t) { t.layout.tp = 2; })), InputError);
  EXPECT_THROW(validate(with_shape([](TrainingSetup& t) { t.layout.pp = 5; })), InputError);
  EXPECT_THROW(validate(with_shape([](TrainingSetup& t) { t.shape->n_layer = 0; })), InputError);
  EXPECT_THROW(validate(with_shape([](TrainingSetup& t) { t.shape->seq = -1; })), InputError);
  EXPECT_THROW(validate(with_shape([](TrainingSetup& t) { t.shape->seq = 2048; })), InputError);
  EXPECT_THROW(validate(with_shape([](TrainingSetup& t) { t.params = 10; })), InputError);
  EXPECT_THROW(validate(with_shape([](TrainingSetup& t) { t.layout.zero_stage = 4; })), InputError);
  EXPECT_THROW(validate(with_shape([](TrainingSetup& t) { t.layout.dp = 0; })), InputError);
  EXPECT_THROW(validate(with_shape([](TrainingSetup& t) { t.device_memory_bytes = 0; })),
               InputError);
  EXPECT_THROW(validate(TrainingSetup{}), InputError);  // neither params nor shape
  EXPECT_THROW(validate(params_setup(-7, Precision::kBf16)), InputError);
  EXPECT_THROW(compute_bill(params_setup(1'000'000'000'000'000'000, Precision::kBf16)), InputError);
  EXPECT_THROW(parse_precision("fp8"), InputError);
  EXPECT_THROW(parse_optimizer("lion"), InputError);
  EXPECT_THROW(parse_recompute("some"), InputError);
  EXPECT_NO_THROW(validate(with_shape([](TrainingSetup&) {})));
}

// ---- the mixpar-mem tool -----------------------------------------------------------------

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

RunResult run_tool(const std::string& flags) {
  const std::string cmd = std::string("'") + MIXPAR_MEM_PATH + "' " + flags + " 2>&1";
  RunResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(Tool, BadFlagsExitWithCode2AndOneLine) {
  const char* cases[] = {
      "",                                   // neither --params nor a shape
      "--params 7e9 --precision fp4",       // unknown precision
      "--params 7e9 --fp8-recipe delayed",  // an FP8 recipe without --precision fp8
      "--params 7e9 --amax-history 16",     // the same for the history
      "--params 7e9 --precision fp8 --fp8-recipe rowwise",
      "--params 7e9 --precision fp8 --amax-history 0",
      "--params seven",                     // unparsable
      "--params -5",                        // negative
      "--params 0",                         // zero
      "--params 7e9 --zero-stage 4",        // stage outside 0..3
      "--params 7e9 --dp 0",                // zero degree
      "--params 7e9 --device-memory lots",  // unparsable size
      "--params 7e9 --bogus",               // unknown flag
      "--n-layer 12 --n-embd 768 --n-head 5 --vocab-size 50257 --seq 64 --micro-batch 1",
      "--n-layer 12 --n-embd 768 --n-head 12 --vocab-size 50304 --seq 64 --micro-batch 1 --tp 5",
      "--n-layer 12 --n-embd 768 --n-head 12 --vocab-size 50257 --seq 64 --micro-batch 1 --pp 5",
      "--n-layer 12 --n-embd 768",  // partial shape
      // sequence parallelism without tensor parallelism: nothing to split
      ("--n-layer 12 --n-embd 768 --n-head 12 --vocab-size 50304 --seq 64 --micro-batch 1 "
       "--sequence-parallel"),
      "--params 7e9 --sequence-parallel",   // the same at tp 1 with --params
      "--params 7e9 --recompute full",      // no shape: no activations to recompute
      "--params 7e9 --tp 4294967297",       // out of range, never cut to 32 bits
      "--params 7e9 --dp 1e18 --zero-stage 3",
      "--params 7e9 --dp 2 --dp 4",         // given twice
      "--params 0x10",                      // hexadecimal
  };
  for (const char* flags : cases) {
    const RunResult r = run_tool(flags);
    EXPECT_EQ(r.exit_code, kExitInputError) << flags << "\n" << r.output;
    EXPECT_EQ(r.output.rfind("mixpar-mem: error: ", 0), 0u) << flags << "\n" << r.output;
    ASSERT_FALSE(r.output.empty());
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << flags << "\n" << r.output;
  }
}

std::int64_t json_int(const std::string& json, const std::string& key) {
  return Json::parse(json, "mixpar-mem --json").at(key).as_int();
}

TEST(Tool, JsonTotalBytesMatchesTheLibrary) {
  const RunResult r = run_tool(
      "--n-layer 12 --n-embd 768 --n-head 12 --vocab-size 50257 --seq 1024 --micro-batch 4 "
      "--dp 8 --zero-stage 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  TrainingSetup t;
  t.shape = gpt2_small();
  t.layout.dp = 8;
  t.layout.zero_stage = 1;
  const MemoryBill b = compute_bill(t);
  EXPECT_EQ(json_int(r.output, "total_bytes"), b.total_bytes);
  EXPECT_EQ(json_int(r.output, "activations_bytes"), *b.activations);
  EXPECT_EQ(json_int(r.output, "master_params_bytes"), b.states.master_params);
  EXPECT_EQ(json_int(r.output, "model_params"), 124'439'808);
}

// --offload-optimizer: the table's totals are the device's and the host's, the layout says so,
// and --json adds host_bytes (total_bytes then being the device's), equal to the library.
TEST(Tool, OffloadPrintsTheDeviceAndTheHostBills) {
  const RunResult r = run_tool("--params 7e9 --zero-stage 1 --dp 8 --offload-optimizer");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("optimizer offloaded to host"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("device total"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("host total (masters, state)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("10,500,000,000"), std::string::npos) << r.output;  // 12P/8
  EXPECT_NE(r.output.find("device memory 80 GB: fits (28 GB <= 80 GB)"), std::string::npos)
      << r.output;
  const RunResult j = run_tool("--params 7e9 --zero-stage 1 --dp 8 --offload-optimizer --json");
  ASSERT_EQ(j.exit_code, 0) << j.output;
  EXPECT_EQ(json_int(j.output, "total_bytes"), 28 * kGB);
  EXPECT_EQ(json_int(j.output, "host_bytes"), 10'500'000'000);
  EXPECT_TRUE(Json::parse(j.output).at("offload_optimizer").as_bool());
  const RunResult plain = run_tool("--params 7e9 --zero-stage 1 --dp 8 --json");
  EXPECT_FALSE(Json::parse(plain.output).contains("host_bytes")) << plain.output;
}

TEST(Tool, SevenBillionReports112GBAndNamesTheSeedMistake) {
  const RunResult r = run_tool("--params 7e9 --precision bf16 --optimizer adamw");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("112,000,000,000"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("98 GB"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("7 GB for FP16"), std::string::npos) << r.output;
  const RunResult j = run_tool("--params 7e9 --json");
  EXPECT_EQ(json_int(j.output, "total_bytes"), 112 * kGB);
  EXPECT_TRUE(Json::parse(j.output).at("activations_bytes").is_null()) << j.output;
}

TEST(Tool, Gpt3Fp32PrintsTheThreeTerms) {
  const RunResult r = run_tool("--params 175e9 --precision fp32 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(json_int(r.output, "parameters_bytes"), 700 * kGB);
  EXPECT_EQ(json_int(r.output, "gradients_bytes"), 700 * kGB);
  EXPECT_EQ(json_int(r.output, "optimizer_state_bytes"), 1400 * kGB);
  EXPECT_EQ(json_int(r.output, "master_params_bytes"), 0);
}

}  // namespace
}  // namespace mixpar::mem
