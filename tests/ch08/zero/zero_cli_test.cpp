// train_gpt --zero-stage as a user runs it: a stage that is not 0-3, or a layout it does not
// run, is one line and exit code 2 before any compute; --zero-stage 1, 2 and 3 on 2 local ranks
// log DDP's losses and norms bit for bit, and so do MPI processes (the MPI backend's default rank-order
// reduction: the same kernel in the same order).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>

#include "../ch08_test_util.h"
#include "../train_gpt_cli.h"
#include "util/json.h"

#ifndef MIXPAR_TRAIN_GPT_PATH
#error "MIXPAR_TRAIN_GPT_PATH must name the train_gpt binary"
#endif

namespace mixpar::ch08 {
namespace {

using test::CliRun;
using test::expect_one_line_error;
using test::read_jsonl;
using test::run_shell;
using test::TempDir;
using test::train_gpt;

const std::string kRun =
    "--n-layer 2 --n-head 2 --n-embd 16 --seq 8 --batch 2 --threads 1 --steps 8 "
    "--data-order sequential --eval-every 0 --grad-clip 0.05 --bucket-mb 0.004 --dtype bf16 ";

// The JSONL numbers are shortest round-trip decimals: equal text, equal bits.
void expect_same_bits(const std::string& a, const std::string& b) {
  const std::vector<Json> x = read_jsonl(a), y = read_jsonl(b);
  ASSERT_EQ(x.size(), y.size());
  ASSERT_FALSE(x.empty());
  int clipped = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    for (const char* key : {"loss", "grad_norm", "clip_coef"}) {
      EXPECT_EQ(x[i].at(key).as_double(), y[i].at(key).as_double()) << key << " step " << i + 1;
    }
    clipped += x[i].at("clip_coef").as_double() < 1.0;
  }
  EXPECT_GT(clipped, 0);
}

TEST(TrainGptZero, BadStagesAreOneLineAndExitCode2) {
  TempDir d;
  expect_one_line_error(d, kRun + "--zero-stage 4", "--zero-stage 4 is not a ZeRO stage");
  expect_one_line_error(d, kRun + "--zero-stage -1", "--zero-stage -1 is not a ZeRO stage");
  expect_one_line_error(d, kRun + "--ranks 2 --zero-stage 2 --zero3-prefetch 2",
                        "--zero3-prefetch needs --zero-stage 3");
  expect_one_line_error(d, kRun + "--ranks 2 --zero-stage 3 --zero3-prefetch -1",
                        "--zero3-prefetch -1 is not a number of units");
  // Pipelines of dp > 1 replicas (with tp shards too) keep DeepSpeed's refusal.
  expect_one_line_error(d, kRun + "--ranks 4 --pp 2 --zero-stage 3", "DeepSpeed refuses");
  expect_one_line_error(d, kRun + "--ranks 8 --dp 2 --tp 2 --pp 2 --zero-stage 2",
                        "DeepSpeed refuses");
}

// Stages 1, 2 and 3 (ZeRO-3 with and without its prefetch) on 2 local ranks: DDP's JSONL.
class TrainGptZeroStage : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainGptZeroStage, LogsDdpsLossesBitForBit) {
  TempDir d;
  ASSERT_EQ(train_gpt(d, kRun + "--ranks 2 --log-jsonl " + d.file("ddp.jsonl")).code, 0);
  const CliRun r =
      train_gpt(d, kRun + "--ranks 2 " + GetParam() + " --log-jsonl " + d.file("zero.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_bits(d.file("zero.jsonl"), d.file("ddp.jsonl"));
  const std::string stage = GetParam().substr(std::string("--zero-stage ").size(), 1);
  EXPECT_NE(r.out.find("ZeRO stage " + stage), std::string::npos) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Stages, TrainGptZeroStage,
                         ::testing::Values("--zero-stage 1", "--zero-stage 2", "--zero-stage 3",
                                           "--zero-stage 3 --zero3-prefetch 0",
                                           "--zero-stage 3 --zero3-prefetch 2 --recompute"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string n = p.param.substr(2);
                           for (char& ch : n) {
                             if (ch == ' ' || ch == '-') ch = '_';
                           }
                           return n;
                         });

// --save gathers the FP32 masters from the shards: the Hugging Face file DDP writes, byte for
// byte.
TEST(TrainGptZero, StageTwoSavesDdpsModelByteForByte) {
  TempDir d;
  ASSERT_EQ(train_gpt(d, kRun + "--ranks 2 --save " + d.file("ddp")).code, 0);
  const CliRun r = train_gpt(d, kRun + "--ranks 2 --zero-stage 2 --save " + d.file("zero"));
  ASSERT_EQ(r.code, 0) << r.err;
  auto bytes = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string a = bytes(d.file("ddp") + "/model.safetensors");
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, bytes(d.file("zero") + "/model.safetensors"));
}

#if defined(MIXPAR_MPIEXEC)
using test::mpirun_train_gpt;

TEST(TrainGptZeroMpi, ProcessesLogTheLocalRanksLossesBitForBit) {
  TempDir d;
  for (int np : {2, 4}) {
    SCOPED_TRACE("mpirun -np " + std::to_string(np));
    const std::string n = std::to_string(np);
    const std::string local = d.file("local" + n + ".jsonl"), mpi = d.file("mpi" + n + ".jsonl");
    ASSERT_EQ(train_gpt(d, kRun + "--ranks " + n + " --log-jsonl " + local).code, 0);
    const CliRun r =
        run_shell(d, mpirun_train_gpt(np) + kRun + "--zero-stage 1 --log-jsonl " + mpi);
    ASSERT_EQ(r.code, 0) << r.err;
    expect_same_bits(mpi, local);  // ZeRO-1 over MPI against DDP on local ranks
  }
}

TEST(TrainGptZeroMpi, StageTwoProcessesLogTheLocalRanksLossesBitForBit) {
  TempDir d;
  const std::string local = d.file("local.jsonl"), mpi = d.file("mpi.jsonl");
  ASSERT_EQ(train_gpt(d, kRun + "--ranks 2 --zero-stage 2 --log-jsonl " + local).code, 0);
  const CliRun r = run_shell(d, mpirun_train_gpt(2) + kRun + "--zero-stage 2 --log-jsonl " + mpi);
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_bits(mpi, local);  // ZeRO-2 over 2 MPI processes against 2 local ranks
}

TEST(TrainGptZeroMpi, StageThreeProcessesLogDdpsLossesBitForBit) {
  TempDir d;
  const std::string local = d.file("local.jsonl"), mpi = d.file("mpi.jsonl");
  ASSERT_EQ(train_gpt(d, kRun + "--ranks 2 --log-jsonl " + local).code, 0);
  const CliRun r = run_shell(d, mpirun_train_gpt(2) + kRun + "--zero-stage 3 --log-jsonl " + mpi);
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_bits(mpi, local);  // ZeRO-3 over 2 MPI processes against DDP on 2 local ranks
}
#endif

}  // namespace
}  // namespace mixpar::ch08
