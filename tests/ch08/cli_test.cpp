// build/bin/train_gpt as a user runs it: every bad input is one line on stderr and exit code 2
// before any compute; the JSONL log has every signal on every step; a run interrupted and
// resumed from the command line logs the same losses as one run straight through; --ranks N
// and mpirun -np N --backend mpi log the losses of one rank with N times the batch.
#include <gtest/gtest.h>

#include <sstream>

#include "ch08_test_util.h"
#include "train_gpt_cli.h"
#include "io/token_shard.h"
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

const std::string kTiny = "--n-layer 1 --n-head 2 --n-embd 16 --seq 8 --batch 2 --threads 1 ";

TEST(TrainGptCli, BadFlagsAreOneLineAndExitCode2) {
  TempDir d;
  expect_one_line_error(d, "--bogus 1", "unknown option '--bogus'");
  expect_one_line_error(d, "--seq 32 --n-positions 16", "longer than the position table");
  expect_one_line_error(d, "--n-embd 30 --n-head 4", "not a multiple of n_head");
  expect_one_line_error(d, "--steps 0", "--steps 0 trains nothing");
  expect_one_line_error(d, "--steps -1", "--steps must be >= 0");
  expect_one_line_error(d, "--dtype fp4", "not one of fp32|bf16|fp16|fp8");
  expect_one_line_error(d, "--resume", "--resume needs --checkpoint-dir");
  expect_one_line_error(d, "--init-from " + d.file("none"), "cannot open");
  // The flag rules every tool shares (util/cli.h) and the values that would train nothing.
  expect_one_line_error(d, "--eps inf", "--eps must be positive and finite");
  expect_one_line_error(d, "--batch 0x2", "--batch: '0x2' is hexadecimal");
  expect_one_line_error(d, "--tp 2 --tp 1", "--tp is given twice");
  expect_one_line_error(d, "--seed 1e30", "--seed: '1e30' is out of range");
  // A step that would read the data set many times over, refused before any work.
  expect_one_line_error(d, "--grad-accum 100000000", "--grad-accum 100000000: one optimizer step would read");
  std::filesystem::create_directories(d.file("old_run"));
  test::write_bytes(d.file("old_run") + "/latest", "step-00000010\n");
  expect_one_line_error(d, kTiny + "--checkpoint-dir " + d.file("old_run"),
                        "already holds checkpoints: pass --resume");
}

// One rule for every output path: never into a checkpoint directory (a --save into a step's
// directory used to exit 0 and corrupt it), never over an existing output without --overwrite
// (a --save into an existing model directory used to replace it silently).
TEST(TrainGptCli, OutputsNeverGoIntoACheckpointNorOverAnOutputWithoutOverwrite) {
  TempDir d;
  const std::string ck = d.file("ck");
  ASSERT_EQ(train_gpt(d, kTiny + "--steps 2 --checkpoint-dir " + ck).code, 0);
  const std::string step = ck + "/step-00000002";
  const std::string manifest = test::read_bytes(step + "/manifest.json");
  for (const std::string& target : {step, ck, step + "/model", ck + "/other"}) {
    expect_one_line_error(d, kTiny + "--steps 1 --save " + target,
                          "--save " + target + " is inside the checkpoint directory");
  }
  expect_one_line_error(d, kTiny + "--steps 1 --log-jsonl " + step + "/log.jsonl",
                        "is inside the checkpoint directory");
  expect_one_line_error(d, kTiny + "--steps 1 --overwrite --save " + step,
                        "is inside the checkpoint directory");
  EXPECT_EQ(test::read_bytes(step + "/manifest.json"), manifest) << "the checkpoint is untouched";
  // An existing model directory, trace or log is replaced only with --overwrite.
  ASSERT_EQ(train_gpt(d, kTiny + "--steps 1 --save " + d.file("hf")).code, 0);
  const std::string model = test::read_bytes(d.file("hf") + "/model.safetensors");
  expect_one_line_error(d, kTiny + "--steps 1 --seed 2 --save " + d.file("hf"),
                        "--save " + d.file("hf") + " exists: pass --overwrite");
  EXPECT_EQ(test::read_bytes(d.file("hf") + "/model.safetensors"), model);
  const CliRun again = train_gpt(d, kTiny + "--steps 1 --seed 2 --overwrite --save " + d.file("hf"));
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(test::read_bytes(d.file("hf") + "/model.safetensors"), model);
  test::write_bytes(d.file("trace.json"), "keep");
  expect_one_line_error(d, kTiny + "--ranks 2 --steps 1 --trace " + d.file("trace.json"),
                        "pass --overwrite");
  EXPECT_EQ(test::read_bytes(d.file("trace.json")), "keep");
  test::write_bytes(d.file("log.jsonl"), "keep");
  expect_one_line_error(d, kTiny + "--steps 1 --log-jsonl " + d.file("log.jsonl"), "pass --overwrite");
  EXPECT_EQ(train_gpt(d, kTiny + "--steps 1 --overwrite --log-jsonl " + d.file("log.jsonl")).code, 0);
  EXPECT_EQ(test::read_jsonl(d.file("log.jsonl")).size(), 1u);
}

