// train_gpt --cp end to end (chapter 6's context parallelism in chapter 8's trainer): a run
// whose sequences are split over cp ranks logs the losses and gradient norms of one device
// within the tolerance of the changed reduction order, alone (cp 2 and 4, ring and
// all-to-all) and composed with dp, tp (with and without sequence parallelism), every
// pipeline schedule, ZeRO 1-3, recompute, bf16 and fp16, and a 2 x 2 x 2 x 2 grid of 16
// ranks; the JSONL's bytes per rank and layer are the formula's; a sequence one rank cannot
// hold under a budget trains at cp 4; a checkpoint written at one cp resumes at another (cp
// shards no parameter); a layout the split cannot take exits 2 before any compute. cp 2
// under mpirun equals one device too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "../train_gpt_cli.h"

namespace {

using mixpar::ch08::test::CliRun;
using mixpar::ch08::test::expect_one_line_error;
using mixpar::ch08::test::read_bytes;
using mixpar::ch08::test::run_shell;
using mixpar::ch08::test::TempDir;
using mixpar::ch08::test::train_gpt;

// 4 layers (pp 2 with 2 virtual stages needs 4), 4 heads, width 32, T 16 (2 x cp for cp 4
// divides it), byte vocabulary; 10 steps.
const std::string kModel =
    "--n-layer 4 --n-head 4 --n-embd 32 --seq 16 --threads 1 --lr 3e-3 --steps 10 "
    "--eval-every 0 ";

// Order-of-summation noise over 10 f32 steps (tests/ch06/context_parallel_gpt_test.cpp and
// tensor_parallel_gpt_test.cpp derive it): 1e-4 absolute on losses of order log V ~ 5.5 and
// norms of order 3. 16-bit runs round their activations and gradients once more or less
// where the split regroups a sum (the ring keeps its probabilities in f32 and rounds its
// output once): relative 2^-8, one bf16 ulp, which an error of the split (a skipped merge, an
// unmasked block: tests/ch06/context_parallel_test.cpp) exceeds a hundredfold.
constexpr double kTol = 1e-4;
const double kTol16 = std::ldexp(1.0, -8);

std::vector<double> field(const std::string& jsonl, const std::string& key) {
  std::vector<double> out;
  std::istringstream in(jsonl);
  for (std::string line; std::getline(in, line);) {
    const std::size_t at = line.find("\"" + key + "\":");
    if (at != std::string::npos) out.push_back(std::atof(line.c_str() + at + key.size() + 3));
  }
  return out;
}

// max |a - b| / scale (scale 1: absolute; else relative to max(|a|, 1)).
double max_diff(const std::vector<double>& a, const std::vector<double>& b, bool relative) {
  double d = a.size() == b.size() && !a.empty() ? 0 : INFINITY;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double scale = relative ? std::max(std::fabs(a[i]), 1.0) : 1.0;
    d = std::max(d, std::fabs(a[i] - b[i]) / scale);
  }
  return d;
}

// base (one device unless given) against cp: the same flags otherwise; `launcher`, when
// given, starts the cp run (mpirun).
void expect_like(const std::string& base, const std::string& cp, double tol = kTol,
                 bool relative = false, const std::string& launcher = "") {
  TempDir d;
  const CliRun one = train_gpt(d, kModel + base + " --log-jsonl " + d.file("one.jsonl"));
  ASSERT_EQ(one.code, 0) << one.err;
  const CliRun run = run_shell(d, launcher + MIXPAR_TRAIN_GPT_PATH + " " + kModel + cp +
                                      " --log-jsonl " + d.file("cp.jsonl"));
  ASSERT_EQ(run.code, 0) << run.err << run.out;
  const std::string a = read_bytes(d.file("one.jsonl")), b = read_bytes(d.file("cp.jsonl"));
  const double dl = max_diff(field(a, "loss"), field(b, "loss"), relative);
  const double dn = max_diff(field(a, "grad_norm"), field(b, "grad_norm"), relative);
  std::printf("%s against %s: tolerance %.1e%s, loss differs by %.2e, grad norm by %.2e\n",
              cp.c_str(), base.empty() ? "one device" : base.c_str(), tol,
              relative ? " (relative)" : "", dl, dn);
  EXPECT_LE(dl, tol) << cp;
  EXPECT_LE(dn, tol) << cp;
}

