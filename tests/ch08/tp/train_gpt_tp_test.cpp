// train_gpt --tp end to end: a tp run's log equals the single device's within the tolerance of
// the changed reduction order; checkpoints resume bit-exactly; --save writes the full,
// unpadded model; a layout whose heads tp does not divide exits 2 before any compute.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../train_gpt_cli.h"
#include "io/safetensors.h"

namespace {

using mixpar::ch08::test::CliRun;
using mixpar::ch08::test::read_bytes;
using mixpar::ch08::test::run_shell;
using mixpar::ch08::test::TempDir;
using mixpar::ch08::test::train_gpt;

// 2 layers, 4 heads, width 32, byte vocabulary (256: tp 2 and 4 divide it) or 257 (padded).
const std::string kBase =
    "--n-layer 2 --n-head 4 --n-embd 32 --seq 16 --batch 4 --threads 1 --lr 3e-3 ";
const std::string kModel = kBase + "--steps 10 ";

// The values of "key": in each JSONL line.
std::vector<double> field(const std::string& jsonl, const std::string& key) {
  std::vector<double> out;
  std::istringstream in(jsonl);
  for (std::string line; std::getline(in, line);) {
    const std::size_t at = line.find("\"" + key + "\":");
    if (at != std::string::npos) out.push_back(std::atof(line.c_str() + at + key.size() + 3));
  }
  return out;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = a.size() == b.size() && !a.empty() ? 0 : INFINITY;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

// Order-of-summation noise over 10 f32 steps (see tests/ch06/tensor_parallel_gpt_test.cpp): 1e-4.
constexpr double kTol = 1e-4;

// extra + what against extra + base (one device, or the same dp without tp); `launcher`, when
// given, starts the tp run (mpirun).
void expect_like_one_device(const std::string& extra, const std::string& what,
                            const std::string& launcher = "", const std::string& base = "") {
  TempDir d;
  const CliRun one =
      train_gpt(d, kModel + extra + base + " --log-jsonl " + d.file("one.jsonl"));
  ASSERT_EQ(one.code, 0) << one.err;
  const CliRun tp = run_shell(d, launcher + MIXPAR_TRAIN_GPT_PATH + " " + kModel + extra + what +
                                     " --log-jsonl " + d.file("tp.jsonl"));
  ASSERT_EQ(tp.code, 0) << tp.err << tp.out;
  const std::string a = read_bytes(d.file("one.jsonl")), b = read_bytes(d.file("tp.jsonl"));
  const double dl = max_diff(field(a, "loss"), field(b, "loss"));
  const double dn = max_diff(field(a, "grad_norm"), field(b, "grad_norm"));
  std::printf("%s%s against %s: tolerance %.0e, loss differs by %.2e, grad norm by %.2e\n",
              extra.c_str(), what.c_str(), base.empty() ? "one device" : base.c_str(), kTol, dl,
              dn);
  EXPECT_LE(dl, kTol) << what;
  EXPECT_LE(dn, kTol) << what;
}

TEST(TrainGptTp, Tp2AndTp4EqualOneDeviceAndDpTimesTpEqualsDpOverTenSteps) {
  expect_like_one_device("", "--ranks 2 --tp 2");
  expect_like_one_device("", "--ranks 4 --tp 4");
  expect_like_one_device("", "--ranks 2 --tp 2 --sequence-parallel");
  // dp 2 x tp 2 against dp 2 (a global batch of 2 x B either way).
  expect_like_one_device("", "--ranks 4 --tp 2 --dp 2", "", "--ranks 2");
}

TEST(TrainGptTp, AVocabularyTpDoesNotDivideIsPaddedAndEqualsOneDevice) {
  expect_like_one_device("--vocab-size 257 ", "--ranks 2 --tp 2");
}

#if defined(MIXPAR_MPIEXEC)
TEST(TrainGptTp, Tp2UnderMpirunEqualsOneDevice) {
  expect_like_one_device("", "--backend mpi --tp 2", mixpar::test_support::mpirun_command(2));
}
#endif

TEST(TrainGptTp, ATpRunResumesBitExactlyAndSavesTheFullUnpaddedModel) {
  TempDir d;
  const std::string tp = "--ranks 2 --tp 2 --checkpoint-dir " + d.file("ck") +
                         " --checkpoint-every 5 --checkpoint-keep 5 ";
  const CliRun straight = train_gpt(d, kModel + tp + "--log-jsonl " + d.file("straight.jsonl") +
                                        " --save " + d.file("hf"));
  ASSERT_EQ(straight.code, 0) << straight.err;
  // Roll back to step 5's checkpoint (every tp rank wrote its shard) and resume.
  std::ofstream(d.file("ck") + "/latest") << "step-00000005\n";
  const CliRun rest = train_gpt(d, kModel + tp + "--resume --log-jsonl " + d.file("rest.jsonl"));
  ASSERT_EQ(rest.code, 0) << rest.err;
  EXPECT_TRUE(std::filesystem::exists(d.file("ck") + "/step-00000005/model-pp0-dp0-cp0-tp1.safetensors"));
  const std::vector<double> a = field(read_bytes(d.file("straight.jsonl")), "loss");
  const std::vector<double> b = field(read_bytes(d.file("rest.jsonl")), "loss");
  ASSERT_EQ(a.size(), 10u);
  ASSERT_EQ(b.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(a[5 + i], b[i]) << "step " << 6 + i;
  // The saved directory is a whole model: wte [256, 32], loadable by a --tp 1 run.
  const mixpar::SafetensorsReader hf(d.file("hf") + "/model.safetensors");
  ASSERT_NE(hf.find("transformer.wte.weight"), nullptr);
  EXPECT_EQ(hf.find("transformer.wte.weight")->shape, (mixpar::Shape{256, 32}));
  const CliRun again = train_gpt(d, "--seq 16 --batch 4 --threads 1 --steps 1 --init-from " +
                                    d.file("hf"));
  EXPECT_EQ(again.code, 0) << again.err;
}

TEST(TrainGptTp, HeadsThatTpDoesNotDivideExitTwoNamingTheNumbers) {
  TempDir d;
  const CliRun r = train_gpt(d, kModel + "--ranks 3 --tp 3");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("--tp 3 does not divide n_head = 4"), std::string::npos) << r.err;
  const CliRun sp = train_gpt(d, kModel + "--sequence-parallel");
  EXPECT_EQ(sp.code, 2);
  EXPECT_NE(sp.err.find("--sequence-parallel splits the LayerNorm regions over the tp ranks"),
            std::string::npos)
      << sp.err;
}

}  // namespace
