// Optimizer offload (--offload-optimizer, ZeRO-Offload): the FP32 masters, the FP32 gradient
// copy and the AdamW moments of this rank's shard are billed to the ledger's host side, the
// device keeping the working parameters and gradients; the CPU engine's step is unchanged, so
// every loss, norm and weight has the bits of the same run without offload (one device, DDP,
// ZeRO-1, 2 and 3; fp32 and bf16); mixpar-mem's device and host bills agree with the ledger;
// --device-memory budgets the device's share only, so a run refused without offload runs with
// it; and the pre-flight and the JSONL show the two sides apart.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../ch08_test_util.h"
#include "../train_gpt_cli.h"
#include "ch03_master_weights/memory_calculator.h"
#include "ch05_zero/zero_stage3.h"
#include "preflight.h"
#include "trainer.h"

namespace mixpar::ch08 {
namespace {

using test::random_data;
using test::tiny_config;

TrainerConfig offload_config(int ranks, int stage, DType dtype, bool offload) {
  TrainerConfig c = tiny_config();
  c.data_order = DataOrder::kSequential;
  c.steps = 4;
  c.schedule = LrSchedule{LrScheduleKind::kCosine, 1e-2, 1e-3, 1, 4};
  c.ranks = c.dp = ranks;
  c.threads = 1;
  c.dtype = dtype;
  c.zero_stage = stage;
  c.grad_clip = 0.05;  // below the tiny model's norms: every step clips
  c.grad_accum = 2;
  c.offload_optimizer = offload;
  return c;
}

struct RankRun {
  std::vector<StepStats> steps;
  std::vector<std::vector<float>> stepped;  // what the optimizer stepped, after the last step
  std::vector<unsigned char> weights;       // the working copy (ZeRO-3: its shard)
  RankMetrics metrics;
  std::int64_t stepped_elements = 0;
};

RankRun finish(Trainer& t, RankRun r) {
  for (const Tensor& p : t.optimizer().stepped_params()) {
    r.stepped.push_back(p.to_floats());
    r.stepped_elements += p.numel();
  }
  const auto* z3 = dynamic_cast<const ch05::ZeroStage3*>(&t.grad_sync());
  if (z3 != nullptr) {
    for (const Tensor& p : z3->shard_params()) {
      const std::vector<unsigned char> b = test::bytes_of(p);
      r.weights.insert(r.weights.end(), b.begin(), b.end());
    }
  } else {
    r.weights = test::bytes_of(t.model().registry().flat_params());
  }
  return r;
}

// Rank 0's run: on one device without a communicator, else on `ranks` local threads.
RankRun run(const TrainerConfig& c) {
  const TrainingData data = random_data(4096);
  // One device bills the calling thread's ledger: a fresh one, so that its metrics are this
  // run's alone, as each local rank's thread has its own.
  MemoryLedger ledger;
  std::optional<LedgerScope> scope;
  if (c.ranks == 1) scope.emplace(ledger);
  return test::train_on_each_rank(c, data, [&](Trainer& t, int rank) {
    RankRun r;
    while (t.step() < c.steps) r.steps.push_back(t.train_step());
    r.metrics = t.gather_rank_metrics()[static_cast<std::size_t>(rank)];
    return finish(t, std::move(r));
  })[0];
}

std::size_t at(const std::array<std::size_t, kNumMemCategories>& m, MemCategory c) {
  return m[static_cast<std::size_t>(c)];
}

struct Case {
  int ranks, stage;
  DType dtype;
};

class OffloadKeepsTheBits : public ::testing::TestWithParam<Case> {};

// The step's arithmetic does not depend on where its buffers are billed: every step's loss,
// norm and clip coefficient, the stepped FP32 values and the working copy equal, bit for bit;
// and what the run without offload bills to the device (masters, moments, the FP32 gradient
// copy of a 16-bit run) is what the offloaded run bills to the host.
TEST_P(OffloadKeepsTheBits, AndMovesTheOptimizersBytesToTheHost) {
  const Case k = GetParam();
  const RankRun a = run(offload_config(k.ranks, k.stage, k.dtype, false));
  const RankRun b = run(offload_config(k.ranks, k.stage, k.dtype, true));
  ASSERT_EQ(a.steps.size(), b.steps.size());
  int clipped = 0;
  for (std::size_t s = 0; s < a.steps.size(); ++s) {
    EXPECT_EQ(a.steps[s].loss, b.steps[s].loss) << "step " << s + 1;
    EXPECT_EQ(a.steps[s].grad_norm, b.steps[s].grad_norm) << "step " << s + 1;
    EXPECT_EQ(a.steps[s].clip_coef, b.steps[s].clip_coef) << "step " << s + 1;
    clipped += a.steps[s].clip_coef < 1.0;
  }
  EXPECT_GT(clipped, 0);
  EXPECT_EQ(a.stepped, b.stepped);
  EXPECT_EQ(a.weights, b.weights);

  const auto& dev_a = a.metrics.mem;
  const auto& dev_b = b.metrics.mem;
  const auto& host_b = b.metrics.host_mem;
  for (MemCategory c : kAllMemCategories) EXPECT_EQ(a.metrics.host_mem[std::size_t(c)], 0u);
  const auto o = static_cast<std::size_t>(a.stepped_elements);  // this rank's stepped elements
  const bool mixed = k.dtype != DType::kF32;
  // The moments always move; 16-bit runs also move their masters and FP32 gradient copy
  // (fp32 runs step the working copy itself, which stays on the device).
  EXPECT_EQ(at(host_b, MemCategory::kOptimizerState), 8 * o);
  EXPECT_EQ(at(dev_b, MemCategory::kOptimizerState), 0u);
  EXPECT_EQ(at(host_b, MemCategory::kMasterParams), mixed ? 4 * o : 0u);
  EXPECT_EQ(at(dev_b, MemCategory::kMasterParams), 0u);
  EXPECT_EQ(at(host_b, MemCategory::kGradients), mixed ? 4 * o : 0u);
  EXPECT_EQ(at(dev_b, MemCategory::kGradients) + at(host_b, MemCategory::kGradients),
            at(dev_a, MemCategory::kGradients));
  EXPECT_EQ(at(dev_b, MemCategory::kParameters), at(dev_a, MemCategory::kParameters));
  EXPECT_EQ(at(dev_a, MemCategory::kOptimizerState), 8 * o);
}

const auto kCases = ::testing::Values(
    Case{1, 0, DType::kF32}, Case{1, 0, DType::kBF16}, Case{2, 0, DType::kF32},
    Case{2, 0, DType::kBF16}, Case{2, 1, DType::kF32}, Case{2, 1, DType::kBF16},
    Case{2, 2, DType::kBF16}, Case{2, 3, DType::kBF16});
std::string case_name(const ::testing::TestParamInfo<Case>& p) {
  return std::string(dtype_name(p.param.dtype)) + "_N" + std::to_string(p.param.ranks) +
         "_stage" + std::to_string(p.param.stage);
}
INSTANTIATE_TEST_SUITE_P(Runs, OffloadKeepsTheBits, kCases, case_name);

// mixpar-mem --offload-optimizer (chapter 3's calculator) against rank 0's ledger after a real
// ZeRO run with one bucket (rank 0 then owns ceil(P/N) elements, the calculator's shard): the
// device bill is the working parameters and 16-bit gradients to the byte, the host bill the
// masters and moments to the byte; the ledger's host side adds the FP32 gradient copy the step
// reads, 4 bytes per stepped element, which the paper's count (and the calculator) omits.
TEST(Offload, MixparMemsDeviceAndHostBillsAgreeWithTheLedger) {
  for (int stage : {0, 1, 2}) {
    for (int n : {1, 2}) {
      if (n == 1 && stage > 0) continue;
      TrainerConfig c = offload_config(n, stage, DType::kBF16, true);
      c.bucket_mb = 25;
      const RankRun r = run(c);
      const ParamRegistry reg = make_gpt2_registry(c.model);
      mem::TrainingSetup setup;
      setup.params = reg.numel();
      setup.precision = mem::Precision::kBf16;
      setup.layout.zero_stage = stage;
      setup.layout.dp = n;
      setup.offload_optimizer = true;
      const mem::MemoryBill bill = mem::compute_bill(setup);
      SCOPED_TRACE("stage " + std::to_string(stage) + ", N = " + std::to_string(n));
      const auto& dev = r.metrics.mem;
      const auto& host = r.metrics.host_mem;
      EXPECT_EQ(static_cast<std::int64_t>(at(dev, MemCategory::kParameters) +
                                          at(dev, MemCategory::kGradients)),
                bill.total_bytes);
      EXPECT_EQ(static_cast<std::int64_t>(at(host, MemCategory::kMasterParams) +
                                          at(host, MemCategory::kOptimizerState)),
                bill.host_bytes);
      EXPECT_EQ(static_cast<std::int64_t>(at(host, MemCategory::kGradients)),
                4 * r.stepped_elements);
      // 12P at stage 0, 12P/N sharded
      EXPECT_EQ(bill.host_bytes, 12 * (stage == 0 ? reg.numel() : (reg.numel() + n - 1) / n));
    }
  }
}

// The pre-flight's --device-memory check reads the device's bill: a budget below the whole
// bill but above the device's share is refused without offload and passes with it; the
// refusal says that offload would move the optimizer's bytes.
TEST(Offload, ADeviceBudgetThatRefusesTheRunPassesWithOffload) {
  TrainerConfig c = offload_config(1, 0, DType::kBF16, false);
  const RankBill bill = estimate_rank_bill(c);
  ASSERT_GT(bill.total(), 0);
  c.device_memory = static_cast<double>(bill.total()) - 1.0;
  const std::string err = test::input_error_of([&] { check_memory(c, 1, -1); });
  EXPECT_NE(err.find("over --device-memory"), std::string::npos) << err;
  EXPECT_NE(err.find("--offload-optimizer moves"), std::string::npos) << err;
  c.offload_optimizer = true;
  const RankBill offloaded = estimate_rank_bill(c);
  EXPECT_EQ(offloaded.device_total(), bill.param_bytes + bill.grad_bytes + bill.activation_bytes);
  EXPECT_EQ(offloaded.host_total(), bill.master_bytes + bill.fp32_grad_bytes + bill.optimizer_bytes);
  EXPECT_EQ(offloaded.total(), bill.total());
  EXPECT_NO_THROW(check_memory(c, 1, -1));
  // Below the device's share even with offload: refused, naming the device's bytes.
  c.device_memory = static_cast<double>(offloaded.device_total()) - 1.0;
  const std::string still = test::input_error_of([&] { check_memory(c, 1, -1); });
  EXPECT_NE(still.find("of device memory, over --device-memory"), std::string::npos) << still;
}

const std::string kCli =
    "--n-layer 2 --n-head 2 --n-embd 16 --seq 8 --batch 2 --threads 1 --steps 3 "
    "--data-order sequential --eval-every 0 --dtype bf16 ";

// As a user runs it: --device-memory 100KiB refuses the tiny bf16 model (188.50 KiB a rank in
// all) in one line with exit code 2; with --offload-optimizer the same budget passes the
// pre-flight (the device's share is 61.75 KiB), whose memory line shows the two sides.
TEST(TrainGptOffload, ADeviceBudgetRefusedWithoutOffloadRunsWithIt) {
  test::TempDir d;
  test::expect_one_line_error(d, kCli + "--device-memory 100KiB", "--offload-optimizer moves");
  const test::CliRun dry =
      test::train_gpt(d, kCli + "--device-memory 100KiB --offload-optimizer --dry-run");
  ASSERT_EQ(dry.code, 0) << dry.err;
  EXPECT_NE(dry.out.find("per rank device: parameters"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("; host (offloaded): master weights"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("of --device-memory 100.00 KiB (device "), std::string::npos) << dry.out;
  // A device budget below even the device's share is refused with offload too.
  test::expect_one_line_error(d, kCli + "--device-memory 40KiB --offload-optimizer",
                              "of device memory, over --device-memory 40.00 KiB");
}

// The JSONL of an offloaded run: mem_bytes (the device's) without masters or moments, and
// host_mem_bytes / host_mem_bytes_by_rank with them; the losses are the run's without offload.
TEST(TrainGptOffload, TheLogShowsDeviceAndHostApartAndTheSameLosses) {
  test::TempDir d;
  const std::string run = kCli + "--ranks 2 --zero-stage 1 ";
  ASSERT_EQ(test::train_gpt(d, run + "--log-jsonl " + d.file("plain.jsonl")).code, 0);
  const test::CliRun off =
      test::train_gpt(d, run + "--offload-optimizer --log-jsonl " + d.file("off.jsonl"));
  ASSERT_EQ(off.code, 0) << off.err;
  EXPECT_NE(off.out.find("| host (offloaded): master weights "), std::string::npos) << off.out;
  const std::vector<Json> a = test::read_jsonl(d.file("plain.jsonl"));
  const std::vector<Json> b = test::read_jsonl(d.file("off.jsonl"));
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].at("loss").as_double(), b[i].at("loss").as_double()) << i;
    EXPECT_EQ(a[i].at("grad_norm").as_double(), b[i].at("grad_norm").as_double()) << i;
    EXPECT_FALSE(a[i].contains("host_mem_bytes"));
    EXPECT_EQ(b[i].at("mem_bytes").at("master_params").as_int(), 0);
    EXPECT_EQ(b[i].at("mem_bytes").at("optimizer_state").as_int(), 0);
    EXPECT_EQ(b[i].at("host_mem_bytes").at("master_params").as_int(),
              a[i].at("mem_bytes").at("master_params").as_int());
    EXPECT_EQ(b[i].at("host_mem_bytes").at("optimizer_state").as_int(),
              a[i].at("mem_bytes").at("optimizer_state").as_int());
    const Json& by_rank = b[i].at("host_mem_bytes_by_rank");
    ASSERT_EQ(by_rank.size(), 2u);
    EXPECT_EQ(by_rank.at(1).at("optimizer_state").as_int(),
              a[i].at("mem_bytes_by_rank").at(1).at("optimizer_state").as_int());
  }
}

}  // namespace
}  // namespace mixpar::ch08