TEST(TrainGptCli, BadDataIsOneLineAndExitCode2) {
  TempDir d;
  expect_one_line_error(d, kTiny + "--data " + d.file("missing.txt"), "missing.txt");
  test::write_bytes(d.file("junk.bin"), std::string(2000, 'x'));
  expect_one_line_error(d, kTiny + "--data " + d.file("junk.bin"), "junk.bin");
  test::write_bytes(d.file("short.txt"), "0123456789");
  expect_one_line_error(d, kTiny + "--data " + d.file("short.txt"), "fewer than one batch");
  test::write_bytes(d.file("latin1.txt"), std::string(100, 'a') + "\xe9" + std::string(100, 'b'));
  expect_one_line_error(d, kTiny + "--vocab-size 128 --data " + d.file("latin1.txt"),
                        "byte 233 at offset 100 is >= vocab_size 128");
  std::vector<std::uint16_t> ids(100, 7);
  ids[42] = 300;
  write_token_shard(d.file("ids.bin"), ids);
  expect_one_line_error(d, kTiny + "--vocab-size 256 --data " + d.file("ids.bin"), "300");
}

// A learning rate that blows the fp32 weights up: step 2's loss is not finite and fp32 has no
// scaler to skip it. The run halts before the optimizer steps (exit 3, one "halted" line naming
// the step and the first layer whose output is not finite), not an "internal error" (exit 1).
TEST(TrainGptCli, ANonFiniteLossHaltsWithExitCode3NamingTheStepAndTheLayer) {
  TempDir d;
  const CliRun r = train_gpt(d, kTiny + "--steps 5 --lr 1e20 --weight-decay 0 --warmup 0");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_TRUE(r.err.starts_with("train_gpt: halted: step 2: the loss is ")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("the first output that is not finite is "), std::string::npos) << r.err;
  // On a pipeline only rank 0 replays the step; every rank halts with what it found.
  const CliRun p = train_gpt(d, "--n-layer 2 --n-head 2 --n-embd 16 --seq 8 --batch 2 --threads 1 "
                                "--ranks 2 --pp 2 --steps 5 --lr 1e20 --weight-decay 0 --warmup 0");
  EXPECT_EQ(p.code, 3) << p.err;
  EXPECT_NE(p.err.find("the first output that is not finite is "), std::string::npos) << p.err;
}

