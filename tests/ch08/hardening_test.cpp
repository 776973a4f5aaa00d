// train_gpt against a hostile user: every bad input found before step 1, with one line and
// exit code 2. Checkpoints whose manifest was regenerated over edited state, resumes that
// would change the run (fewer steps, another learning-rate schedule), two runs in one
// checkpoint directory, outputs that cannot be written, prompts the model cannot read, sizes
// that overflow, empty paths, non-finite weights, and ranks started with different flags.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include "ch08_test_util.h"
#include "checkpoint.h"
#include "io/safetensors.h"
#include "train_gpt_cli.h"
#include "util/json.h"

namespace mixpar::ch08 {
namespace {

namespace fs = std::filesystem;
using test::CliRun;
using test::expect_one_line_error;
using test::read_bytes;
using test::TempDir;
using test::train_gpt;
using test::write_bytes;

const std::string kTiny = "--n-layer 1 --n-head 2 --n-embd 16 --seq 8 --batch 2 --threads 1 ";

// A saved checkpoint's manifest, edited by f and written back (its checksums untouched).
void edit_manifest(const std::string& dir, const std::function<void(Json&)>& f) {
  const std::string path = dir + "/manifest.json";
  Json m = Json::parse(read_bytes(path), path);
  f(m);
  write_bytes(path, m.dump(2) + "\n");
}

// The manifest regenerated over the files as they are now: what an edit of the state followed
// by a fresh manifest looks like (the checksums then pass).
void regenerate_manifest(const std::string& dir) {
  edit_manifest(dir, [&](Json& m) {
    Json files = Json::array();
    for (const Json& f : m.at("files").as_array()) {
      const std::string name = f.at("name").as_string();
      Json g = Json::object();
      g.set("name", name);
      g.set("bytes", static_cast<std::int64_t>(fs::file_size(dir + "/" + name)));
      g.set("fnv1a64", file_checksum(dir + "/" + name));
      files.push_back(std::move(g));
    }
    m.set("files", std::move(files));
  });
}

std::string save_dummy(const TempDir& d, std::int64_t step) {
  return save_checkpoint(
      d.file("ck"), step, [](const std::string& dir) { write_bytes(dir + "/a.txt", "abc"); }, 5);
}

TEST(CheckpointManifest, AStepThatDisagreesWithItsDirectoryIsRefused) {
  TempDir d;
  const std::string dir = save_dummy(d, 4);
  EXPECT_NO_THROW(verify_checkpoint(dir));
  edit_manifest(dir, [](Json& m) { m.set("step", std::int64_t{7}); });
  const std::string e = test::input_error_of([&] { verify_checkpoint(dir); });
  EXPECT_NE(e.find(dir + "/manifest.json: step 7 disagrees with the directory's name step-00000004"),
            std::string::npos)
      << e;
}

TEST(CheckpointManifest, ANegativeStepAnEmptyListOrATwiceListedFileIsRefused) {
  TempDir d;
  const std::string dir = save_dummy(d, 2);
  const Json good = Json::parse(read_bytes(dir + "/manifest.json"));
  edit_manifest(dir, [](Json& m) { m.set("step", std::int64_t{-2}); });
  EXPECT_NE(test::input_error_of([&] { verify_checkpoint(dir); }).find("step -2 is negative"),
            std::string::npos);
  edit_manifest(dir, [&](Json& m) {
    m = good;
    m.set("files", Json::array());
  });
  EXPECT_NE(test::input_error_of([&] { verify_checkpoint(dir); }).find("the list of files is empty"),
            std::string::npos);
  edit_manifest(dir, [&](Json& m) {
    m = good;
    Json files = m.at("files");
    files.push_back(files.at(std::size_t{0}));
    m.set("files", files);
  });
  EXPECT_NE(test::input_error_of([&] { verify_checkpoint(dir); }).find("a.txt is listed twice"),
            std::string::npos);
  // A key missing or of the wrong type: the error names the manifest.
  edit_manifest(dir, [&](Json& m) {
    m = good;
    m.set("files", "none");
  });
  EXPECT_NE(test::input_error_of([&] { verify_checkpoint(dir); }).find(dir + "/manifest.json: "),
            std::string::npos);
}

TEST(CheckpointManifest, StepNamesParseOnlyAsTheirOwnFormat) {
  EXPECT_EQ(step_of_checkpoint_name("step-00000012"), 12);
  EXPECT_EQ(step_of_checkpoint_name(checkpoint_name(123456789)), 123456789);
  for (const char* bad : {"step-", "step-1x", "step--1", "stp-1", "step-1234567890123456789", ""}) {
    EXPECT_EQ(step_of_checkpoint_name(bad), -1) << bad;
  }
}

// kill -9 of a process in the middle of a save, after it wrote `files_before_kill` of the
// checkpoint's files: the previous checkpoint is still `latest` and verifies, and the next
// save of the same step succeeds over the debris.
void expect_kill_during_save_is_harmless(int files_before_kill) {
  TempDir d;
  const auto write = [](const std::string& dir) {
    write_bytes(dir + "/model.bin", std::string(4096, 'm'));
    write_bytes(dir + "/state.json", "{}");
  };
  save_checkpoint(d.file("ck"), 2, write, 5);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    save_checkpoint(
        d.file("ck"), 4,
        [&](const std::string& dir) {
          if (files_before_kill >= 1) write_bytes(dir + "/model.bin", std::string(100, 'x'));
          if (files_before_kill >= 2) write_bytes(dir + "/state.json", "{\"half\"");
          ::raise(SIGKILL);
        },
        5);
    ::_exit(0);  // not reached
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_EQ(latest_checkpoint(d.file("ck")), d.file("ck") + "/step-00000002");
  EXPECT_FALSE(fs::exists(d.file("ck") + "/step-00000004"));
  EXPECT_EQ(save_checkpoint(d.file("ck"), 4, write, 5), d.file("ck") + "/step-00000004");
  EXPECT_EQ(latest_checkpoint(d.file("ck")), d.file("ck") + "/step-00000004");
  EXPECT_FALSE(fs::exists(d.file("ck") + "/.step-00000004.partial"));
}

TEST(CheckpointCrash, AKillDuringASaveLeavesThePreviousCheckpointResumable) {
  for (int files = 0; files <= 2; ++files) {
    SCOPED_TRACE(std::to_string(files) + " files written before the kill");
    expect_kill_during_save_is_harmless(files);
  }
}

// The two moments a kill cannot be aimed at from inside write(): after the manifest (the
// partial directory complete, not yet renamed) and after the rename (step-K complete, `latest`
// not yet moved). Each leaves the directory in a state built here by hand; resuming reads the
// previous checkpoint, and the next save of step K goes through.
TEST(CheckpointCrash, AKillAfterTheManifestOrAfterTheRenameLeavesLatestValid) {
  for (const bool renamed : {false, true}) {
    SCOPED_TRACE(renamed ? "killed after the rename" : "killed after the manifest");
    TempDir d;
    const auto write = [](const std::string& dir) { write_bytes(dir + "/a.txt", "abc"); };
    save_checkpoint(d.file("ck"), 2, write, 5);
    const std::string latest = read_bytes(d.file("ck") + "/latest");
    const std::string four = save_checkpoint(d.file("ck"), 4, write, 5);
    write_bytes(d.file("ck") + "/latest", latest);  // `latest` as it was before step 4's commit
    if (!renamed) fs::rename(four, d.file("ck") + "/.step-00000004.partial");
    EXPECT_EQ(latest_checkpoint(d.file("ck")), d.file("ck") + "/step-00000002");
    EXPECT_EQ(save_checkpoint(d.file("ck"), 4, write, 5), four);
    EXPECT_EQ(latest_checkpoint(d.file("ck")), four);
  }
}

// A 2-step run with a checkpoint at the end, into d/ck.
void two_step_run(const TempDir& d, const std::string& extra = "") {
  const CliRun r =
      train_gpt(d, kTiny + "--steps 2 --warmup 1 --checkpoint-dir " + d.file("ck") + " " + extra);
  ASSERT_EQ(r.code, 0) << r.err;
}

// A real run killed (SIGKILL) right after a checkpoint commits, on one device and on a dp 2
// grid, then resumed: the JSONL holds every step exactly once, in order, and the resumed losses
// are the uninterrupted run's. The step whose checkpoint committed just before the kill used
// to be missing: its record was written after the save.
TEST(TrainGptResume, AKillRightAfterACheckpointLeavesEveryStepInTheLogExactlyOnce) {
  for (const std::string layout : {"", "--ranks 2 "}) {
    SCOPED_TRACE(layout.empty() ? "one device" : layout);
    TempDir d;
    const std::string args = kTiny + layout + "--steps 6 --warmup 1 --checkpoint-every 2 ";
    const CliRun whole = train_gpt(d, args + "--checkpoint-dir " + d.file("whole") +
                                          " --log-jsonl " + d.file("whole.jsonl"));
    ASSERT_EQ(whole.code, 0) << whole.err;
    const std::string run = args + "--checkpoint-dir " + d.file("ck") + " --log-jsonl " + d.file("log.jsonl");
    const CliRun killed = test::run_shell(d, "MIXPAR_KILL_AFTER_CHECKPOINT=4 " +
                                                 std::string(MIXPAR_TRAIN_GPT_PATH) + " " + run);
    // sh reports the kill as 128 + 9, or system() sees the signal itself (-1 here).
    EXPECT_TRUE(killed.code == 128 + SIGKILL || killed.code == -1) << killed.code << " " << killed.err;
    const CliRun resumed = train_gpt(d, run + " --resume");
    ASSERT_EQ(resumed.code, 0) << resumed.err;
    EXPECT_NE(resumed.out.find("resumed from " + d.file("ck") + " at step 4"), std::string::npos)
        << resumed.out;
    const std::vector<Json> log = test::read_jsonl(d.file("log.jsonl"));
    const std::vector<Json> want = test::read_jsonl(d.file("whole.jsonl"));
    ASSERT_EQ(log.size(), 6u);
    ASSERT_EQ(want.size(), 6u);
    for (std::size_t i = 0; i < log.size(); ++i) {
      EXPECT_EQ(log[i].at("step").as_int(), static_cast<std::int64_t>(i + 1));
      EXPECT_EQ(log[i].at("loss").as_double(), want[i].at("loss").as_double()) << "step " << i + 1;
    }
  }
}

TEST(TrainGptResume, EditedStateUnderARegeneratedManifestIsRefusedNamingTheFile) {
  TempDir d;
  two_step_run(d);
  const std::string dir = d.file("ck") + "/step-00000002";
  const std::string state = dir + "/trainer_state.json";
  const Json good = Json::parse(read_bytes(state));
  const std::string resume = kTiny + "--steps 2 --warmup 1 --resume --checkpoint-dir " + d.file("ck");
  const std::vector<std::pair<std::function<void(Json&)>, std::string>> edits = {
      {[](Json& s) { s.set("step", std::int64_t{5}); }, "step 5 disagrees with the directory"},
      {[](Json& s) { s.set("optimizer_steps", std::int64_t{-1}); }, "optimizer_steps -1 is outside"},
      {[](Json& s) { s.set("optimizer_steps", std::int64_t{3}); }, "optimizer_steps 3 is outside"},
      {[](Json& s) { s.as_object().erase(s.as_object().begin() + 3); }, state + ": "},
  };
  for (const auto& [edit, part] : edits) {
    Json s = good;
    edit(s);
    write_bytes(state, s.dump(2) + "\n");
    regenerate_manifest(dir);
    expect_one_line_error(d, resume, part);
  }
  write_bytes(state, good.dump(2) + "\n");
  regenerate_manifest(dir);
  EXPECT_EQ(train_gpt(d, resume).code, 0);
}

TEST(TrainGptResume, StepsBelowTheCheckpointsStepAreRefusedNamingBoth) {
  TempDir d;
  two_step_run(d, "--lr-schedule constant");
  expect_one_line_error(d,
                        kTiny + "--steps 1 --warmup 1 --lr-schedule constant --resume "
                                "--checkpoint-dir " + d.file("ck"),
                        "--steps 1 is below the checkpoint's step 2");
}

TEST(TrainGptResume, FlagsThatReshapeTheLearningRateScheduleAreRefused) {
  TempDir d;
  // Checkpoints at steps 2 and 4 of a 4-step cosine run; resumed from step 2.
  ASSERT_EQ(train_gpt(d, kTiny + "--steps 4 --warmup 1 --checkpoint-every 2 --checkpoint-dir " +
                             d.file("ck")).code,
            0);
  write_bytes(d.file("ck") + "/latest", "step-00000002\n");
  const std::string resume = kTiny + "--resume --checkpoint-dir " + d.file("ck") + " ";
  expect_one_line_error(d, resume + "--steps 6 --warmup 1", "--steps 6 (the run's: 4)");
  expect_one_line_error(d, resume + "--steps 4 --warmup 1 --lr 0.01",
                        "--lr 0.01 (the run's: 0.002) reshape the learning-rate schedule");
  expect_one_line_error(d, resume + "--steps 4 --warmup 3", "--warmup 3 (the run's: 1)");
  expect_one_line_error(d, resume + "--steps 4 --warmup 1 --lr-schedule constant",
                        "--lr-schedule constant (the run's: cosine)");
  EXPECT_EQ(train_gpt(d, resume + "--steps 4 --warmup 1").code, 0);
  // A constant schedule extended keeps every rate it had: that resume goes on.
  TempDir e;
  two_step_run(e, "--lr-schedule constant");
  const CliRun r = train_gpt(e, kTiny + "--steps 3 --warmup 1 --lr-schedule constant --resume "
                                        "--checkpoint-dir " + e.file("ck"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("step 3/3"), std::string::npos) << r.out;
}

TEST(TrainGptCheckpointDir, StepFoldersWithoutLatestAreAnotherRunsCheckpoints) {
  TempDir d;
  fs::create_directories(d.file("ck") + "/step-00000004");
  expect_one_line_error(d, kTiny + "--steps 1 --checkpoint-dir " + d.file("ck"),
                        "already holds checkpoints: pass --resume");
  EXPECT_TRUE(fs::exists(d.file("ck") + "/step-00000004"));
}

TEST(TrainGptCheckpointDir, ASecondRunIntoALockedDirectoryIsRefusedNamingTheHolder) {
  TempDir d;
  {
    const CheckpointDirLock held(d.file("ck"));
    EXPECT_NE(test::input_error_of([&] { CheckpointDirLock again(d.file("ck")); })
                  .find("is in use by another run (train_gpt process " + std::to_string(::getpid())),
              std::string::npos);
    expect_one_line_error(d, kTiny + "--steps 1 --checkpoint-dir " + d.file("ck"),
                          "is in use by another run (train_gpt process " +
                              std::to_string(::getpid()) + " on ");
  }
  // Released with its holder: the directory is free again.
  EXPECT_EQ(train_gpt(d, kTiny + "--steps 1 --checkpoint-dir " + d.file("ck")).code, 0);
}

TEST(TrainGptOutputs, OutputsThatCannotBeWrittenAreRefusedBeforeStep1) {
  TempDir d;
  write_bytes(d.file("file"), "x");
  expect_one_line_error(d, kTiny + "--steps 1 --save " + d.file("file"),
                        "--save " + d.file("file") + " is a file, not a directory");
  expect_one_line_error(d, kTiny + "--steps 1 --save " + d.file("file") + "/hf",
                        "is not a directory");
  expect_one_line_error(d, kTiny + "--steps 1 --dump-logits " + d.file("no/such/dir/x.st"),
                        "does not exist");
  expect_one_line_error(d, kTiny + "--steps 1 --dump-logits " + d.str(), "is a directory");
  expect_one_line_error(d, kTiny + "--steps 1 --ranks 2 --trace /proc/mixpar-trace.json",
                        "--trace /proc/mixpar-trace.json: cannot write in /proc");
  expect_one_line_error(d, kTiny + "--steps 1 --checkpoint-dir /proc/mixpar-ck",
                        "--checkpoint-dir /proc/mixpar-ck: cannot create directory");
  expect_one_line_error(d, kTiny + "--steps 1 --log-jsonl " + d.file("file"),
                        "--log-jsonl " + d.file("file") + " exists: a fresh run would replace it");
  EXPECT_EQ(read_bytes(d.file("file")), "x");
}

TEST(TrainGptInputs, PromptsTheModelCannotReadAreRefusedBeforeStep1) {
  TempDir d;
  write_bytes(d.file("text.txt"), std::string(400, 'a'));
  expect_one_line_error(d,
                        kTiny + "--steps 1 --vocab-size 128 --data " + d.file("text.txt") +
                            " --sample 4 --prompt \"$(printf 'ab\\351')\"",
                        "--prompt: byte 233 at offset 2 is outside the vocabulary (vocab_size 128)");
  // The built-in dataset's held-out prompts ("\n99+99=") need a context of 8 tokens.
  expect_one_line_error(d, "--n-layer 1 --n-head 2 --n-embd 16 --seq 6 --batch 2 --steps 1",
                        "--seq 6: the held-out problems' prompts take 7 tokens");
}

TEST(TrainGptInputs, DerivedSizesThatOverflowAreRefused) {
  TempDir d;
  expect_one_line_error(d, "--n-layer 1 --n-head 2 --n-embd 16 --seq 8 --batch 4611686018427387904",
                        "overflows a 64-bit integer");
  expect_one_line_error(d, kTiny + "--grad-accum 1152921504606846976",
                        "tokens per optimizer step: --batch 2 x --grad-accum 1152921504606846976");
  expect_one_line_error(d, kTiny.substr(0, kTiny.find("--batch")) +
                               "--batch 3 --ranks 2 --global-batch 3458764513820540928",
                        "overflows a 64-bit integer");
  expect_one_line_error(d, "--n-layer 1 --n-head 1 --n-embd 4294967296 --seq 8",
                        "GptConfig: the parameter count");
}

TEST(TrainGptInputs, EmptyPathsAreRefusedNotReadAsAbsent) {
  TempDir d;
  for (const char* flag :
       {"--data", "--checkpoint-dir", "--trace", "--save", "--log-jsonl", "--init-from", "--dump-logits"}) {
    expect_one_line_error(d, kTiny + "--steps 1 " + flag + " ''",
                          std::string(flag) + " \"\": an empty path");
  }
}

TEST(TrainGptInputs, NonFiniteInitialWeightsAreRefusedNamingTheTensor) {
  TempDir d;
  ASSERT_EQ(train_gpt(d, kTiny + "--steps 1 --save " + d.file("hf")).code, 0);
  const std::string file = d.file("hf") + "/model.safetensors";
  NamedTensors all = SafetensorsReader(file).load_all(MemCategory::kOther);
  for (auto& [name, t] : all) {
    if (name.ends_with("h.0.mlp.c_fc.weight")) t.data_as<float>()[5] = std::numeric_limits<float>::infinity();
  }
  write_safetensors(file, all);
  // Found when the weights are read, after the pre-flight lines and before step 1.
  const CliRun r = train_gpt(d, "--init-from " + d.file("hf") + " --seq 8 --batch 2 --steps 1");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("h.0.mlp.c_fc.weight holds a non-finite value (inf at element 5"),
            std::string::npos)
      << r.err;
}

// A reason found by one rank, not rank 0, is printed once, with exit code 2: the lines of
// stderr that say "train_gpt: error:" (mpirun adds its own lines around them).
void expect_reason_once(const CliRun& r, const std::string& part, const std::string& cmd) {
  EXPECT_EQ(r.code, 2) << cmd << "\n" << r.err;
  EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << cmd << "\n" << r.out;
  std::size_t lines = 0;
  for (std::size_t at = r.err.find("train_gpt: error: "); at != std::string::npos;
       at = r.err.find("train_gpt: error: ", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 1u) << cmd << "\n" << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << cmd << "\nwant '" << part << "' in: " << r.err;
  EXPECT_EQ(r.err.find("another rank"), std::string::npos) << cmd << "\n" << r.err;
}

// A ZeRO-1 checkpoint of a dp 2 run, into d/ck, broken two ways that only the rank reading
// dp 1's shard notices: its model shard deleted and struck from the manifest (an edited shard
// list), or replaced by dp 0's under a regenerated manifest (a duplicated shard). Returns the
// failing reason each way must print.
std::vector<std::pair<std::function<void(const std::string&)>, std::string>> shard_breakages() {
  const std::string shard = "model-pp0-dp1-cp0-tp0.safetensors";
  return {
      {[shard](const std::string& dir) {
         fs::remove(dir + "/" + shard);
         edit_manifest(dir, [&](Json& m) {
           Json files = Json::array();
           for (const Json& f : m.at("files").as_array()) {
             if (f.at("name").as_string() != shard) files.push_back(f);
           }
           m.set("files", std::move(files));
         });
       },
       shard + ": cannot open"},
      {[shard](const std::string& dir) {
         fs::copy_file(dir + "/model-pp0-dp0-cp0-tp0.safetensors", dir + "/" + shard,
                       fs::copy_options::overwrite_existing);
         regenerate_manifest(dir);
       },
       "step-00000002: wte.weight: the checkpoint holds"},
  };
}

// kTiny without its --batch, for layouts that keep dp x batch with another batch.
const std::string kTinyNoBatch = "--n-layer 1 --n-head 2 --n-embd 16 --seq 8 --threads 1 ";
const std::string kShardedRun = kTiny + "--ranks 2 --zero-stage 1 --steps 2 --warmup 1 ";

// Threads: resumed on the layout that wrote it and on two others (resharding reads every
// piece that overlaps a rank's own), the failing rank's reason is the one line printed.
TEST(TrainGptResume, ABrokenShardIsReportedOnceWithTheFailingRanksReason) {
  for (const auto& [brk, part] : shard_breakages()) {
    TempDir d;
    ASSERT_EQ(train_gpt(d, kShardedRun + "--checkpoint-dir " + d.file("ck")).code, 0);
    brk(d.file("ck") + "/step-00000002");
    const std::string resume = kTinyNoBatch + "--steps 2 --warmup 1 --zero-stage 1 --resume --checkpoint-dir " +
                               d.file("ck") + " ";
    for (const std::string layout : {"--ranks 2 --batch 2", "--ranks 4 --batch 1", "--ranks 2 --tp 2 --batch 4"}) {
      const std::string args = resume + layout;
      expect_reason_once(train_gpt(d, args), part, args);
    }
  }
}

// Weights read by the second pipeline stage only (block 1), non-finite: rank 1 finds it, and
// its reason, naming the tensor, is the one line printed.
void write_hf_with_inf_in_block1(const TempDir& d) {
  ASSERT_EQ(train_gpt(d, "--n-layer 2" + kTiny.substr(kTiny.find(" --n-head")) + "--steps 1 --save " +
                          d.file("hf")).code, 0);
  const std::string file = d.file("hf") + "/model.safetensors";
  NamedTensors all = SafetensorsReader(file).load_all(MemCategory::kOther);
  for (auto& [name, t] : all) {
    if (name.ends_with("h.1.mlp.c_fc.weight")) t.data_as<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  }
  write_safetensors(file, all);
}

TEST(TrainGptInputs, NonFiniteWeightsOnALaterStageAreReportedOnceByTheirStage) {
  TempDir d;
  write_hf_with_inf_in_block1(d);
  for (const std::string layout : {"--ranks 2 --pp 2", "--ranks 4 --pp 2 --tp 2"}) {
    const std::string args = "--init-from " + d.file("hf") + " --seq 8 --batch 2 --steps 1 " + layout;
    expect_reason_once(train_gpt(d, args), "h.1.mlp.c_fc.weight holds a non-finite value", args);
  }
}

#if defined(MIXPAR_MPIEXEC)
TEST(TrainGptMpi, RanksStartedWithDifferentFlagsAreRefusedNamingTheFlags) {
  TempDir d;
  // kTiny without its --batch, which each rank gives its own (a flag given twice is refused).
  std::string tiny = kTiny;
  tiny.erase(tiny.find("--batch 2 "), std::string("--batch 2 ").size());
  // mpirun's multiple-program form: one process each, rank 0's flags, ':', rank 1's.
  const std::string run =
      std::string(MIXPAR_TRAIN_GPT_PATH) + " --backend mpi " + tiny + "--steps 2 ";
  const CliRun r = test::run_shell(d, test_support::mpirun_command(1) + run +
                                          "--batch 2 --allreduce ring : -np 1 " + run +
                                          "--batch 4 --allreduce naive");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("train_gpt: error: the ranks were started with different configurations: "
                       "--batch differs on rank 1 from rank 0's 2; --allreduce differs on rank 1 "
                       "from rank 0's ring"),
            std::string::npos)
      << r.err;
}

// MPMD: one process's own flags are refused, the other's are fine. The refused process's
// reason is printed once and the whole job exits 2 at once (the good process used to wait in
// another MPI collective with no output, forever); `timeout` bounds the test if it regresses.
TEST(TrainGptMpi, AProcessWhoseOwnFlagsAreRefusedStopsTheJobWithItsReason) {
  TempDir d;
  const std::string run =
      std::string(MIXPAR_TRAIN_GPT_PATH) + " --backend mpi " + kTinyNoBatch + "--steps 2 ";
  for (const auto& [bad, good] : {std::pair{run + "--batch 0x2", run + "--batch 2"},
                                  std::pair{run + "--batch 2", run + "--batch 2 --batch 3"}}) {
    // mpirun's multiple-program form: one process each, the first's flags, ':', the second's.
    const std::string cmd =
        "timeout 60 " + test_support::mpirun_command(1) + bad + " : -np 1 " + good;
    const CliRun r = test::run_shell(d, cmd);
    const std::string why =
        bad.ends_with("0x2") ? "--batch: '0x2' is hexadecimal" : "--batch is given twice";
    expect_reason_once(r, why, cmd);
  }
}

// The same breakages under mpirun: every process reads its own pieces, and the reason of the
// process that failed is printed once, whichever process it is.
TEST(TrainGptMpi, ABrokenShardOrWeightIsReportedOnceWithTheFailingProcesssReason) {
  for (const auto& [brk, part] : shard_breakages()) {
    TempDir d;
    ASSERT_EQ(train_gpt(d, kShardedRun + "--checkpoint-dir " + d.file("ck")).code, 0);
    brk(d.file("ck") + "/step-00000002");
    const std::string cmd = test::mpirun_train_gpt(2) + kTiny +
                            "--steps 2 --warmup 1 --zero-stage 1 --resume --checkpoint-dir " + d.file("ck");
    expect_reason_once(test::run_shell(d, cmd), part, cmd);
  }
  TempDir d;
  write_hf_with_inf_in_block1(d);
  const std::string cmd = test::mpirun_train_gpt(2) + "--init-from " + d.file("hf") +
                          " --seq 8 --batch 2 --steps 1 --pp 2";
  expect_reason_once(test::run_shell(d, cmd), "h.1.mlp.c_fc.weight holds a non-finite value", cmd);
}
#endif

// A resume read NaN weights and halted steps later; --init-from refused them at once. The
// checkpoint's tensors are checked alike, after the manifest: one line naming the tensor.
TEST(TrainGptResume, NonFiniteWeightsInACheckpointAreRefusedNamingTheTensor) {
  TempDir d;
  two_step_run(d);
  const std::string dir = d.file("ck") + "/step-00000002";
  const std::string file = dir + "/model.safetensors";
  NamedTensors all = SafetensorsReader(file).load_all(MemCategory::kOther);
  bool edited = false;
  for (auto& [name, t] : all) {
    if (name.ends_with("h.0.mlp.c_fc.weight")) {
      t.data_as<float>()[3] = std::numeric_limits<float>::quiet_NaN();
      edited = true;
    }
  }
  ASSERT_TRUE(edited);
  write_safetensors(file, all);
  regenerate_manifest(dir);
  const std::string resume = kTiny + "--steps 2 --warmup 1 --resume --checkpoint-dir " + d.file("ck");
  expect_one_line_error(d, resume, "h.0.mlp.c_fc.weight holds a non-finite value (nan at element 3");
}

// A kill while `latest` was written left `latest.tmp.PID.N` for ever: the next run into the
// directory (holding its lock, so no other run is writing) removes it.
TEST(TrainGptCheckpointDir, AStrayTemporaryOfLatestIsCleanedAtTheNextStart) {
  TempDir d;
  two_step_run(d);
  write_bytes(d.file("ck") + "/latest.tmp.99999.0", "step-0000");
  write_bytes(d.file("ck") + "/notes.txt", "mine");
  ASSERT_EQ(train_gpt(d, kTiny + "--steps 2 --warmup 1 --resume --checkpoint-dir " + d.file("ck")).code,
            0);
  EXPECT_FALSE(fs::exists(d.file("ck") + "/latest.tmp.99999.0"));
  EXPECT_EQ(read_bytes(d.file("ck") + "/notes.txt"), "mine");
}

}  // namespace
}  // namespace mixpar::ch08
