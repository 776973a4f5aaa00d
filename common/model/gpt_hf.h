// GPT-2 <-> a Hugging Face directory (config.json + model.safetensors) that transformers'
// GPT2LMHeadModel.from_pretrained loads. HF names and Conv1D [in, out] layout are the registry's
// own, so nothing is transposed. Reading accepts names with or without "transformer.", skips the
// attn.bias / attn.masked_bias buffers and accepts lm_head.weight only when it equals wte.
#pragma once

#include <span>
#include <string>

#include "io/gpt_config.h"
#include "model/gpt.h"

namespace mixpar {

// The model a config.json describes; a field that would change it and that mixpar's GPT does
// not honour (a layer_norm_epsilon other than GPT-2's 1e-5) is an InputError naming `source`
// and the field (io/gpt_config.h refuses the others: activation, n_inner, attention scaling...).
GptConfig gpt_config_from_hf(const HfGpt2Config& hf, const std::string& source = "config.json");
HfGpt2Config hf_config_from_gpt(const GptConfig& config, DType stored);

struct HfSaveOptions {
  // GPT2LMHeadModel.save_pretrained writes "transformer.h.0..."; the hub's original gpt2 files
  // have bare names. transformers reads both.
  bool transformer_prefix = true;
  DType dtype = DType::kF32;  // F32, F16 or BF16 (config.json's torch_dtype follows)
};

// Writes dir/model.safetensors, then dir/config.json, each atomically (dir is created). params
// are the registry's tensors under their HF names in any float dtype (fp32 masters, or a 16-bit
// working copy), converted to options.dtype. InputError if a name or shape does not belong to
// `config`, or one is missing.
void save_gpt_hf(const std::string& dir, const GptConfig& config,
                 std::span<const NamedTensor> params, const HfSaveOptions& options = {});
void save_gpt_hf(const std::string& dir, const GptModel& model, const HfSaveOptions& options = {});

// dir/config.json as a GptConfig (InputError naming the key for anything mixpar cannot compute).
GptConfig read_gpt_hf_config(const std::string& dir);
// The first model size that differs, as "n_embd is 64, expected 128"; empty when the sizes
// (n_layer, n_head, n_embd, n_positions, vocab_size) are equal.
std::string config_difference(const GptConfig& got, const GptConfig& want);

// Fills dst (registry names and shapes of `expected`, any float dtype, each rounded into its
// own dtype) from dir. InputError, naming the directory and the first difference, if dir's
// config is not `expected` or the file has a missing, misshaped, repeated or unknown tensor.
void load_gpt_hf_into(const std::string& dir, const GptConfig& expected,
                      std::span<const NamedTensor> dst);

// A model of dir's shape in options.dtype holding dir's weights (options.seed is unused).
GptModel load_gpt_hf(const std::string& dir, GptOptions options = {});

}  // namespace mixpar