TEST(TrainGptCli, JsonlHasEverySignalOnEveryStep) {
  TempDir d;
  const CliRun r = train_gpt(
      d, kTiny + "--steps 4 --eval-every 2 --dtype fp16 --log-jsonl " + d.file("log.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<Json> lines = read_jsonl(d.file("log.jsonl"));
  ASSERT_EQ(lines.size(), 4u);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const Json& j = lines[i];
    EXPECT_EQ(j.at("step").as_int(), static_cast<std::int64_t>(i + 1));
    for (const char* key : {"loss", "grad_norm", "lr", "loss_scale", "tokens_per_s", "step_ms",
                            "mem_peak_bytes", "data_position"}) {
      EXPECT_TRUE(j.contains(key) && j.at(key).is_number()) << key << " in " << j.dump();
    }
    EXPECT_TRUE(j.at("skipped").is_bool());
    for (const char* cat : {"parameters", "gradients", "master_params", "optimizer_state",
                            "activations", "comm_buffers", "other"}) {
      EXPECT_TRUE(j.at("mem_bytes").at(cat).is_integer()) << cat;
    }
    EXPECT_GT(j.at("mem_bytes").at("master_params").as_int(), 0);  // fp16: FP32 masters
  }
  EXPECT_TRUE(lines[1].contains("heldout_accuracy"));
  EXPECT_FALSE(lines[0].contains("heldout_accuracy"));
  EXPECT_NE(r.out.find("held-out accuracy"), std::string::npos);
}

std::vector<double> losses_of(const std::string& jsonl) {
  std::vector<double> out;
  for (const Json& j : read_jsonl(jsonl)) out.push_back(j.at("loss").as_double());
  return out;
}

TEST(TrainGptCli, ResumeFromTheCommandLineContinuesTheSameRun) {
  TempDir d;
  const std::string common = kTiny + "--dtype bf16 --steps 6 --warmup 2 ";
  ASSERT_EQ(train_gpt(d, common + "--log-jsonl " + d.file("straight.jsonl")).code, 0);
  // The "interrupted" run: stops at 4 but saved its checkpoint at step 2 (and at the end).
  const std::string ckpt =
      "--checkpoint-dir " + d.file("ckpt") + " --log-jsonl " + d.file("r.jsonl");
  ASSERT_EQ(train_gpt(d, kTiny + "--dtype bf16 --steps 6 --warmup 2 --checkpoint-every 2 " + ckpt +
                             " --checkpoint-keep 1")
                .code,
            0);
  std::filesystem::remove_all(d.file("ckpt"));  // a fresh run refuses a used directory
  std::filesystem::remove(d.file("r.jsonl"));     // and an existing log
  ASSERT_EQ(train_gpt(d, common + "--checkpoint-every 2 --checkpoint-keep 5 " + ckpt).code, 0);
  // Roll back to step 4's checkpoint and resume: steps 5 and 6 are logged again, once.
  test::write_bytes(d.file("ckpt") + "/latest", "step-00000004\n");
  const CliRun r = train_gpt(d, common + "--resume " + ckpt);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("resumed from"), std::string::npos);
  EXPECT_EQ(losses_of(d.file("r.jsonl")), losses_of(d.file("straight.jsonl")));
}

