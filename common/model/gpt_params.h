// GPT-2's shape (GptConfig) and the one parameter registry every later chapter reads: each
// parameter registered once under its Hugging Face name with its full shape, how this rank
// holds it, whether weight decay applies, how it is initialised, and its gradient. Parameters
// and gradients live in one flat buffer each (registry order), entries being views of them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
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
  // kColumns: the output columns form this many equal groups, each split alike (c_attn's
  // q | k | v: 3, so that a rank holds the q, k and v columns of its own heads).
  int column_groups = 1;
  // A second copy of a shared parameter: the tied LM head's wte on the last pipeline stage,
  // when the first stage (which owns wte) is another one. Its gradient is summed with the
  // owner's each step, and it is counted once (on the owner) in the gradient norm.
  bool tied_copy = false;
};

// A pipeline stage of GPT-2: a contiguous range of blocks, the embedding (wte, wpe) on the
// first stage, the final LayerNorm, the tied LM head (wte again) and the loss on the last.
// One stage of one holds the whole model. The split rule (gpt_stage): as ring_chunk splits a
// buffer, the n_layer blocks are shared out as evenly as possible, the first n_layer % count
// stages taking one block more (the last stage also carries the head, the largest GEMM).
struct GptStage {
  int index = 0, count = 1;
  std::int64_t first_block = 0;
  std::int64_t end_block = -1;  // one past the last block; -1: n_layer (the whole stack)
  bool is_first() const { return index == 0; }
  bool is_last() const { return index == count - 1; }
  bool whole() const { return count == 1; }
  std::int64_t blocks(const GptConfig& c) const;  // how many blocks this stage runs
  std::int64_t end(const GptConfig& c) const { return end_block < 0 ? c.n_layer : end_block; }
};
// Stage `index` of `count` by the rule above. InputError naming the numbers when count < 1,
// index is outside [0, count) or count > n_layer (a stage would have no block to run).
GptStage gpt_stage(const GptConfig& config, int index, int count);

// The shape this rank stores of a parameter whose full shape is `full` (dimension 0 split for
// kRows and kVocab, the last dimension for kColumns). std::invalid_argument when the split
// does not divide the dimension.
Shape held_shape(const Shape& full, const ParamHolding& h);

// A run of elements of the full (unsharded) tensor in row-major order.
struct ElementRange {
  std::int64_t begin = 0, count = 0;
  bool operator==(const ElementRange&) const = default;
};
// Which elements of the full tensor this rank's tensor holds, in the order it stores them
// (so element k of the held tensor is the k-th element of these ranges).
std::vector<ElementRange> held_elements(const Shape& full, const ParamHolding& h);

// A tensor-parallel rank's place (chapter 6): rank `rank` of `size`.
struct TensorShard {
  int rank = 0, size = 1;
};

// The vocabulary a tensor-parallel wte holds: vocab rounded up to a multiple of tp, so that
// every rank holds the same number of rows (at most tp - 1 padding rows in all; the CPU engine
// has no tensor-core tile to align them to). tp = 1: the vocabulary itself, no padding. The
// padding rows are zeros and their logits are masked (chapter 6), so they never change the
// loss or a gradient.
std::int64_t padded_vocab(std::int64_t vocab, int tp);

enum class ParamInit : std::uint8_t { kNormal, kZeros, kOnes };

struct ParamEntry {
  std::string name;  // Hugging Face name: "h.3.attn.c_attn.weight"
  Shape shape;       // the full, unsharded shape (param and grad: held_shape(shape, holding))
  ParamHolding holding;
  bool weight_decay;  // 2-D weights (and embeddings) only: never biases or LayerNorm
  ParamInit init;
  float init_std;       // kNormal only
  std::int64_t offset;  // first element in this registry's flat buffers
  // First element in the whole model's flat order (make_gpt2_registry of one stage): the
  // Philox draw index / 2 of the initialisation, so a stage, whatever the split, starts from
  // the very values the whole model does.
  std::int64_t init_offset;
  Tensor param;         // this rank's values in the working dtype, kParameters
  Tensor grad;          // same shape and dtype, kGradients
  // kNormal: only the first init_rows rows of the full tensor are drawn; the rows after them
  // are padding (a tensor-parallel wte's padded vocabulary), initialised to zeros. -1: all.
  std::int64_t init_rows = -1;
};

class ParamRegistry {
 public:
  // Registers a parameter (names must be unique; InputError otherwise). Tensors are views
  // made by allocate(); until then param and grad are undefined. init_offset < 0: the
  // parameter's place in this registry (a registry of the whole model).
  ParamEntry& add(std::string name, Shape shape, bool weight_decay, ParamInit init,
                  float init_std = 0.0f, ParamHolding holding = {}, std::int64_t init_offset = -1);
  // One flat kParameters and one flat kGradients buffer (gradients zeroed) of `dtype`; each
  // entry's param and grad become views at its offset.
  void allocate(DType dtype);
  // kNormal: element i of the parameter at `init_offset` is Philox(seed) normal draw
  // init_offset + i (draws 2 (init_offset + i), 2 (init_offset + i) + 1), so any slice, and
  // any pipeline stage, can be initialised alone. FP32
  // values rounded to the dtype: a bf16 model holds exactly the rounded fp32 one.
  void initialize(std::uint64_t seed);

  std::span<const ParamEntry> entries() const { return entries_; }
  std::span<ParamEntry> entries() { return entries_; }
  const ParamEntry& at(std::string_view name) const;  // InputError naming the missing name
  ParamEntry& at(std::string_view name);
  bool contains(std::string_view name) const { return index_.contains(std::string(name)); }
  // The entry's position in entries(); InputError naming a missing name.
  std::size_t index_of(std::string_view name) const;
  std::int64_t numel() const { return numel_; }
  const Tensor& flat_params() const { return flat_params_; }
  const Tensor& flat_grads() const { return flat_grads_; }

  // (name, tensor) lists in registry order; handles on the registry's storage.
  std::vector<NamedTensor> parameters() const;
  std::vector<NamedTensor> gradients() const;
  void zero_grad();

 private:
  std::vector<ParamEntry> entries_;
  std::unordered_map<std::string, std::size_t> index_;  // name -> entry: add and at in O(1)
  std::int64_t numel_ = 0;
  Tensor flat_params_, flat_grads_;
};

// The GPT-2 parameters in Hugging Face order, with GPT-2's initialisation (docs/REFERENCE.md, GPT-2 layout and initialisation):
// weights N(0, 0.02), attn.c_proj and mlp.c_proj N(0, 0.02 / sqrt(2 n_layer)), biases 0,
// LayerNorm weight 1. Registered, not yet allocated. A stage registers only what it runs
// (GptStage), in the same order, with the whole model's init offsets. With tp.size > 1 the
// holdings are Megatron-LM's split (Shoeybi et al. 2019): c_attn and c_fc by output columns
// (c_attn by heads: q, k and v columns of the rank's heads), attn.c_proj and mlp.c_proj by
// input rows (their biases whole: added once, after the reduction), wte by vocabulary rows,
// wpe and LayerNorms replicated. wte's full shape is [padded_vocab(V, tp), C], its padding
// rows zeros, and the parameters after it keep the unpadded model's init offsets. InputError
// when tp does not divide n_head or 4 n_embd.
ParamRegistry make_gpt2_registry(const GptConfig& config, const GptStage& stage = {},
                                 const TensorShard& tp = {});

}  // namespace mixpar
