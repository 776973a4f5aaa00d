// Hugging Face directories: save -> load is bit-exact with and without the "transformer."
// prefix and in 16-bit storage; the attention-mask buffers and a tied lm_head.weight are
// accepted, an untied head, a missing or misshaped tensor and a different config are refused.
#include "model/gpt_hf.h"

#include <gtest/gtest.h>

#include "ch08_test_util.h"
#include "io/atomic_file.h"
#include "io/gpt_config.h"
#include "io/safetensors.h"
#include "util/json.h"

namespace mixpar::ch08 {
namespace {

using test::bytes_of;
using test::expect_same_tensors;
using test::input_error_of;
using test::TempDir;

const GptConfig kTiny{2, 2, 16, 8, 64};

GptModel model_with_seed(std::uint64_t seed, DType dtype = DType::kF32) {
  GptOptions o;
  o.seed = seed;
  o.dtype = dtype;
  return GptModel(kTiny, o);
}

TEST(GptHf, SaveLoadRoundTripIsBitExactWithAndWithoutPrefix) {
  for (bool prefix : {true, false}) {
    TempDir dir;
    const GptModel a = model_with_seed(11);
    save_gpt_hf(dir.str(), a, HfSaveOptions{prefix, DType::kF32});
    const SafetensorsReader r(dir.file("model.safetensors"));
    EXPECT_NE(r.find(prefix ? "transformer.h.1.mlp.c_proj.weight" : "h.1.mlp.c_proj.weight"),
              nullptr);
    ASSERT_EQ(r.metadata().size(), 1u);
    EXPECT_EQ(r.metadata()[0].second, "pt");  // transformers checks the format
    const GptModel b = load_gpt_hf(dir.str());
    EXPECT_EQ(b.config(), kTiny);
    expect_same_tensors(a.parameters(), b.parameters());
  }
}

TEST(GptHf, SixteenBitModelsRoundTripExactly) {
  for (DType d : {DType::kBF16, DType::kF16}) {
    TempDir dir;
    const GptModel a = model_with_seed(3, d);
    save_gpt_hf(dir.str(), a, HfSaveOptions{true, d});
    EXPECT_EQ(read_gpt2_config(dir.str()).torch_dtype, d == DType::kBF16 ? "bfloat16" : "float16");
    GptOptions o;
    o.dtype = d;
    expect_same_tensors(a.parameters(), load_gpt_hf(dir.str(), o).parameters());
  }
}

// Rewrites dir/model.safetensors through `edit` (name -> tensor list).
void rewrite(const TempDir& dir, const std::function<void(NamedTensors&)>& edit) {
  const SafetensorsReader r(dir.file("model.safetensors"));
  NamedTensors all = r.load_all(MemCategory::kOther);
  edit(all);
  write_safetensors(dir.file("model.safetensors"), all, {{"format", "pt"}});
}

TEST(GptHf, AcceptsMaskBuffersAndATiedHead) {
  TempDir dir;
  const GptModel a = model_with_seed(5);
  save_gpt_hf(dir.str(), a, HfSaveOptions{false, DType::kF32});
  rewrite(dir, [&](NamedTensors& all) {
    all.emplace_back("h.0.attn.bias", Tensor::zeros({1, 1, 8, 8}, DType::kF32));
    all.emplace_back("h.1.attn.masked_bias", Tensor::zeros({1}, DType::kF32));
    all.emplace_back("lm_head.weight", a.param("wte.weight").clone());
  });
  expect_same_tensors(a.parameters(), load_gpt_hf(dir.str()).parameters());
}

TEST(GptHf, RefusesAnUntiedHeadAMissingTensorAndAWrongShape) {
  TempDir dir;
  const GptModel a = model_with_seed(5);
  save_gpt_hf(dir.str(), a, HfSaveOptions{true, DType::kF32});
  rewrite(dir, [&](NamedTensors& all) {
    Tensor head = a.param("wte.weight").clone();
    head.fill(0.5f);
    all.emplace_back("lm_head.weight", head);
  });
  EXPECT_NE(input_error_of([&] { load_gpt_hf(dir.str()); }).find("lm_head.weight differs"),
            std::string::npos);

  rewrite(dir, [](NamedTensors& all) {
    std::erase_if(all, [](const auto& p) {
      return p.first == "lm_head.weight" || p.first == "transformer.ln_f.bias";
    });
  });
  EXPECT_NE(input_error_of([&] { load_gpt_hf(dir.str()); }).find("missing tensor ln_f.bias"),
            std::string::npos);

  rewrite(dir, [](NamedTensors& all) {
    all.emplace_back("transformer.ln_f.bias", Tensor::zeros({17}, DType::kF32));
  });
  EXPECT_NE(input_error_of([&] { load_gpt_hf(dir.str()); }).find("ln_f.bias is [17]"),
            std::string::npos);
}

TEST(GptHf, RefusesADirectoryOfAnotherShape) {
  TempDir dir;
  save_gpt_hf(dir.str(), model_with_seed(1));
  GptModel other(GptConfig{2, 2, 32, 8, 64});
  const std::vector<NamedTensor> dst = other.parameters();
  const std::string msg = input_error_of([&] { load_gpt_hf_into(dir.str(), other.config(), dst); });
  EXPECT_NE(msg.find("n_embd is 16, expected 32"), std::string::npos) << msg;
}

// Every config field that changes the model is honoured or refused: a layer_norm_epsilon of
// 1e-3 was accepted, ignored (the model computes with 1e-5) and exported as 1e-5.
TEST(GptHf, RefusesALayerNormEpsilonTheModelDoesNotUse) {
  TempDir dir;
  save_gpt_hf(dir.str(), model_with_seed(1));
  const std::string path = dir.str() + "/config.json";
  Json config = Json::parse(read_file(path), path);
  EXPECT_EQ(config.at("layer_norm_epsilon").as_double(), 1e-5);
  EXPECT_NO_THROW(read_gpt_hf_config(dir.str()));
  config.set("layer_norm_epsilon", 1e-3);
  write_file_atomic(path, config.dump(2));
  const std::string msg = input_error_of([&] { read_gpt_hf_config(dir.str()); });
  EXPECT_EQ(msg, path + ": layer_norm_epsilon is 0.001, mixpar's GPT-2 LayerNorms use only 1e-05 "
                        "(another epsilon is another model)");
  EXPECT_NE(input_error_of([&] { load_gpt_hf(dir.str()); }).find("layer_norm_epsilon is 0.001"),
            std::string::npos);
}

}  // namespace
}  // namespace mixpar::ch08
