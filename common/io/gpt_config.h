// The config.json of a Hugging Face GPT-2 directory (config.json + model.safetensors), the
// form in which mixpar saves models so that `transformers` loads them as GPT2LMHeadModel.
// The reader refuses, with an InputError naming the key, any value our GPT does not compute
// (another activation, untied LM head, a non-4C MLP, ...), so a load never silently differs.
#pragma once

#include <cstdint>
#include <string>

#include "util/json.h"

namespace mixpar {

struct HfGpt2Config {
  std::int64_t n_layer = 12;
  std::int64_t n_head = 12;
  std::int64_t n_embd = 768;
  std::int64_t vocab_size = 50257;
  std::int64_t n_positions = 1024;
  double layer_norm_epsilon = 1e-5;
  std::string torch_dtype = "float32";  // the dtype the weights are stored in
  bool operator==(const HfGpt2Config&) const = default;
};

// InputError unless every size is positive and n_embd is a multiple of n_head.
void validate_gpt2_config(const HfGpt2Config& c, const std::string& source);

// Every key transformers needs, sorted as transformers writes them. Dropouts are 0 (mixpar
// trains without dropout); bos/eos are vocab_size - 1 (50256 for GPT-2's vocabulary).
Json gpt2_config_to_json(const HfGpt2Config& c);
// The five sizes are required; other keys are checked when present.
HfGpt2Config gpt2_config_from_json(const Json& json, const std::string& source);

// `path` is config.json itself or the directory holding it.
HfGpt2Config read_gpt2_config(const std::string& path);
void write_gpt2_config(const std::string& path, const HfGpt2Config& c);  // atomic, pretty

}  // namespace mixpar
