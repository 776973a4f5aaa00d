// Checkpoints written in the background (--checkpoint-async, async_checkpoint.h): the same bytes
// as a synchronous save; a kill while the state is staged, while it is written or right after
// it commits leaves the last committed checkpoint and a resume bit-identical to the run that
// was not interrupted, every step in the log once; a full disk is reported with the step it
// belongs to; a writer that blocks neither stalls the steps nor keeps the run from ending.
// And the loader's place as a global sample end to end: token shards read by dp 4 resume at
// dp 2 with the same samples per step.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "async_checkpoint.h"
#include "ch08_test_util.h"
#include "checkpoint.h"
#include "io/token_shard.h"
#include "train_gpt_cli.h"
#include "util/json.h"

namespace mixpar::ch08 {
namespace {

namespace fs = std::filesystem;
using test::CliRun;
using test::read_bytes;
using test::TempDir;
using test::train_gpt;
using test::write_bytes;

const std::string kTiny = "--n-layer 1 --n-head 2 --n-embd 16 --seq 8 --batch 2 --threads 1 ";

// Every file under a checkpoint root but the lock (its holder's process id), path -> bytes.
std::vector<std::pair<std::string, std::string>> files_under(const std::string& root) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file() || e.path().filename() == ".lock") continue;
    out.emplace_back(fs::relative(e.path(), root).string(), read_bytes(e.path().string()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The log's step records (the background checkpoints' records have "checkpoint" instead).
std::vector<Json> steps_of(const std::string& path) {
  std::vector<Json> out;
  for (Json& j : test::read_jsonl(path)) {
    if (j.contains("step")) out.push_back(std::move(j));
  }
  return out;
}

TEST(TrainGptAsyncCheckpoint, WritesTheSameBytesAsASynchronousSaveOnEveryLayout) {
  for (const std::string layout : {"", "--ranks 2 ", "--ranks 4 --dp 2 --tp 2 --zero-stage 1 "}) {
    SCOPED_TRACE(layout.empty() ? "one device" : layout);
    TempDir d;
    const std::string args =
        kTiny + layout + "--steps 6 --warmup 1 --checkpoint-every 2 --checkpoint-keep 5 ";
    const CliRun sync = train_gpt(d, args + "--checkpoint-dir " + d.file("sync"));
    ASSERT_EQ(sync.code, 0) << sync.err;
    const CliRun async = train_gpt(d, args + "--checkpoint-async --checkpoint-dir " +
                                          d.file("async") + " --log-jsonl " + d.file("log.jsonl"));
    ASSERT_EQ(async.code, 0) << async.err;
    const auto want = files_under(d.file("sync")), got = files_under(d.file("async"));
    ASSERT_EQ(got.size(), want.size());
    EXPECT_GE(got.size(), 3u * 4u);  // steps 2, 4 and 6: manifest, state, config, pieces
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].first, want[i].first);
      EXPECT_TRUE(got[i].second == want[i].second) << got[i].first << " differs";
    }
    // One record per checkpoint with where its time went; the steps once each.
    std::vector<std::int64_t> checkpoints;
    for (const Json& j : test::read_jsonl(d.file("log.jsonl"))) {
      if (!j.contains("checkpoint")) continue;
      checkpoints.push_back(j.at("checkpoint").as_int());
      EXPECT_GE(j.at("blocked_ms").as_double(), j.at("staging_ms").as_double());
      EXPECT_GT(j.at("write_ms").as_double(), 0.0);
      EXPECT_GT(j.at("staged_bytes").as_int(), 0);
    }
    EXPECT_EQ(checkpoints, (std::vector<std::int64_t>{2, 4, 6}));
    EXPECT_EQ(steps_of(d.file("log.jsonl")).size(), 6u);
    EXPECT_NE(async.out.find("written in the background in"), std::string::npos) << async.out;
  }
}