TEST(TrainGptCp, Cp2And4RingAndAllToAllEqualOneDevice) {
  expect_like("--batch 4", "--batch 4 --ranks 2 --cp 2");
  expect_like("--batch 4", "--batch 4 --ranks 4 --cp 4");
  expect_like("--batch 4", "--batch 4 --ranks 2 --cp 2 --cp-algo all-to-all");
  expect_like("--batch 4", "--batch 4 --ranks 4 --cp 4 --cp-algo all-to-all");
}

#if defined(MIXPAR_MPIEXEC)
TEST(TrainGptCp, Cp2UnderMpirunEqualsOneDevice) {
  expect_like("--batch 4", "--batch 4 --backend mpi --cp 2", kTol, false,
              mixpar::test_support::mpirun_command(2));
}
#endif

TEST(TrainGptCp, ComposesWithDataAndTensorParallelism) {
  // dp 2 x B 4 reads the rows one device reads with B 8.
  expect_like("--batch 8", "--batch 4 --ranks 4 --dp 2 --cp 2");
  expect_like("--batch 4", "--batch 4 --ranks 4 --tp 2 --cp 2");
  expect_like("--batch 4", "--batch 4 --ranks 4 --tp 2 --cp 2 --sequence-parallel");
}

TEST(TrainGptCp, ComposesWithEveryPipelineSchedule) {
  for (const char* s : {"afab", "1f1b", "zb-h1"}) {
    expect_like("--batch 4 --grad-accum 4",
                std::string("--batch 4 --grad-accum 4 --ranks 4 --pp 2 --cp 2 --schedule ") + s);
  }
  expect_like("--batch 4 --grad-accum 4",
              "--batch 4 --grad-accum 4 --ranks 4 --pp 2 --cp 2 --schedule interleaved "
              "--virtual-stages 2");
}

TEST(TrainGptCp, ComposesWithZeroStagesOneToThree) {
  for (const char* z : {"1", "2", "3"}) {
    expect_like("--batch 8", std::string("--batch 4 --ranks 4 --dp 2 --cp 2 --zero-stage ") + z);
  }
}

TEST(TrainGptCp, ComposesWithRecomputeBf16AndFp16) {
  expect_like("--batch 4 --recompute", "--batch 4 --ranks 2 --cp 2 --recompute");
  expect_like("--batch 4 --dtype bf16", "--batch 4 --ranks 2 --cp 2 --dtype bf16", kTol16, true);
  expect_like("--batch 4 --dtype fp16", "--batch 4 --ranks 2 --cp 2 --dtype fp16", kTol16, true);
}

TEST(TrainGptCp, SixteenRanksDpTpCpPpTwoEachEqualOneDevice) {
  expect_like("--batch 8 --grad-accum 2",
              "--batch 4 --grad-accum 2 --ranks 16 --dp 2 --tp 2 --cp 2 --pp 2");
}

// cp shards nothing: a checkpoint written by cp 2 (cp rank 0's files, named as dp 1's) resumes
// at cp 4 and at cp 1, and the rest of the run is one device's.
TEST(TrainGptCp, ACheckpointWrittenAtOneCpResumesAtAnother) {
  TempDir d;
  const CliRun one = train_gpt(d, kModel + "--batch 4 --log-jsonl " + d.file("one.jsonl"));
  ASSERT_EQ(one.code, 0) << one.err;
  const std::vector<double> want = field(read_bytes(d.file("one.jsonl")), "loss");
  ASSERT_EQ(want.size(), 10u);
  for (const char* resume_at : {"--ranks 4 --cp 4", "--ranks 1"}) {
    const std::string ck = d.file(std::string("ck") + resume_at[8]);
    const CliRun first = train_gpt(d,
                                   "--n-layer 4 --n-head 4 --n-embd 32 --seq 16 --threads 1 "
                                   "--lr 3e-3 --steps 5 --eval-every 0 --batch 4 --ranks 2 "
                                   "--cp 2 --checkpoint-dir " +
                                       ck);
    ASSERT_EQ(first.code, 0) << first.err;
    const CliRun rest =
        train_gpt(d, kModel + "--batch 4 --resume --checkpoint-dir " + ck + " " + resume_at +
                         " --log-jsonl " + d.file("rest.jsonl") + " --overwrite");
    ASSERT_EQ(rest.code, 0) << rest.err;
    const std::vector<double> got = field(read_bytes(d.file("rest.jsonl")), "loss");
    ASSERT_EQ(got.size(), 5u) << resume_at;
    double diff = 0;
    for (std::size_t i = 0; i < 5; ++i) diff = std::max(diff, std::fabs(got[i] - want[5 + i]));
    std::printf(
        "cp 2 for 5 steps, then %s: losses of steps 6-10 differ from one device's by "
        "%.2e (tolerance %.0e)\n",
        resume_at, diff, kTol);
    EXPECT_LE(diff, kTol) << resume_at;
  }
}

