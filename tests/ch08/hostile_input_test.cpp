// The hostile-input corpus of train_gpt: command lines a careless or hostile user types, each
// refused before any work with exit code 2 and one line naming what is wrong. Every case was
// once accepted (a flag swallowing the next one, a seed rounded, a number that cannot train,
// a flag that does nothing); the table keeps them refused.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "train_gpt_cli.h"

namespace mixpar::ch08 {
namespace {

using test::expect_one_line_error;
using test::TempDir;
using test::train_gpt;

const std::string kTiny = "--n-layer 1 --n-head 2 --n-embd 16 --seq 8 --batch 2 --threads 1 ";

struct HostileCase {
  std::string args;    // after train_gpt; kTiny is prepended
  std::string phrase;  // the one line must contain it
};

void expect_all_refused(const std::vector<HostileCase>& cases) {
  TempDir d;
  for (const HostileCase& c : cases) expect_one_line_error(d, kTiny + c.args, c.phrase);
}

// A flag missing its value no longer swallows the next flag (`--save --overwrite` saved into a
// directory named "--overwrite", `--checkpoint-dir --resume` started a fresh run in "--resume").
TEST(HostileInput, AFlagMissingItsValueNamesItselfInsteadOfSwallowingTheNext) {
  expect_all_refused({
      {"--save --overwrite", "--save needs a value, but is followed by the flag '--overwrite'"},
      {"--checkpoint-dir --resume", "--checkpoint-dir needs a value, but is followed by the flag '--resume'"},
      {"--data --recompute", "--data needs a value, but is followed by the flag '--recompute'"},
      {"--log-jsonl --dry-run", "--log-jsonl needs a value"},
      {"--prompt --", "--prompt needs a value"},
  });
  TempDir d;
  EXPECT_FALSE(std::filesystem::exists(d.file("--overwrite")));
  EXPECT_FALSE(std::filesystem::exists(d.file("--resume")));
}

// Whole numbers are taken exactly or refused: 9007199254740993 was trained as ...992, and an
// odd --global-batch of that size was refused naming --grad-accum, which the user never gave.
TEST(HostileInput, WholeNumbersAreExactAndErrorsNameTheFlagsGiven) {
  TempDir d;
  const test::CliRun seed = train_gpt(d, kTiny + "--seed 9007199254740993 --dry-run");
  EXPECT_EQ(seed.code, 0) << seed.err;
  EXPECT_NE(seed.out.find("seed 9007199254740993"), std::string::npos) << seed.out;
  for (const std::string gb : {"9007199254740993", "9007199254740992"}) {
    const test::CliRun r = train_gpt(d, kTiny + "--global-batch " + gb + " --dry-run");
    EXPECT_EQ(r.code, 2) << gb;
    EXPECT_NE(r.err.find("--global-batch " + gb), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("--grad-accum"), std::string::npos) << r.err;
  }
  expect_all_refused({
      {"--seed 1e30", "--seed: '1e30' is out of range"},
      {"--seed 1.00000000000000001", "--seed: '1.00000000000000001' is not a whole number"},
      {"--lr 9007199254740993", "--lr: '9007199254740993' is not exactly a double"},
  });
}

// fp16's loss scale lives in FP32 and unscaling multiplies by its FP32 inverse: below about
// 2.9e-39 that inverse is infinite (1e-39 trained NaN weights and exited 0), 1e-320 is 0.
TEST(HostileInput, ALossScaleWithoutAFiniteInverseIsRefused) {
  expect_all_refused({
      {"--dtype fp16 --loss-scale 1e-39 --save m", "--loss-scale 1e-39 is outside [2.93874e-39, 3e38]"},
      {"--dtype fp16 --loss-scale 1e-320", "the scale and its inverse must be finite FP32 values"},
      {"--dtype fp16 --loss-scale 2.9e-39", "--loss-scale 2.9e-39 is outside"},
      {"--dtype fp16 --loss-scale 1e39", "--loss-scale 1e+39 is outside"},
  });
}

// Weights that went non-finite are never written: fp16's working copy of weights blown past
// 65504 skips every step, and the run used to checkpoint and --save them with exit 0. It halts
// (exit 3, one line) before writing either.
TEST(HostileInput, NonFiniteWeightsAreNeverCheckpointedNorSaved) {
  TempDir d;
  const test::CliRun r =
      train_gpt(d, kTiny + "--dtype fp16 --lr 1e20 --weight-decay 0 --warmup 0 --steps 4 --save " +
                       d.file("m") + " --checkpoint-dir " + d.file("ck"));
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_TRUE(r.err.starts_with("train_gpt: halted: step 4: the weights are not finite, so the "
                                "final checkpoint is not written"))
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(std::filesystem::exists(d.file("m")));
  EXPECT_FALSE(std::filesystem::exists(d.file("ck") + "/latest"));
  // Without a checkpoint directory the --save is what is not written.
  const test::CliRun s = train_gpt(
      d, kTiny + "--dtype fp16 --lr 1e20 --weight-decay 0 --warmup 0 --steps 3 --save " + d.file("m"));
  EXPECT_EQ(s.code, 3) << s.err;
  EXPECT_NE(s.err.find("so --save " + d.file("m") + " is not written"), std::string::npos) << s.err;
  EXPECT_FALSE(std::filesystem::exists(d.file("m") + "/model.safetensors"));
  // Two ranks agree and halt alike.
  const test::CliRun p = train_gpt(d, kTiny + "--ranks 2 --dtype fp16 --lr 1e20 --weight-decay 0 "
                                              "--warmup 0 --steps 3 --checkpoint-dir " +
                                              d.file("ck2"));
  EXPECT_EQ(p.code, 3) << p.err;
  EXPECT_NE(p.err.find("the weights of rank 0 are not finite"), std::string::npos) << p.err;
}

// --overwrite replaces regular files and model directories only: as root, --log-jsonl
// /dev/full --overwrite turned the device node into a regular file, and a FIFO was replaced
// the same way. Refused before any work, the node left as it was.
TEST(HostileInput, OverwriteNeverReplacesADeviceAFifoOrAForeignDirectory) {
  TempDir d;
  ASSERT_EQ(::mkfifo(d.file("fifo").c_str(), 0600), 0);
  ASSERT_EQ(::symlink("/dev/full", d.file("full").c_str()), 0);
  std::filesystem::create_directories(d.file("home"));
  test::write_bytes(d.file("home") + "/notes.txt", "mine");
  expect_all_refused({
      {"--log-jsonl /dev/full --overwrite", "--log-jsonl /dev/full is a character device, not a regular file"},
      {"--log-jsonl " + d.file("fifo") + " --overwrite", "is a FIFO, not a regular file"},
      {"--log-jsonl " + d.file("fifo"), "is a FIFO, not a regular file"},
      {"--dump-logits " + d.file("full") + " --overwrite", "links to a character device"},
      {"--ranks 2 --trace " + d.file("fifo") + " --overwrite", "--trace " + d.file("fifo") + " is a FIFO"},
      {"--save " + d.file("home") + " --overwrite", "holds no model (no config.json nor model.safetensors)"},
  });
  struct stat st {};
  ASSERT_EQ(::stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  ASSERT_EQ(::lstat(d.file("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(test::read_bytes(d.file("home") + "/notes.txt"), "mine");
}

// One output plan per run: every path it writes, resolved, compared with every other and with
// this run's own checkpoint and model directories. Each case used to exit 0 with one output
// destroying another (the log becoming the 14-byte `latest`, --save replacing the only
// checkpoint's model). Refused before any work: nothing is written.
TEST(HostileInput, ARunsOutputsNeverCollideNorGoIntoItsOwnCheckpoint) {
  TempDir d;
  const std::string ck = d.file("ck"), x = d.file("x"), m = d.file("m");
  expect_all_refused({
      {"--checkpoint-dir " + ck + " --save " + ck + "/step-00000002",
       "--save " + ck + "/step-00000002 lies inside --checkpoint-dir " + ck},
      {"--checkpoint-dir " + ck + " --dump-logits " + ck + "/latest", "lies inside --checkpoint-dir"},
      {"--checkpoint-dir " + ck + " --log-jsonl " + ck + "/latest",
       "--log-jsonl " + ck + "/latest lies inside --checkpoint-dir"},
      {"--ranks 2 --log-jsonl " + x + " --trace " + x, "--log-jsonl " + x + " and --trace " + x + " are the same path"},
      {"--log-jsonl " + x + " --dump-logits " + d.file(".") + "/x", "are the same path (" + x + ")"},
      {"--save " + m + " --dump-logits " + m + "/model.safetensors",
       "--dump-logits " + m + "/model.safetensors lies inside --save " + m},
      {"--checkpoint-dir " + m + " --save " + m, "are the same path"},
      {"--checkpoint-dir " + m + " --save " + m + "/", "are the same path"},
      {"--checkpoint-dir " + ck + " --save " + ck + "/../ck", "are the same path"},
      {"--save " + m + " --checkpoint-dir " + m + "/ck", "--checkpoint-dir " + m + "/ck lies inside --save"},
  });
  EXPECT_FALSE(std::filesystem::exists(ck));
  EXPECT_FALSE(std::filesystem::exists(x));
  EXPECT_FALSE(std::filesystem::exists(m));
  // Existing checkpoints, found through any spelling of the path: a new checkpoint directory in
  // one's step directory, an output in it through a symbolic link.
  ASSERT_EQ(train_gpt(d, kTiny + "--steps 2 --checkpoint-dir " + d.file("old")).code, 0);
  const std::string step = d.file("old") + "/step-00000002";
  ASSERT_EQ(::symlink(step.c_str(), d.file("link").c_str()), 0);
  const std::string before = test::read_bytes(step + "/manifest.json");
  expect_all_refused({
      {"--checkpoint-dir " + step + "/sub", "lies inside the checkpoint directory " + step},
      {"--save " + d.file("link") + "/m", "is inside the checkpoint directory " + step},
      {"--log-jsonl " + d.file("link") + "/log.jsonl", "is inside the checkpoint directory"},
  });
  EXPECT_FALSE(std::filesystem::exists(step + "/sub"));
  EXPECT_EQ(test::read_bytes(step + "/manifest.json"), before);
}

// The watchdog's limit is range-checked on every backend: 1e10 s overflowed the MPI watchdog's
// deadline, which fired at once ("still blocked after 10000000000.0 s").
TEST(HostileInput, AWatchdogLimitOutOfRangeIsRefused) {
  expect_all_refused({
      {"--comm-timeout 1e10", "--comm-timeout 10000000000 is out of range: at most 1e6 seconds"},
      {"--comm-timeout 1000001", "--comm-timeout 1000001 is out of range"},
      {"--comm-timeout inf", "--comm-timeout inf is out of range"},
      {"--comm-timeout nan", "--comm-timeout must be a positive number of seconds"},
  });
}

// An HF directory whose config.json asks for a LayerNorm epsilon the model does not use was
// trained as if it said 1e-5: refused with the field named.
TEST(HostileInput, AnHfConfigWithAnotherLayerNormEpsilonIsRefused) {
  TempDir d;
  ASSERT_EQ(train_gpt(d, kTiny + "--steps 1 --save " + d.file("m")).code, 0);
  const std::string path = d.file("m") + "/config.json";
  std::string config = test::read_bytes(path);
  const std::string from = "\"layer_norm_epsilon\": 1e-05";
  const std::size_t at = config.find(from);
  ASSERT_NE(at, std::string::npos) << config;
  config.replace(at, from.size(), "\"layer_norm_epsilon\": 0.001");
  test::write_bytes(path, config);
  expect_one_line_error(d, "--threads 1 --steps 1 --seq 8 --init-from " + d.file("m"),
                        "config.json: layer_norm_epsilon is 0.001, mixpar's GPT-2 LayerNorms use "
                        "only 1e-05");
}

// Smaller cases of the same promise. A number that cannot train is refused naming the flag the
// user reaches for; a flag that does nothing in the configuration given is refused naming what
// it needs (each was accepted silently).
TEST(HostileInput, NumbersThatCannotTrainAndFlagsThatDoNothingAreRefused) {
  expect_all_refused({
      {"--lr 1e30", "--lr 1e+30 with --weight-decay 0.1: lr x weight_decay = 1e+29 must be below 1"},
      {"--eps 1e30", "--eps 1e+30 is not below 1"},
      {"--eps 1", "--eps 1 is not below 1"},
      {"--sample 1e9", "--sample 1000000000 is more than 10000 tokens"},
      {"--sample 10001", "--sample 10001 is more than 10000 tokens"},
      {"--cp-algo all-to-all", "--cp-algo needs --cp > 1"},
      {"--schedule 1f1b", "--schedule needs --pp > 1"},
      {"--loss-scale 1024", "--loss-scale needs --dtype fp16"},
      {"--dtype bf16 --loss-scale 1024", "--loss-scale needs --dtype fp16"},
      {"--dtype fp8 --loss-scale 1024", "--loss-scale needs --dtype fp16"},
      {"--temperature 0.5", "--temperature needs --sample N"},
      {"--prompt hello", "--prompt needs --sample N or --dump-logits FILE"},
  });
  TempDir d;
  expect_one_line_error(d, "--checkpoint-dir ck --resume --init-from hf",
                        "--init-from needs a fresh run (without it the flag does nothing)");
}

// A path with a newline gave a two-line error: every message is one line, the newline written
// as \n. An uppercase .BIN shard was read as bytes (a vocabulary of 256, no error): it is a
// shard like .bin, checked as one.
TEST(HostileInput, ANewlineInAPathStaysOneLineAndAnUppercaseBinIsAShard) {
  TempDir d;
  expect_one_line_error(d, kTiny + "--steps 1 --data 'a\nb'", "a\\nb: cannot open");
  test::write_bytes(d.file("DATA.BIN"), std::string(100, 'x'));
  expect_one_line_error(d, kTiny + "--steps 1 --data " + d.file("DATA.BIN"),
                        "shorter than the 1024-byte shard header");
}

// Disk full under --log-jsonl said "write failed" without the reason: the system's reason is
// named. (A file size limit stands in for a full disk: the same failed write(2), EFBIG.)
TEST(HostileInput, AFailedLogWriteNamesTheSystemsReason) {
  TempDir d;
  const test::CliRun limited = test::run_shell(
      d, "trap '' XFSZ; ulimit -f 2; " + std::string(MIXPAR_TRAIN_GPT_PATH) + " " + kTiny +
             "--steps 200 --log-jsonl " + d.file("limited.jsonl"));
  EXPECT_EQ(limited.code, 2) << limited.err;
  EXPECT_NE(limited.err.find(d.file("limited.jsonl") + ": write failed: File too large"),
            std::string::npos)
      << limited.err;
  EXPECT_EQ(std::count(limited.err.begin(), limited.err.end(), '\n'), 1) << limited.err;
}

// The pre-flight bills any shape in closed form before it names a tensor: --n-layer 1000000
// took 50 s and 5.7 GB to print its refusal, 100000000 never finished, and a config.json of
// 2^40 blocks exhausted memory. Each is now refused at once with the memory it would need.
TEST(HostileInput, AbsurdSizesAreRefusedWithTheirBillBeforeAnythingIsNamed) {
  TempDir d;
  for (const std::string layers : {"1000000", "100000000"}) {
    expect_one_line_error(d, "--dry-run --threads 1 --device-memory 80GiB --n-layer " + layers,
                          "one rank needs ");
  }
  expect_one_line_error(d, "--dry-run --threads 1 --n-layer 1000000 --pp 4 --ranks 4 "
                           "--grad-accum 4 --device-memory 80GiB",
                        "over --device-memory ");
  const std::string model = d.file("huge");
  std::filesystem::create_directories(model);
  test::write_bytes(model + "/config.json",
             R"({"model_type": "gpt2", "n_layer": 1099511627776, "n_head": 12, "n_embd": 768, )"
             R"("n_positions": 1024, "vocab_size": 50257, "layer_norm_epsilon": 1e-5})");
  expect_one_line_error(d, "--dry-run --threads 1 --init-from " + model,
                        "overflows a 64-bit integer");
}

// A resume that changes the run was accepted: another --grad-clip, --weight-decay, --beta1,
// --beta2 or --eps continued silently with other losses. Each is refused naming the flag; a
// flag a resume may change (flag_coverage_test.cpp's list) still resumes.
TEST(HostileInput, AResumeThatChangesTrainingIsRefusedNamingTheFlag) {
  TempDir d;
  const std::string run = kTiny + "--lr-schedule constant --warmup 0 --checkpoint-dir " +
                          d.file("ck") + " ";
  ASSERT_EQ(train_gpt(d, run + "--steps 2").code, 0);
  for (const std::string flag :
       {"--grad-clip 0.5", "--weight-decay 0.05", "--beta1 0.8", "--beta2 0.9", "--eps 1e-6"}) {
    expect_one_line_error(d, run + "--steps 3 --resume " + flag,
                          "checkpoint was written by a run with " + flag.substr(0, flag.find(' ')));
  }
  const test::CliRun ok = train_gpt(d, run + "--steps 3 --resume --print-every 1 --checkpoint-keep 3");
  EXPECT_EQ(ok.code, 0) << ok.err;
}

// --fp8-amax-history 1048576 was billed at 2.5 MiB, wrote a 176 MB trainer_state.json and ran
// out of memory at the final checkpoint: a history beyond Transformer Engine's default 1024
// is refused, saying why; 1024 itself is accepted.
TEST(HostileInput, AnFp8AmaxHistoryBeyondTransformerEnginesDefaultIsRefused) {
  expect_all_refused({
      {"--dtype fp8 --fp8-amax-history 1048576", "--fp8-amax-history 1048576 is outside [1, 1024]"},
      {"--dtype fp8 --fp8-amax-history 1025", "each checkpoint writes them all"},
  });
  TempDir d;
  const test::CliRun r = train_gpt(d, kTiny + "--dtype fp8 --fp8-amax-history 1024 --dry-run");
  EXPECT_EQ(r.code, 0) << r.err;
}

#if defined(MIXPAR_MPIEXEC)
// mpirun's multiple-program form: rank 0's flags, ':', rank 1's. Ranks that differ in a flag
// the agreement left out (fp8 was recorded as bf16, the fp8 settings and --dry-run were
// missing) waited in different collectives until the watchdog, which named no flag; now the
// job exits 2 with one line naming it. `timeout` bounds the test if it regresses.
TEST(HostileInput, MpiRanksWithDifferentFp8OrDryRunFlagsAreRefusedNamingTheFlag) {
  TempDir d;
  const std::string run = std::string(MIXPAR_TRAIN_GPT_PATH) + " --backend mpi " + kTiny +
                          "--steps 2 --comm-timeout 60 ";
  for (const auto& [a, b, flag] :
       {std::tuple<std::string, std::string, std::string>{"--dtype fp8", "--dtype bf16", "--dtype"},
        {"--dtype fp8 --fp8-recipe tensorwise", "--dtype fp8 --fp8-recipe delayed", "--fp8-recipe"},
        {"--dtype fp8 --fp8-margin 1", "--dtype fp8", "--fp8-margin"},
        {"--dry-run", "", "--dry-run"}}) {
    const std::string cmd = "timeout 120 " + test_support::mpirun_command(1) + run + a +
                            " : -np 1 " + run + b;
    const test::CliRun r = test::run_shell(d, cmd);
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.err;
    EXPECT_NE(r.err.find("the ranks were started with different configurations: " + flag +
                         " differs on rank 1"),
              std::string::npos)
        << cmd << "\n" << r.err;
  }
}
#endif

}  // namespace
}  // namespace mixpar::ch08