// kill -9 at each moment of a background save of step 4 (staging, writing, just committed),
// on one device and on dp 2: `latest` is the last committed checkpoint, and the resumed run's
// log holds steps 1-6 once each with the uninterrupted run's losses, bit for bit.
TEST(TrainGptAsyncCheckpoint, AKillWhileStagingOrWritingResumesBitIdenticalWithEveryStepOnce) {
  const std::vector<std::pair<std::string, std::int64_t>> kills = {
      {"MIXPAR_KILL_DURING_CHECKPOINT_STAGING", 2},
      {"MIXPAR_KILL_DURING_CHECKPOINT_WRITE", 2},
      {"MIXPAR_KILL_AFTER_CHECKPOINT", 4}};
  for (const std::string layout : {"", "--ranks 2 "}) {
    TempDir d;
    const std::string args = kTiny + layout +
                             "--steps 6 --warmup 1 --checkpoint-every 2 --checkpoint-async ";
    const CliRun whole = train_gpt(d, args + "--checkpoint-dir " + d.file("whole") +
                                          " --log-jsonl " + d.file("whole.jsonl"));
    ASSERT_EQ(whole.code, 0) << whole.err;
    const std::vector<Json> want = steps_of(d.file("whole.jsonl"));
    ASSERT_EQ(want.size(), 6u);
    for (const auto& [hook, resumes_at] : kills) {
      SCOPED_TRACE((layout.empty() ? std::string("one device") : layout) + hook);
      const std::string ck = d.file("ck-" + hook), log = d.file(hook + ".jsonl");
      const std::string run = args + "--checkpoint-dir " + ck + " --log-jsonl " + log;
      const CliRun killed = test::run_shell(d, hook + "=4 " + MIXPAR_TRAIN_GPT_PATH + " " + run);
      EXPECT_TRUE(killed.code == 128 + SIGKILL || killed.code == -1) << killed.code << killed.err;
      EXPECT_EQ(latest_checkpoint(ck), ck + "/" + checkpoint_name(resumes_at));
      const CliRun resumed = train_gpt(d, run + " --resume");
      ASSERT_EQ(resumed.code, 0) << resumed.err;
      EXPECT_NE(resumed.out.find("at step " + std::to_string(resumes_at)), std::string::npos);
      const std::vector<Json> got = steps_of(log);
      ASSERT_EQ(got.size(), 6u);
      for (std::size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].at("step").as_int(), static_cast<std::int64_t>(i + 1));
        EXPECT_EQ(got[i].at("loss").as_double(), want[i].at("loss").as_double()) << i + 1;
        EXPECT_EQ(got[i].at("grad_norm").as_double(), want[i].at("grad_norm").as_double());
      }
      // The resumed run's last checkpoint is the uninterrupted run's, byte for byte.
      for (const char* file :
           {"model.safetensors", "optimizer.safetensors", "trainer_state.json"}) {
        EXPECT_TRUE(read_bytes(ck + "/step-00000006/" + file) ==
                    read_bytes(d.file("whole") + "/step-00000006/" + file))
            << file;
      }
    }
  }
}

// A full disk while step 4's checkpoint is written in the background: the run stops with one
// line naming the step and the reason (exit 2, as a synchronous save's full disk), the
// partial directory is gone and step 2's checkpoint is still `latest`, and verifies.
TEST(TrainGptAsyncCheckpoint, ADiskFullInTheBackgroundIsReportedWithItsStepAndKeepsTheLast) {
  for (const std::string layout : {"", "--ranks 2 "}) {
    SCOPED_TRACE(layout.empty() ? "one device" : layout);
    TempDir d;
    const CliRun r = test::run_shell(
        d, "MIXPAR_CHECKPOINT_WRITE_ENOSPC=4 " + std::string(MIXPAR_TRAIN_GPT_PATH) + " " +
               kTiny + layout + "--steps 8 --warmup 1 --checkpoint-every 2 --checkpoint-async " +
               "--checkpoint-dir " + d.file("ck"));
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("checkpoint of step 4 (written in the background)"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(latest_checkpoint(d.file("ck")), d.file("ck") + "/step-00000002");
    EXPECT_FALSE(fs::exists(d.file("ck") + "/.step-00000004.partial"));
    EXPECT_FALSE(fs::exists(d.file("ck") + "/step-00000004"));
  }
}

TEST(TrainGptAsyncCheckpoint, WithoutACheckpointDirectoryIsRefused) {
  TempDir d;
  test::expect_one_line_error(d, kTiny + "--steps 1 --checkpoint-async", "--checkpoint-async "
                                                                         "needs --checkpoint-dir");
}

// A one-file checkpoint whose writer waits until released (or cancelled).
StagedCheckpoint blocked_until(const std::atomic<bool>& released) {
  StagedCheckpoint s;
  s.files.push_back([&released](const std::string& dir, const WriteControl& control) {
    control.wait_until([&] { return released.load(); });
    if (control.cancelled()) throw std::runtime_error("cancelled");
    write_bytes(dir + "/a.txt", "abc");
    return std::string("a.txt");
  });
  return s;
}

// A writer blocked in its write: the steps go on (poll returns at once, nothing committed),
// and once released the run's end commits it; a writer blocked for good is stopped by
// abandon(), which returns (no hang), removes the partial directory and says so, leaving the
// last committed checkpoint `latest`.
TEST(AsyncCheckpoints, AWriterThatBlocksNeitherStallsTheStepsNorHangsTheEnd) {
  TempDir d;
  const std::string root = d.file("ck");
  std::atomic<bool> released{false};
  {
    AsyncCheckpoints ck(root, 5, nullptr);
    EXPECT_FALSE(ck.save(2, [&] { return blocked_until(released); }).has_value());
    for (int step = 3; step <= 5; ++step) EXPECT_FALSE(ck.poll().has_value()) << step;
    EXPECT_TRUE(ck.in_flight());
    EXPECT_FALSE(fs::exists(root + "/latest"));
    released = true;
    ck.wake_writer();
    const std::optional<CheckpointTimes> done = ck.finish();
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->step, 2);
    EXPECT_EQ(latest_checkpoint(root), root + "/step-00000002");
  }
  std::atomic<bool> never{false};
  AsyncCheckpoints ck(root, 5, nullptr);
  ck.save(4, [&] { return blocked_until(never); });
  EXPECT_TRUE(fs::exists(root + "/.step-00000004.partial"));
  const std::string note = ck.abandon();
  EXPECT_NE(note.find("checkpoint of step 4: its background write was stopped"), std::string::npos)
      << note;
  EXPECT_FALSE(fs::exists(root + "/.step-00000004.partial"));
  EXPECT_FALSE(ck.in_flight());
  EXPECT_EQ(latest_checkpoint(root), root + "/step-00000002");
}

