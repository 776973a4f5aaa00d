// Training checkpoints: 3 steps + checkpoint + resume + 3 steps equals 6 straight steps bit for
// bit (losses, FP32 masters, 16-bit working copy, AdamW moments and t, loss scaler, loader), in
// fp32, bf16 and fp16; corrupt, truncated, incomplete and mismatched checkpoints are refused
// with an InputError naming the problem; a failed save leaves the previous checkpoint intact.
#include "checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "ch08_test_util.h"
#include "comm/local_backend.h"
#include "io/gpt_config.h"
#include "trainer.h"

namespace mixpar::ch08 {
namespace {

namespace fs = std::filesystem;
using test::bytes_of;
using test::expect_same_tensors;
using test::input_error_of;
using test::random_data;
using test::TempDir;
using test::tiny_config;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

void expect_same_optimizer(const Trainer& a, const Trainer& b) {
  const AdamW& x = *a.optimizer().adamw();
  const AdamW& y = *b.optimizer().adamw();
  EXPECT_EQ(x.step_count(), y.step_count());
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(bytes_of(x.exp_avg(i)), bytes_of(y.exp_avg(i))) << "m " << i;
    EXPECT_EQ(bytes_of(x.exp_avg_sq(i)), bytes_of(y.exp_avg_sq(i))) << "v " << i;
  }
  EXPECT_EQ(a.optimizer().scaler().state(), b.optimizer().scaler().state());
  EXPECT_EQ(a.loader().state(), b.loader().state());
}

void check_resume_is_exact(DType dtype, double loss_scale = 65536.0) {
  TempDir dir;
  TrainerConfig c = tiny_config();
  c.dtype = dtype;
  c.loss_scale = loss_scale;
  c.checkpoint_dir = dir.str();
  const TrainingData data = random_data(1000);
  Trainer straight(c, data);
  std::vector<double> want;
  for (int i = 0; i < 6; ++i) want.push_back(straight.train_step().loss);

  Trainer first(c, data);
  std::vector<double> got;
  for (int i = 0; i < 3; ++i) got.push_back(first.train_step().loss);
  first.save_checkpoint();
  Trainer second(c, data);  // a fresh process, in effect
  second.resume();
  ASSERT_EQ(second.step(), 3);
  for (int i = 0; i < 3; ++i) got.push_back(second.train_step().loss);

  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(got[static_cast<std::size_t>(i)], want[static_cast<std::size_t>(i)])
        << "step " << i + 1;
  expect_same_tensors(straight.master_weights(), second.master_weights());
  expect_same_tensors(straight.model().parameters(), second.model().parameters());
  expect_same_optimizer(straight, second);
  if (dtype == DType::kF16 && loss_scale > 65536.0) {
    EXPECT_EQ(second.optimizer().scaler().state().steps_skipped, 4);
    EXPECT_EQ(second.optimizer().adamw()->step_count(), 2);
  }
}

// A failure on one rank reaches every rank with its reason: the lowest failing rank rethrows
// its own error, every other rank an error of the same kind that names that rank and the
// reason (it used to be "failed on another rank (reported there)" with the reason printed
// nowhere).
TEST(OnEveryRank, EveryRankGetsTheLowestFailingRanksReason) {
  for (const bool input : {true, false}) {
    std::vector<std::string> got(4);
    std::vector<bool> was_input(4, false);
    run_local(4, [&](Communicator& comm) {
      const int r = comm.rank();
      try {
        on_every_rank(&comm, "reading ck", [&] {
          if (r == 2 || r == 3) {
            const std::string why = "shard " + std::to_string(r) + " is missing";
            if (input) throw InputError(why);
            throw std::runtime_error(why);
          }
        });
        got[std::size_t(r)] = "no error";
      } catch (const InputError& e) {
        got[std::size_t(r)] = e.what();
        was_input[std::size_t(r)] = true;
      } catch (const std::exception& e) {
        got[std::size_t(r)] = e.what();
      }
    });
    for (int r : {0, 1}) {
      EXPECT_EQ(got[std::size_t(r)],
                input ? "rank 2: shard 2 is missing" : "reading ck failed on rank 2: shard 2 is missing");
      EXPECT_EQ(was_input[std::size_t(r)], input) << r;
    }
    EXPECT_EQ(got[2], "shard 2 is missing");
    // Rank 3 failed too, but reports the lowest failing rank's reason: every rank's error is
    // then the same, whichever thread's reaches the user first.
    EXPECT_EQ(got[3], input ? "rank 2: shard 2 is missing"
                            : "reading ck failed on rank 2: shard 2 is missing");
    EXPECT_EQ(was_input[3], input);
  }
  // Nothing fails: nothing is thrown anywhere.
  run_local(3, [&](Communicator& comm) { on_every_rank(&comm, "x", [] {}); });
}

TEST(Checkpoint, ResumeIsBitExactFp32) { check_resume_is_exact(DType::kF32); }
TEST(Checkpoint, ResumeIsBitExactBf16) { check_resume_is_exact(DType::kBF16); }
// A scale of 2^21 overflows the tiny model's FP16 gradients for four steps: steps 1-4 are
// skipped, 5-6 taken, so the checkpoint at step 3 falls inside the run of skips and the resumed
// run must skip step 4 as the straight one did.
TEST(Checkpoint, ResumeIsBitExactFp16WithTheLossScaler) {
  check_resume_is_exact(DType::kF16, 1 << 21);
}

// A trainer with one checkpoint at step 2 in c.checkpoint_dir; returns the checkpoint's path.
std::string one_checkpoint(const TrainerConfig& c) {
  Trainer t(c, random_data(1000));
  t.train_step();
  t.train_step();
  return t.save_checkpoint();
}

TrainerConfig config_in(const TempDir& dir) {
  TrainerConfig c = tiny_config();
  c.checkpoint_dir = dir.str();
  return c;
}

std::string resume_error(const TrainerConfig& c) {
  return input_error_of([&] { Trainer(c, random_data(1000)).resume(); });
}

TEST(Checkpoint, RefusesATruncatedFile) {
  TempDir dir;
  const std::string ckpt = one_checkpoint(config_in(dir));
  const std::string file = ckpt + "/model.safetensors";
  fs::resize_file(file, fs::file_size(file) - 100);
  const std::string msg = resume_error(config_in(dir));
  EXPECT_TRUE(contains(msg, "model.safetensors") && contains(msg, "truncated or corrupt")) << msg;
}

TEST(Checkpoint, RefusesAnAlteredFile) {
  TempDir dir;
  const std::string ckpt = one_checkpoint(config_in(dir));
  std::string bytes = test::read_bytes(ckpt + "/optimizer.safetensors");
  bytes[bytes.size() - 3] ^= 0x40;  // one flipped bit in the last moment
  test::write_bytes(ckpt + "/optimizer.safetensors", bytes);
  EXPECT_TRUE(contains(resume_error(config_in(dir)), "checksum differs"));
}

TEST(Checkpoint, RefusesAMissingManifestOrNoCheckpoint) {
  TempDir dir;
  EXPECT_TRUE(contains(resume_error(config_in(dir)), "no checkpoint to resume from"));
  const std::string ckpt = one_checkpoint(config_in(dir));
  fs::remove(ckpt + "/manifest.json");
  EXPECT_TRUE(contains(resume_error(config_in(dir)), "incomplete checkpoint"));
}

TEST(Checkpoint, RefusesAnotherModelShapeOrDtype) {
  TempDir dir;
  one_checkpoint(config_in(dir));
  TrainerConfig wider = config_in(dir);
  wider.model.n_embd = 32;
  EXPECT_TRUE(contains(resume_error(wider), "--n-embd 16, this run has 32")) << resume_error(wider);
  TrainerConfig half = config_in(dir);
  half.dtype = DType::kF16;
  EXPECT_TRUE(contains(resume_error(half), "--dtype \"f32\", this run has \"f16\""));
}

TEST(Checkpoint, RefusesAConfigJsonOfAnotherShapeEvenWithAMatchingManifest) {
  TempDir dir;
  const std::string ckpt = one_checkpoint(config_in(dir));
  HfGpt2Config hf = read_gpt2_config(ckpt);
  hf.n_embd = 32;
  write_gpt2_config(ckpt + "/config.json", hf);
  fs::remove(ckpt + "/manifest.json");  // re-sign the altered directory as a complete one
  save_checkpoint(
      dir.str(), 2,
      [&](const std::string& d) {
        for (const auto& e : fs::directory_iterator(ckpt))
          fs::copy_file(e.path(), fs::path(d) / e.path().filename());
      },
      2);
  const std::string msg = resume_error(config_in(dir));
  EXPECT_TRUE(contains(msg, "model shape differs: n_embd is 32, expected 16")) << msg;
}

TEST(Checkpoint, AFailedSaveLeavesThePreviousCheckpoint) {
  TempDir dir;
  const std::string good = one_checkpoint(config_in(dir));
  EXPECT_THROW(save_checkpoint(
                   dir.str(), 4,
                   [](const std::string& d) {
                     test::write_bytes(d + "/model.safetensors", "partial");
                     throw InputError("disk full");
                   },
                   2),
               InputError);
  EXPECT_EQ(latest_checkpoint(dir.str()), good);
  for (const auto& e : fs::directory_iterator(dir.str())) {
    EXPECT_FALSE(contains(e.path().filename().string(), "partial")) << e.path();
    EXPECT_FALSE(contains(e.path().filename().string(), "step-00000004")) << e.path();
  }
  Trainer t(config_in(dir), random_data(1000));
  t.resume();
  EXPECT_EQ(t.step(), 2);
}

TEST(Checkpoint, KeepsOnlyTheNewestCheckpoints) {
  TempDir dir;
  TrainerConfig c = config_in(dir);
  c.checkpoint_keep = 2;
  Trainer t(c, random_data(1000));
  for (int i = 0; i < 4; ++i) {
    t.train_step();
    t.save_checkpoint();
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.str()))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", checkpoint_name(3), checkpoint_name(4)}));
}

}  // namespace
}  // namespace mixpar::ch08
