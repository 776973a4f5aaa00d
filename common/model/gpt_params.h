// GPT-2's shape (GptConfig) and the one parameter registry every later chapter reads: each
// parameter registered once under its Hugging Face name with its full shape, how this rank
// holds it, whether weight decay applies, how it is initialised, and its gradient. Parameters
// and gradients live in one flat buffer each (registry order), entries being views of them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/mlp.h"  // NamedTensor
#include "tensor/tensor.h"

namespace mixpar {

struct GptConfig {
  std::int64_t n_layer = 12;
  std::int64_t n_head = 12;
  std::int64_t n_embd = 768;  // C
  std::int64_t n_positions = 1024;
  std::int64_t vocab_size = 50257;

  // InputError unless every size is positive and n_embd is a multiple of n_head.
  void validate() const;
  std::int64_t head_dim() const { return n_embd / n_head; }
  // All parameters, the LM head counted once (tied): V C + P C + L (12 C^2 + 13 C) + 2 C.
  std::int64_t num_parameters() const;
  // Training FLOPs per token as llm.c counts them (gpt2_estimate_mfu): 6 N + 6 L C T, N all
  // parameters (wpe and LayerNorms included, though they do no GEMM), T the sequence length.
  // 6 N is 2 (forward) + 4 (backward) FLOPs per weight; 6 L C T is the attention matmuls,
  // QK^T and PV, over the causal half only (full T x T would be 12 L C T).
  std::int64_t flops_per_token(std::int64_t seq_len) const;
  bool operator==(const GptConfig&) const = default;

  static GptConfig gpt2_small() { return {}; }  // 124M: 12 layers, 12 heads, 768 wide
};

// How this rank holds a parameter. A single device holds everything whole (kReplicated, stage
// 0); chapter 6 splits linear layers by columns or rows and wte by vocabulary rows, chapter 7
// gives each block to one pipeline stage.
enum class ParamSplit : std::uint8_t {
  kReplicated,  // the full tensor on every rank of its group
  kColumns,     // output columns [shard * n / shards, ...) of a Conv1D weight (and its bias)
  kRows,        // input rows of a Conv1D weight
  kVocab,       // vocabulary rows of an embedding
};
std::string_view param_split_name(ParamSplit s);  // "replicated", "columns", "rows", "vocab"

struct ParamHolding {
  ParamSplit split = ParamSplit::kReplicated;
  std::int64_t shard = 0;  // this rank's slice along the split dimension
  std::int64_t num_shards = 1;
  int stage = 0;  // the pipeline stage that owns the parameter
};

enum class ParamInit : std::uint8_t { kNormal, kZeros, kOnes };

struct ParamEntry {
  std::string name;  // Hugging Face name: "h.3.attn.c_attn.weight"
  Shape shape;       // the full, unsharded shape
  ParamHolding holding;
  bool weight_decay;  // 2-D weights (and embeddings) only: never biases or LayerNorm
  ParamInit init;
  float init_std;       // kNormal only
  std::int64_t offset;  // first element in the flat buffers (also the Philox draw index / 2)
  Tensor param;         // this rank's values in the working dtype, kParameters
  Tensor grad;          // same shape and dtype, kGradients
};

class ParamRegistry {
 public:
  // Registers a parameter (names must be unique; InputError otherwise). Tensors are views
  // made by allocate(); until then param and grad are undefined.
  ParamEntry& add(std::string name, Shape shape, bool weight_decay, ParamInit init,
                  float init_std = 0.0f, ParamHolding holding = {});
  // One flat kParameters and one flat kGradients buffer (gradients zeroed) of `dtype`; each
  // entry's param and grad become views at its offset.
  void allocate(DType dtype);
  // kNormal: element i of the parameter at `offset` is Philox(seed) normal draw offset + i
  // (draws 2 (offset + i), 2 (offset + i) + 1), so any slice can be initialised alone. FP32
  // values rounded to the dtype: a bf16 model holds exactly the rounded fp32 one.
  void initialize(std::uint64_t seed);

  std::span<const ParamEntry> entries() const { return entries_; }
  std::span<ParamEntry> entries() { return entries_; }
  const ParamEntry& at(std::string_view name) const;  // InputError naming the missing name
  ParamEntry& at(std::string_view name);
  std::int64_t numel() const { return numel_; }
  const Tensor& flat_params() const { return flat_params_; }
  const Tensor& flat_grads() const { return flat_grads_; }

  // (name, tensor) lists in registry order; handles on the registry's storage.
  std::vector<NamedTensor> parameters() const;
  std::vector<NamedTensor> gradients() const;
  void zero_grad();

 private:
  std::vector<ParamEntry> entries_;
  std::int64_t numel_ = 0;
  Tensor flat_params_, flat_grads_;
};

// The GPT-2 parameters in Hugging Face order, with GPT-2's initialisation (REFERENCE.md):
// weights N(0, 0.02), attn.c_proj and mlp.c_proj N(0, 0.02 / sqrt(2 n_layer)), biases 0,
// LayerNorm weight 1. Registered, not yet allocated.
ParamRegistry make_gpt2_registry(const GptConfig& config);

}  // namespace mixpar