// The JSONL's bytes per rank: a run with 4 layers less one with 2 is what 2 layers add, their
// attention's traffic (ring: (cp - 1) 2 + (cp - 1) 4 + 2 units of B (T/cp) C f32 values;
// all-to-all: 2 x (cp - 1)/cp 4 units) and their gradients' all-reduce over cp (2 (cp - 1)/cp
// of 12C^2 + 13C f32 values a layer, exactly: every tensor's size is even).
TEST(TrainGptCp, BytesEachRankSendsPerLayerEqualTheFormulaInTheJsonl) {
  const std::int64_t B = 4, T = 16, C = 32, cp = 2, Tl = T / cp;
  const double grads = 2.0 * (cp - 1) / cp * (12 * C * C + 13 * C) * 4;
  const double unit = double(B * Tl * C * 4);
  for (const char* algo : {"ring", "all-to-all"}) {
    const double attention = std::string(algo) == "ring" ? ((cp - 1) * 2 + (cp - 1) * 4 + 2) * unit
                                                         : 2.0 * (cp - 1) / cp * 4 * unit;
    std::vector<double> bytes[2];
    TempDir d;
    for (int k = 0; k < 2; ++k) {
      const std::string layers = k == 0 ? "2" : "4";
      const CliRun r = train_gpt(d, "--n-layer " + layers +
                                        " --n-head 4 --n-embd 32 --seq 16 "
                                        "--batch 4 --steps 1 --eval-every 0 --threads 1 --ranks 2 "
                                        "--cp 2 --cp-algo " +
                                        algo + " --log-jsonl " + d.file("run" + layers + ".jsonl"));
      ASSERT_EQ(r.code, 0) << r.err;
      for (const mixpar::Json& line :
           mixpar::ch08::test::read_jsonl(d.file("run" + layers + ".jsonl"))) {
        if (const mixpar::Json* per_rank = line.find("comm_bytes_by_rank")) {
          for (std::size_t i = 0; i < per_rank->size(); ++i) {
            bytes[k].push_back(per_rank->at(i).as_double());
          }
        }
      }
    }
    ASSERT_EQ(bytes[0].size(), 2u) << algo;
    ASSERT_EQ(bytes[1].size(), 2u) << algo;
    for (std::size_t rank = 0; rank < 2; ++rank) {
      const double per_layer = (bytes[1][rank] - bytes[0][rank]) / 2;
      std::printf("%s cp 2, rank %zu: %.0f bytes per layer = attention %.0f + gradients %.0f\n",
                  algo, rank, per_layer, attention, grads);
      EXPECT_EQ(per_layer, attention + grads) << algo << " rank " << rank;
    }
  }
}