// Token shards (--data *.bin) read by dp 4 x 2 rows x 2 micro-batches, checkpointed at step 2,
// resumed at dp 2 x 2 rows x 4 micro-batches: the same 16 samples a step, so steps 3 and 4
// follow the uninterrupted run's losses (to the rounding of another order of sums).
TEST(TrainGptAsyncCheckpoint, ATokenShardRunSavedAtDp4ResumesAtDp2ReadingTheSameSamples) {
  TempDir d;
  std::vector<std::uint16_t> ids(6000);
  std::uint32_t x = 12345;
  for (std::uint16_t& id : ids) {
    x = x * 1103515245u + 12345u;  // a fixed LCG: bytes that do not repeat in a window
    id = static_cast<std::uint16_t>(x >> 24);
  }
  write_token_shard(d.file("ids.bin"), ids);
  const std::string base = "--n-layer 1 --n-head 2 --n-embd 16 --seq 8 --batch 2 --threads 1 "
                           "--vocab-size 256 --data " + d.file("ids.bin") +
                           " --data-order shuffled --lr-schedule constant --warmup 1 "
                           "--checkpoint-async ";
  const std::string dp4 = base + "--ranks 4 --grad-accum 2 ";
  const CliRun whole = train_gpt(d, dp4 + "--steps 4 --checkpoint-dir " + d.file("whole-ck") +
                                          " --log-jsonl " + d.file("whole.jsonl"));
  ASSERT_EQ(whole.code, 0) << whole.err;
  // A constant schedule: the first run's --steps 2 is the same rates as --steps 4's.
  const CliRun first = train_gpt(d, dp4 + "--steps 2 --checkpoint-dir " + d.file("ck"));
  ASSERT_EQ(first.code, 0) << first.err;
  const CliRun resumed =
      train_gpt(d, base + "--steps 4 --ranks 2 --grad-accum 4 --resume --checkpoint-dir " +
                       d.file("ck") + " --log-jsonl " + d.file("resumed.jsonl"));
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  const std::vector<Json> want = steps_of(d.file("whole.jsonl"));
  const std::vector<Json> got = steps_of(d.file("resumed.jsonl"));
  ASSERT_EQ(want.size(), 4u);
  ASSERT_EQ(got.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const double a = got[i].at("loss").as_double(), b = want[i + 2].at("loss").as_double();
    EXPECT_EQ(got[i].at("step").as_int(), static_cast<std::int64_t>(i + 3));
    EXPECT_LE(std::abs(a - b) / b, 1e-5) << "step " << i + 3 << ": " << a << " vs " << b;
  }
}

}  // namespace
}  // namespace mixpar::ch08
