// HF GPT-2 config.json: round trip, the keys transformers needs, the original GPT-2 file read
// as published, and every unsupported or malformed value refused naming the key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "expect.h"
#include "io/atomic_file.h"
#include "io/gpt_config.h"
#include "temp_dir.h"

namespace mixpar {
namespace {

using test_support::input_error_of;
using test_support::TempDir;
using ::testing::HasSubstr;

// The config.json of the published "gpt2" checkpoint (Hugging Face hub), abridged only in
// task_specific_params.
constexpr const char* kGpt2ConfigJson = R"({
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 768,
  "n_head": 12,
  "n_layer": 12,
  "n_positions": 1024,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "vocab_size": 50257
})";

HfGpt2Config tiny() {
  HfGpt2Config c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  c.vocab_size = 256;
  c.n_positions = 128;
  return c;
}

TEST(GptConfig, RoundTripsThroughAFileOrItsDirectory) {
  TempDir dir;
  write_gpt2_config(dir.file("config.json"), tiny());
  EXPECT_EQ(read_gpt2_config(dir.file("config.json")), tiny());
  EXPECT_EQ(read_gpt2_config(dir.str()), tiny());
}

TEST(GptConfig, WritesTheKeysTransformersNeeds) {
  TempDir dir;
  write_gpt2_config(dir.file("config.json"), tiny());
  const std::string text = read_file(dir.file("config.json"));
  EXPECT_THAT(text, HasSubstr("\"model_type\": \"gpt2\""));
  EXPECT_THAT(text, HasSubstr("\"architectures\": [\n    \"GPT2LMHeadModel\"\n  ]"));
  EXPECT_THAT(text, HasSubstr("\"layer_norm_epsilon\": 1e-05"));
  EXPECT_THAT(text, HasSubstr("\"activation_function\": \"gelu_new\""));
  EXPECT_THAT(text, HasSubstr("\"tie_word_embeddings\": true"));
  EXPECT_THAT(text, HasSubstr("\"n_inner\": null"));
  EXPECT_THAT(text, HasSubstr("\"eos_token_id\": 255"));
  const Json j = Json::parse(text);
  for (const char* key : {"n_layer", "n_head", "n_embd", "vocab_size", "n_positions", "n_ctx"}) {
    EXPECT_TRUE(j.at(key).is_integer()) << key;
  }
  EXPECT_EQ(text.back(), '\n');
}

TEST(GptConfig, ReadsThePublishedGpt2Config) {
  const HfGpt2Config c = gpt2_config_from_json(Json::parse(kGpt2ConfigJson), "gpt2/config.json");
  EXPECT_EQ(c.n_layer, 12);
  EXPECT_EQ(c.n_head, 12);
  EXPECT_EQ(c.n_embd, 768);
  EXPECT_EQ(c.vocab_size, 50257);
  EXPECT_EQ(c.n_positions, 1024);
  EXPECT_DOUBLE_EQ(c.layer_norm_epsilon, 1e-5);
}

std::string error_with(const std::string& key, const Json& value) {
  Json j = Json::parse(kGpt2ConfigJson);
  if (value.is_string() && value.as_string() == "<remove>") {
    auto& members = j.as_object();
    std::erase_if(members, [&](const Json::Member& m) { return m.first == key; });
  } else {
    j.set(key, value);
  }
  const std::string msg = input_error_of([&] { gpt2_config_from_json(j, "m/config.json"); });
  EXPECT_THAT(msg, HasSubstr("m/config.json: "));
  return msg;
}

TEST(GptConfig, RefusesMissingOrNonPositiveSizes) {
  EXPECT_THAT(error_with("n_head", "<remove>"), HasSubstr("missing key \"n_head\""));
  EXPECT_THAT(error_with("n_head", -1), HasSubstr("n_head must be a positive integer, got -1"));
  EXPECT_THAT(error_with("n_layer", "12"),
              HasSubstr("n_layer must be a positive integer, got \"12\""));
  EXPECT_THAT(error_with("n_embd", 12.5), HasSubstr("n_embd must be a positive integer"));
  EXPECT_THAT(error_with("n_head", 7), HasSubstr("n_embd 768 is not a multiple of n_head 7"));
  EXPECT_THAT(error_with("layer_norm_epsilon", 0.0),
              HasSubstr("layer_norm_epsilon must be a positive"));
}

TEST(GptConfig, RefusesWhatOurGptDoesNotCompute) {
  EXPECT_THAT(error_with("model_type", "llama"), HasSubstr("model_type is \"llama\""));
  EXPECT_THAT(error_with("activation_function", "relu"),
              HasSubstr("activation_function is \"relu\""));
  EXPECT_THAT(error_with("n_inner", 1000), HasSubstr("n_inner is 1000"));
  EXPECT_THAT(error_with("tie_word_embeddings", false), HasSubstr("tie_word_embeddings"));
  EXPECT_THAT(error_with("scale_attn_by_inverse_layer_idx", true),
              HasSubstr("scale_attn_by_inverse_layer_idx"));
}

TEST(GptConfig, AcceptsTheOtherTanhGeluNameAndAnExplicitInnerSize) {
  Json j = Json::parse(kGpt2ConfigJson);
  j.set("activation_function", "gelu_pytorch_tanh");
  j.set("n_inner", 3072);
  EXPECT_EQ(gpt2_config_from_json(j, "c").n_embd, 768);
}

TEST(GptConfig, RefusesToWriteAnInvalidConfig) {
  TempDir dir;
  HfGpt2Config c = tiny();
  c.n_head = 3;
  EXPECT_THAT(input_error_of([&] { write_gpt2_config(dir.file("config.json"), c); }),
              HasSubstr("not a multiple of n_head 3"));
  EXPECT_TRUE(dir.entries().empty());
}

// train_gpt --init-from DIR reads DIR/config.json: a name the system cannot look up is bad
// input naming it (it escaped as a filesystem_error: "internal error", exit code 1).
TEST(GptConfig, APathTooLongToLookUpIsAnInputErrorNamingIt) {
  const std::string path = std::string(300, 'x') + "/config.json";
  EXPECT_THAT(input_error_of([&] { read_gpt2_config(path); }), HasSubstr(path));
}

}  // namespace
}  // namespace mixpar