// The pre-flight checklist's cp traffic (--dry-run) is what a step then sends over the cp
// group: the JSONL's comm_bytes_by_group "cp" (rank 0's).
TEST(TrainGptCp, DryRunCpTrafficIsWhatTheStepSends) {
  for (const char* algo : {"ring", "all-to-all"}) {
    TempDir d;
    const std::string run = std::string(
                                "--n-layer 2 --n-head 4 --n-embd 32 --seq 16 --batch 4 "
                                "--steps 1 --eval-every 0 --threads 1 --ranks 2 --cp 2 "
                                "--cp-algo ") +
                            algo;
    const CliRun dry = train_gpt(d, run + " --dry-run");
    ASSERT_EQ(dry.code, 0) << dry.err;
    const std::size_t at = dry.out.find(", cp ");
    ASSERT_NE(at, std::string::npos) << dry.out;
    const double kib = std::atof(dry.out.c_str() + at + 5);
    ASSERT_NE(dry.out.find("KiB (", at), std::string::npos) << dry.out;
    const CliRun real = train_gpt(d, run + " --log-jsonl " + d.file("run.jsonl"));
    ASSERT_EQ(real.code, 0) << real.err;
    const std::vector<mixpar::Json> lines = mixpar::ch08::test::read_jsonl(d.file("run.jsonl"));
    double sent = -1;
    for (const mixpar::Json& line : lines) {
      if (const mixpar::Json* g = line.find("comm_bytes_by_group")) sent = g->at("cp").as_double();
    }
    std::printf("%s: pre-flight cp %.2f KiB, the step sent %.0f bytes over cp\n", algo, kib, sent);
    EXPECT_NEAR(kib * 1024, sent, 0.005 * 1024) << algo;  // printed to 1/100 KiB
  }
}

// T 512: one device keeps B H T^2 attention probabilities per layer (8 MiB in f32) and more
// than the budget in all; split over cp 4, a rank keeps T / 4 rows and one log-sum-exp per row
// and head. The pre-flight bill refuses the first and admits the second, and the ledger's
// measured peaks of the first step agree (at the end of a run rank 0 also gathers the whole
// model for the built-in dataset's evaluation, as with tp: not a training step's memory).
TEST(TrainGptCp, ASequenceOneRankCannotHoldTrainsWithCp4UnderTheSameBudget) {
  TempDir d;
  const std::string run =
      "--n-layer 2 --n-head 4 --n-embd 32 --seq 512 --batch 2 --steps 2 "
      "--eval-every 0 --threads 1 ";
  const double budget = 8.0 * 1024 * 1024;
  const CliRun one = train_gpt(d, run + "--device-memory 8MiB");
  EXPECT_EQ(one.code, 2);
  EXPECT_NE(one.err.find("over --device-memory 8.00 MiB"), std::string::npos) << one.err;
  const CliRun measured = train_gpt(d, run + "--log-jsonl " + d.file("one.jsonl"));
  ASSERT_EQ(measured.code, 0) << measured.err;
  const CliRun cp =
      train_gpt(d, run + "--ranks 4 --cp 4 --device-memory 8MiB --log-jsonl " + d.file("cp.jsonl"));
  ASSERT_EQ(cp.code, 0) << cp.err;
  const std::vector<double> peak_one = field(read_bytes(d.file("one.jsonl")), "mem_peak_bytes");
  const std::vector<double> peak_cp = field(read_bytes(d.file("cp.jsonl")), "mem_peak_bytes");
  ASSERT_FALSE(peak_one.empty());
  ASSERT_FALSE(peak_cp.empty());
  std::printf("T 512: one device peaks at %.2f MiB, a cp 4 rank at %.2f MiB (budget 8 MiB)\n",
              peak_one.front() / 1048576, peak_cp.front() / 1048576);
  EXPECT_GT(peak_one.front(), budget);
  EXPECT_LT(peak_cp.front(), budget);
}

TEST(TrainGptCp, ALayoutTheSplitCannotTakeExitsTwoNamingTheNumbers) {
  TempDir d;
  expect_one_line_error(d, "--seq 18 --n-positions 18 --ranks 2 --cp 2",
                        "--cp 2: --seq 18 is not divisible by 2 x cp = 4");
  expect_one_line_error(d, "--n-head 4 --n-embd 32 --seq 16 --ranks 8 --cp 8 --cp-algo all-to-all",
                        "--cp-algo all-to-all: --cp 8 does not divide the 4 heads of a tp rank");
  expect_one_line_error(d, "--cp-algo bogus", "--cp-algo");
  expect_one_line_error(d, "--cp 0", "--cp must be at least 1, got 0");
  expect_one_line_error(d, "--ranks 4 --tp 2 --cp 3",
                        "--dp 1 x --tp 2 x --cp 3 x --pp 1 = 6 ranks, but the run has 4");
}

}  // namespace