TEST(TrainGptCli, SavesAHuggingFaceDirectoryAndSamples) {
  TempDir d;
  const CliRun r =
      train_gpt(d, kTiny + "--steps 2 --sample 12 --prompt 12+ --save " + d.file("hf"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(d.file("hf") + "/model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(d.file("hf") + "/config.json"));
  EXPECT_NE(r.out.find("sample (greedy, prompt \"12+\")"), std::string::npos) << r.out;
  const CliRun again = train_gpt(d, "--init-from " + d.file("hf") + " --seq 8 --batch 2 --steps 1");
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("from " + d.file("hf")), std::string::npos) << again.out;
}

TEST(TrainGptCli, BadParallelConfigIsOneLineAndExitCode2) {
  TempDir d;
  expect_one_line_error(d, kTiny + "--ranks 2 --dp 4",
                        "--dp 4 x --tp 1 x --pp 1 = 4 ranks, but the run has 2");
  expect_one_line_error(d, kTiny + "--dp 2", "--dp 2 x --tp 1 x --pp 1 = 2 ranks, but the run has 1");
  expect_one_line_error(d, kTiny + "--ranks 4 --tp 2 --pp 2 --dp 2",
                        "--dp 2 x --tp 2 x --pp 2 = 8 ranks, but the run has 4");
  expect_one_line_error(d, kTiny + "--ranks 3 --tp 3", "--tp 3 does not divide n_head = 2");
  expect_one_line_error(d, kTiny + "--ranks 2 --pp 2",
                        "--pp 2 x --virtual-stages 1 = 2 stages for 1 blocks");
  expect_one_line_error(d, kTiny + "--tp 0", "--tp");
  expect_one_line_error(d, kTiny + "--ranks 2 --global-batch 6",
                        "--global-batch 6 is not a multiple of --batch x --dp = 2 x 2 = 4");
  expect_one_line_error(d, kTiny + "--grad-accum 2 --global-batch 8",
                        "--grad-accum conflicts with --global-batch");
  expect_one_line_error(d, kTiny + "--ranks 0", "--ranks must be at least 1");
  expect_one_line_error(d, kTiny + "--ranks 2 --bucket-mb 0", "--bucket-mb must be in");
  expect_one_line_error(d, kTiny + "--ranks 2 --allreduce tree", "not one of backend|ring|naive");
  expect_one_line_error(d, kTiny + "--backend nccl", "not one of local|mpi");
  expect_one_line_error(d, kTiny + "--trace " + d.file("t.json"), "--trace records the ranks'");
  EXPECT_FALSE(std::filesystem::exists(d.file("t.json")));
}

// Step k's loss and gradient norm of two JSONL logs, within the FP32 reordering tolerance.
void expect_same_losses(const std::string& a, const std::string& b) {
  const std::vector<Json> x = read_jsonl(a), y = read_jsonl(b);
  ASSERT_EQ(x.size(), y.size());
  ASSERT_FALSE(x.empty());
  for (std::size_t i = 0; i < x.size(); ++i) {
    for (const char* key : {"loss", "grad_norm"}) {
      const double u = x[i].at(key).as_double(), v = y[i].at(key).as_double();
      EXPECT_LE(std::abs(u - v) / std::max(1.0, std::abs(v)), 1e-5) << key << " step " << i + 1;
    }
    EXPECT_EQ(x[i].at("data_position").as_int(), y[i].at("data_position").as_int());
  }
}

const std::string kDataParallel =
    "--n-layer 1 --n-head 2 --n-embd 16 --seq 8 --threads 1 --steps 10 --data-order sequential "
    "--eval-every 0 ";

TEST(TrainGptCli, RanksFlagLogsTheLossesOfOneRankWithTheWholeBatch) {
  TempDir d;
  ASSERT_EQ(train_gpt(d, kDataParallel + "--batch 4 --log-jsonl " + d.file("one.jsonl")).code, 0);
  const CliRun r = train_gpt(d, kDataParallel + "--batch 2 --ranks 2 --log-jsonl " +
                                    d.file("two.jsonl") + " --trace " + d.file("trace.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_losses(d.file("two.jsonl"), d.file("one.jsonl"));
  for (const Json& j : read_jsonl(d.file("two.jsonl"))) {
    EXPECT_EQ(j.at("ranks").as_int(), 2);
    for (const char* key : {"compute_ms", "comm_ms", "exposed_comm_ms"}) {
      EXPECT_GE(j.at(key).as_double(), 0.0) << key;
    }
  }
  EXPECT_NE(r.out.find("parallel: dp 2 x tp 1 x pp 1 grid over 2 ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| compute "), std::string::npos) << r.out;
  EXPECT_NE(test::read_bytes(d.file("trace.json")).find("\"pid\":1"), std::string::npos);
}

// The same on text (tests/data/text: Hamlet as bytes, with held-out text): a dp 2 x tp 2 x
// pp 2 grid with ZeRO-1 logs one device's losses and validation losses on the same global
// batch (the validation reads the same rows on both: windows of dp x batch rows).
TEST(TrainGptCli, AGridOnTextLogsTheLossesAndValidationLossesOfOneDevice) {
  TempDir d;
  const std::string text = std::string(MIXPAR_TEXT_FIXTURE_DIR);
  const std::string run = "--n-layer 2 --n-head 2 --n-embd 16 --seq 16 --threads 1 --steps 6 "
                          "--data-order sequential --eval-every 3 --data " + text +
                          "/hamlet_train.txt --val-data " + text + "/hamlet_val.txt ";
  ASSERT_EQ(train_gpt(d, run + "--batch 4 --log-jsonl " + d.file("one.jsonl")).code, 0);
  const CliRun r = train_gpt(d, run + "--batch 2 --ranks 8 --dp 2 --tp 2 --pp 2 --zero-stage 1 "
                                      "--log-jsonl " + d.file("grid.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_losses(d.file("grid.jsonl"), d.file("one.jsonl"));
  const std::vector<Json> grid = read_jsonl(d.file("grid.jsonl")), one = read_jsonl(d.file("one.jsonl"));
  int validated = 0;
  for (std::size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(grid[i].contains("val_loss"), one[i].contains("val_loss")) << "step " << i + 1;
    if (!one[i].contains("val_loss")) continue;
    ++validated;
    const double u = grid[i].at("val_loss").as_double(), v = one[i].at("val_loss").as_double();
    EXPECT_LE(std::abs(u - v) / v, 1e-5) << "validation loss, step " << i + 1;
  }
  EXPECT_EQ(validated, 2);
}

#if defined(MIXPAR_MPIEXEC)
using test::mpirun_train_gpt;

TEST(TrainGptMpi, ProcessesLogTheLossesOfOneRankWithTheWholeBatch) {
  TempDir d;
  for (int np : {2, 4}) {
    SCOPED_TRACE("mpirun -np " + std::to_string(np));
    const std::string one = d.file("one" + std::to_string(np) + ".jsonl");
    const std::string many = d.file("mpi" + std::to_string(np) + ".jsonl");
    ASSERT_EQ(train_gpt(d, kDataParallel + "--batch " + std::to_string(2 * np) +
                               " --log-jsonl " + one).code,
              0);
    const CliRun r = run_shell(d, mpirun_train_gpt(np) + kDataParallel + "--batch 2 --log-jsonl " +
                                      many + " --trace " + d.file("trace.json") + " --overwrite");
    ASSERT_EQ(r.code, 0) << r.err;
    expect_same_losses(many, one);
    const std::string n = std::to_string(np);
    EXPECT_NE(r.out.find("parallel: dp " + n + " x tp 1 x pp 1 grid over " + n +
                         " ranks (MPI, one process per rank)"),
              std::string::npos)
        << r.out;
    // Rank 0 alone prints: one pre-flight, one progress line per step.
    EXPECT_EQ(r.out.find("model: "), r.out.rfind("model: ")) << r.out;
    std::size_t progress = 0;
    for (std::size_t at = r.out.find("\nstep "); at != std::string::npos;
         at = r.out.find("\nstep ", at + 1)) {
      ++progress;
    }
    EXPECT_EQ(progress, 10u) << r.out;
    const std::string trace = test::read_bytes(d.file("trace.json"));
    EXPECT_NE(trace.find("\"pid\":" + std::to_string(np - 1)), std::string::npos);
  }
}

TEST(TrainGptMpi, BadConfigIsReportedOnceByRankZeroWithExitCode2) {
  TempDir d;
  for (const auto& [args, part] : std::vector<std::pair<std::string, std::string>>{
           {"--ranks 3", "--ranks 3 but mpirun started 2 processes"},
           {"--global-batch 6", "--global-batch 6 is not a multiple of --batch x --dp = "
                                "2 x 2 = 4"},
           {"--n-positions 4", "--seq 8 is longer than the position table (n_positions 4)"},
           {"--data " + d.file("missing"), "missing"}}) {
    const CliRun r = run_shell(d, mpirun_train_gpt(2) + kTiny + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_EQ(r.out, "") << args;
    // One line from train_gpt; what else mpirun prints is its own report of the exit code.
    std::size_t ours = 0;
    for (std::size_t at = r.err.find("train_gpt: error: "); at != std::string::npos;
         at = r.err.find("train_gpt: error: ", at + 1)) {
      ++ours;
    }
    EXPECT_EQ(ours, 1u) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(part), std::string::npos) << "want '" << part << "' in: " << r.err;
  }
}
#else
TEST(TrainGptMpi, ProcessesLogTheLossesOfOneRankWithTheWholeBatch) {
  GTEST_SKIP() << "this build has no MPI (install libopenmpi-dev and reconfigure)";
}
#endif

}  // namespace
}  // namespace mixpar::ch08
