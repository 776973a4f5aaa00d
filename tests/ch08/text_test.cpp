// train_gpt on text (tests/data/text: an excerpt of Hamlet as bytes, and a vocabulary in GPT-2's
// file format, scripts/text/make_test_fixture.py): the validation loss on held-out text in the
// log and the JSONL, samples printed through the tokenizer with temperature, top-k and a seed,
// the same sample from a checkpoint and from a Hugging Face directory as at the end of
// training, and every hostile text input refused with one line and exit code 2.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "io/token_shard.h"
#include "train_gpt_cli.h"
#include "util/json.h"

#ifndef MIXPAR_TEXT_FIXTURE_DIR
#error "MIXPAR_TEXT_FIXTURE_DIR must name tests/data/text"
#endif

namespace mixpar::ch08 {
namespace {

using test::CliRun;
using test::expect_one_line_error;
using test::read_jsonl;
using test::TempDir;
using test::train_gpt;

const std::string kFixture = MIXPAR_TEXT_FIXTURE_DIR;
const std::string kText = "--n-layer 1 --n-head 2 --n-embd 16 --seq 16 --batch 4 --threads 1 "
                          "--data " + kFixture + "/hamlet_train.txt ";
const std::string kTokenizer = "--tokenizer " + kFixture + "/tiny_tokenizer ";

// The lines after the "sample (" header, to the end of the output.
std::string sample_of(const std::string& out) {
  const std::size_t at = out.find("sample (");
  return at == std::string::npos ? "(no sample)" : out.substr(at);
}

TEST(TrainGptText, ValidationLossIsLoggedEveryEvalEveryStepsAndAtTheEnd) {
  TempDir d;
  const CliRun r = train_gpt(d, kText + "--steps 5 --eval-every 2 --val-batches 3 --val-data " +
                                    kFixture + "/hamlet_val.txt --log-jsonl " + d.file("l.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("validation at step 4: loss "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("validation at step 5: loss "), std::string::npos) << r.out;
  const std::vector<Json> rows = read_jsonl(d.file("l.jsonl"));
  ASSERT_EQ(rows.size(), 5u);
  for (const Json& row : rows) {
    const std::int64_t step = row.at("step").as_int();
    EXPECT_EQ(row.contains("val_loss"), step % 2 == 0 || step == 5) << "step " << step;
    if (row.contains("val_loss")) {
      // Bytes of English under a barely trained model: about ln 256 = 5.5 nats.
      EXPECT_GT(row.at("val_loss").as_double(), 3.0);
      EXPECT_LT(row.at("val_loss").as_double(), 6.5);
    }
  }
}

// Text goes through the loader every layout reads: each ZeRO stage, dtype and dimension of the
// grid trains on it and scores the held-out text (the grid's numbers against one device's:
// cli_test.cpp, TrainGptCli.AGridOnTextLogsTheLossesAndValidationLossesOfOneDevice).
TEST(TrainGptText, EveryLayoutZeroStageAndDtypeTrainsAndValidatesOnText) {
  TempDir d;
  const std::string run = "--n-layer 2 --n-head 2 --n-embd 16 --seq 16 --batch 2 --threads 1 "
                          "--steps 2 --eval-every 1 --data " + kFixture + "/hamlet_train.txt "
                          "--val-data " + kFixture + "/hamlet_val.txt ";
  for (const std::string layout :
       {"--ranks 2 --dp 2 --zero-stage 1 --dtype bf16", "--ranks 2 --dp 2 --zero-stage 2 --dtype fp16",
        "--ranks 2 --dp 2 --zero-stage 3 --dtype fp8", "--ranks 2 --tp 2 --sequence-parallel",
        "--ranks 2 --pp 2 --grad-accum 2 --schedule zb-h1", "--ranks 2 --cp 2 --cp-algo all-to-all"}) {
    const CliRun r = train_gpt(d, run + layout + " --log-jsonl " + d.file("l.jsonl") + " --overwrite");
    ASSERT_EQ(r.code, 0) << layout << "\n" << r.err;
    const std::vector<Json> rows = read_jsonl(d.file("l.jsonl"));
    ASSERT_EQ(rows.size(), 2u) << layout;
    for (const Json& row : rows) {
      ASSERT_TRUE(row.contains("val_loss")) << layout;
      EXPECT_GT(row.at("val_loss").as_double(), 3.0) << layout;
      EXPECT_LT(row.at("val_loss").as_double(), 6.5) << layout;
    }
  }
}

// A text run checkpointed on 2 data-parallel ranks and resumed on one device with the same
// global batch continues the same steps: the loader reads the same windows (the checkpoint
// holds its step), so the losses and validation losses of the steps after the checkpoint are
// the 2-rank run's (FP32: within the reordered sums' 1e-5).
TEST(TrainGptText, ATextRunResumedOnAnotherLayoutContinuesTheSameSteps) {
  TempDir d;
  const std::string run = "--n-layer 1 --n-head 2 --n-embd 16 --seq 16 --threads 1 --steps 4 "
                          "--eval-every 2 --checkpoint-keep 3 --checkpoint-dir " + d.file("ck") +
                          " --data " + kFixture + "/hamlet_train.txt --val-data " + kFixture +
                          "/hamlet_val.txt ";
  const CliRun two = train_gpt(d, run + "--ranks 2 --dp 2 --batch 2 --checkpoint-every 2 "
                                        "--log-jsonl " + d.file("two.jsonl"));
  ASSERT_EQ(two.code, 0) << two.err;
  test::write_bytes(d.file("ck") + "/latest", "step-00000002\n");
  const CliRun one = train_gpt(d, run + "--batch 4 --resume --log-jsonl " + d.file("one.jsonl"));
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_NE(one.out.find("resumed from"), std::string::npos) << one.out;
  const std::vector<Json> a = read_jsonl(d.file("two.jsonl")), b = read_jsonl(d.file("one.jsonl"));
  ASSERT_EQ(a.size(), 4u);
  ASSERT_GE(b.size(), 2u);
  for (std::size_t k = 0; k < 2; ++k) {
    const Json& x = a[2 + k];
    const Json& y = b[b.size() - 2 + k];
    ASSERT_EQ(x.at("step").as_int(), y.at("step").as_int());
    EXPECT_EQ(x.at("data_position").as_int(), y.at("data_position").as_int());
    for (const char* key : {"loss", "val_loss"}) {
      if (!x.contains(key)) continue;
      const double u = x.at(key).as_double(), v = y.at(key).as_double();
      EXPECT_LE(std::abs(u - v) / v, 1e-5) << key << " step " << x.at("step").as_int();
    }
  }
  EXPECT_TRUE(b.back().contains("val_loss"));
}

TEST(TrainGptText, SamplesDecodeThroughTheTokenizerWithTemperatureTopKAndASeed) {
  TempDir d;
  const std::string sample = "--vocab-size 261 --sample 24 --temperature 0.9 --sample-top-k 5 ";
  const CliRun a = train_gpt(d, kText + kTokenizer + sample + "--steps 2 --sample-seed 7 --prompt the");
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_NE(a.out.find("sample (temperature 0.9, seed 7, top-k 5, prompt \"the\", GPT-2 tokens):\nthe"),
            std::string::npos)
      << a.out;
  const CliRun b = train_gpt(d, kText + kTokenizer + sample + "--steps 2 --sample-seed 7 --prompt the");
  EXPECT_EQ(sample_of(b.out), sample_of(a.out));  // the seed fixes the draws
  const CliRun c = train_gpt(d, kText + kTokenizer + sample + "--steps 2 --sample-seed 8 --prompt the");
  EXPECT_NE(sample_of(c.out), sample_of(a.out));
  // No prompt: the sample starts where every document starts, after <|endoftext|>.
  const CliRun e = train_gpt(d, kText + kTokenizer + sample + "--steps 2");
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("prompt <|endoftext|>, GPT-2 tokens"), std::string::npos) << e.out;
}

// A shard of bytes (scripts/prepare_text.sh's char_*.bin) under a 256-token model prints its
// sample as text; a shard under a larger vocabulary without --tokenizer prints ids.
TEST(TrainGptText, AByteShardSamplesTextAndAnotherShardSamplesIds) {
  TempDir d;
  const std::string text = test::read_bytes(kFixture + "/hamlet_train.txt");
  write_token_shard(d.file("char.bin"), std::vector<std::uint16_t>(text.begin(), text.end()));
  const std::string run = "--n-layer 1 --n-head 2 --n-embd 16 --seq 16 --batch 4 --threads 1 "
                          "--steps 1 --sample 6 --prompt the --data " + d.file("char.bin");
  const CliRun bytes = train_gpt(d, run + " --vocab-size 256");
  ASSERT_EQ(bytes.code, 0) << bytes.err;
  EXPECT_NE(bytes.out.find("sample (greedy, prompt \"the\"):\nthe"), std::string::npos) << bytes.out;
  const CliRun ids = train_gpt(d, run + " --vocab-size 300");
  ASSERT_EQ(ids.code, 0) << ids.err;
  const std::string s = sample_of(ids.out);
  const std::string body = s.substr(s.find('\n') + 1);
  EXPECT_EQ(body.find_first_not_of("0123456789 \n"), std::string::npos) << s;
}

TEST(TrainGptText, ACheckpointAndAHuggingFaceDirectorySampleWhatTheRunSampled) {
  TempDir d;
  const std::string sample = "--sample 20 --temperature 0.8 --sample-top-k 8 --prompt 'the ' ";
  const std::string vocab = "--vocab-size 261 ";
  const CliRun run = train_gpt(d, kText + kTokenizer + vocab + sample + "--steps 3 --checkpoint-dir " +
                                      d.file("ck") + " --save " + d.file("hf"));
  ASSERT_EQ(run.code, 0) << run.err;
  const CliRun ck = train_gpt(d, kText + kTokenizer + vocab + sample +
                                     "--steps 3 --resume --checkpoint-dir " + d.file("ck"));
  ASSERT_EQ(ck.code, 0) << ck.err;
  EXPECT_EQ(sample_of(ck.out), sample_of(run.out));
  const CliRun hf = train_gpt(d, "--seq 16 --batch 4 --threads 1 --data " + kFixture +
                                     "/hamlet_train.txt " + kTokenizer + sample +
                                     "--steps 0 --init-from " + d.file("hf"));
  ASSERT_EQ(hf.code, 0) << hf.err;
  EXPECT_EQ(sample_of(hf.out), sample_of(run.out));
}

TEST(TrainGptText, HostileTextInputsAreOneLineAndExitCode2) {
  TempDir d;
  expect_one_line_error(d, kText + "--steps 1 --sample 4 --tokenizer " + d.file("absent"),
                        "encoder.json: cannot open the tokenizer file");
  std::filesystem::create_directories(d.file("bad"));
  test::write_bytes(d.file("bad") + "/encoder.json", "{\"a\": 0");
  test::write_bytes(d.file("bad") + "/vocab.bpe", "#version: 0.2\n");
  expect_one_line_error(d, kText + "--steps 1 --sample 4 --tokenizer " + d.file("bad"),
                        "bad/encoder.json");
  // A validation shard tokenized for a larger vocabulary.
  write_token_shard(d.file("val.bin"), std::vector<std::uint16_t>(200, 300));
  expect_one_line_error(d, kText + "--steps 1 --val-data " + d.file("val.bin"),
                        "token 300 at position 0 is outside the vocabulary (vocab_size 256)");
  // A prompt longer than the model's positions, as bytes and through the tokenizer.
  expect_one_line_error(d, kText + "--steps 1 --sample 4 --prompt 'To be, or not to be: that is'",
                        "--prompt encodes to 28 tokens, more than the 16 positions of the model");
  expect_one_line_error(d, kText + kTokenizer + "--vocab-size 261 --steps 1 --sample 4 "
                                               "--prompt 'the the the the the the the the the "
                                               "the the the the the the the'",
                        "--prompt encodes to 17 tokens, more than the 16 positions");
  // A prompt the tokenizer encodes to ids the model has no row for.
  expect_one_line_error(d, kText + kTokenizer + "--steps 1 --sample 4 --prompt ' the'",
                        "--prompt: token 0 is id 258, outside the model's vocabulary (vocab_size 256)");
  // Empty corpora.
  test::write_bytes(d.file("empty.txt"), "");
  write_token_shard(d.file("empty.bin"), std::vector<std::uint16_t>{});
  expect_one_line_error(d, kText + "--steps 1 --val-data " + d.file("empty.txt"),
                        "empty.txt: 0 tokens, fewer than one batch needs");
  expect_one_line_error(d, "--n-layer 1 --n-head 2 --n-embd 16 --seq 16 --batch 4 --steps 1 "
                           "--data " + d.file("empty.bin"),
                        "too few tokens: 0");
  // Flags that do nothing without the flag they shape.
  expect_one_line_error(d, kText + "--steps 1 --sample-top-k 5", "--sample-top-k needs --sample N");
  expect_one_line_error(d, kText + "--steps 1 --sample-seed 5", "--sample-seed needs --sample N");
  expect_one_line_error(d, kText + "--steps 1 --val-batches 2", "--val-batches needs --val-data");
  expect_one_line_error(d, kText + kTokenizer + "--steps 1", "--tokenizer needs --sample N");
  expect_one_line_error(d, kText + "--steps 1 --eval-every 5", "with --data it needs --val-data");
}

}  // namespace
}  // namespace mixpar::ch08
