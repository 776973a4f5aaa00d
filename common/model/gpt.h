// GPT-2 on the CPU, forward and backward written out layer by layer (common/model/layers.h,
// linear layers from common/ops): pre-LN blocks, learned positions, GELU tanh, LM head tied to
// wte, mean cross-entropy over B*T. Parameters, gradients and activations are held in one
// working dtype (f32, bf16, f16; f64 for gradient checks); every GEMM accumulates in FP32.
// Threads: OpenMP (OMP_NUM_THREADS). Results are bit-reproducible for a given thread count
// (Eigen's GEMM blocking, hence its summation order, depends on the number of threads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "model/gpt_block.h"
#include "model/gpt_params.h"
#include "model/layers.h"
#include "model/tensor_parallel.h"
#include "tensor/tensor.h"

namespace mixpar {

struct GptOptions {
  DType dtype = DType::kF32;  // the working dtype of parameters, gradients, activations
  std::uint64_t seed = 1;     // Philox seed of the initial weights (ParamRegistry::initialize)
  // Activation recompute per block: forward keeps only each block's input [B, T, C]; backward
  // re-runs a block's forward into one shared set of buffers just before its backward.
  bool recompute = false;
  // Buffers (activations, kActivations; gradient workspaces, kOther) stay allocated between
  // steps and are reused while B and T stay the same. false: each block's activations are
  // freed as soon as its backward has run, and everything else when backward returns, so the
  // ledger shows activation memory falling to zero (the chapters on memory use this).
  bool keep_buffers = true;
  // The pipeline stage this model runs (chapter 7): its blocks, plus the embedding on the
  // first stage and the final LayerNorm, tied head and loss on the last. Default: everything.
  GptStage stage;
  // Tensor parallel (chapter 6): this rank's place in the tp group, and the group (tp.size > 1
  // needs tp_ops of that size; it must outlive the model), which hands each block its linear
  // layers and runs the embedding's, the head's and the loss's collectives. The registry holds
  // Megatron's shards (make_gpt2_registry with tp), the vocabulary padded to
  // padded_vocab(V, tp.size); tp.size 1: the unsplit model, no collective.
  TensorShard tp;
  TensorParallelGroup* tp_ops = nullptr;
  // Sequence parallel (with tp > 1; Korthikanti et al. 2022): the LayerNorm and residual
  // regions hold this rank's B T / tp rows (B T must divide by tp); stage_input(),
  // stage_output(), output_grad() and input_grad() are then those rows, [1, B T / tp, C].
  bool sequence_parallel = false;
  // Where the parameters live (chapter 7's interleaved pipeline: a rank's model chunks share
  // one registry, one flat buffer for the optimizer and the gradient sync). Null: the model's
  // own registry, allocated and initialised. Otherwise a registry, allocated in `dtype` and
  // initialised, holding every entry of this stage under the same name, shape and holding: the
  // model's parameters and gradients are views of its tensors (it must outlive the model).
  ParamRegistry* params = nullptr;
  // The tied wte's gradient tensor is shared with another model of this rank (chapter 7's V
  // placement: rank 0 runs both the embedding and the tied head, one wte in the shared
  // registry): the embedding's and the head's shares are only ever added to it, never written
  // over, and whoever runs the step zeroes it first.
  bool wte_grad_shared = false;
  // Context parallel (chapter 6, part 2): the model runs this rank's T rows of each sequence,
  // its attention through the seam (which reaches the other ranks' rows) and its position
  // embedding at the seam's positions. Null: the whole sequence here. It must outlive the model.
  AttentionSeam* attention = nullptr;
  // The blocks' GEMMs (model/block_gemms.h; chapter 3's FP8): null, common/ops'. With tp > 1
  // chapter 6's split layers run their local products through it; it must outlive the model.
  BlockGemms* gemms = nullptr;
  // The blocks whose MLP branch runs through a BlockFeedForward (block_feed_forward.h;
  // chapter 9's MoE layer): null, every block's own MLP. Not with recompute or sequence
  // parallelism (std::invalid_argument): a branch holds one forward's state, and takes whole
  // rows. It must outlive the model.
  FeedForwardSeam* feed_forward = nullptr;
};

// Chapter 5's ZeRO-3 (Rajbhandari et al. 2020; docs/REFERENCE.md, ZeRO): each rank keeps only
// a shard of the parameters, and a unit's parameters are gathered just before forward or
// backward reads them and released just after. The model announces each unit around the code
// that reads its parameters; the hook makes them resident. Units: the blocks (their model
// index), the embedding (kEmbedding: wte and wpe, read by the forward only: the embedding's
// backward reads token ids, not weights) and the head (GptConfig::n_layer: ln_f and the tied
// wte, read by the forward and the backward).
class BlockParamHook {
 public:
  enum class Phase : std::uint8_t { kForward, kBackward };
  static constexpr std::int64_t kEmbedding = -1;
  virtual ~BlockParamHook() = default;
  virtual void before_block(std::int64_t block, Phase phase) = 0;
  virtual void after_block(std::int64_t block, Phase phase) = 0;
};

class GptModel {
 public:
  // Registers (make_gpt2_registry), allocates and initialises the parameters; gradients are 0.
  // InputError on an invalid config or a dtype other than f32, f16, bf16, f64.
  explicit GptModel(GptConfig config, GptOptions options = {});
  GptModel(const GptModel&) = delete;  // tensors are handles: a copy would share weights
  GptModel& operator=(const GptModel&) = delete;
  GptModel(GptModel&&) = default;
  GptModel& operator=(GptModel&&) = default;

  const GptConfig& config() const { return config_; }
  const GptOptions& options() const { return options_; }
  std::int64_t num_parameters() const { return registry_.numel(); }
  std::int64_t flops_per_token(std::int64_t seq_len) const {
    return config_.flops_per_token(seq_len);
  }

  // tokens, targets [B, T] row-major token ids in [0, V), T <= n_positions (InputError
  // otherwise). Returns the mean cross-entropy over the B*T positions, or NaN when targets
  // is empty (inference: logits only, no backward possible). Keeps what backward needs.
  // A pipeline stage: the first stage embeds `tokens`; any other stage reads stage_input(),
  // which the caller fills (after prepare(B, T)) with the previous stage's output, and may
  // pass empty tokens. The last stage needs targets for a backward; other stages return NaN
  // and leave their output in stage_output(). A non-last stage is ready for backward once
  // forward ran (its targets are the next stage's business).
  // slot: which micro-batch's activations (0 unless a pipeline keeps several in flight:
  // each slot holds one forward's activations until its backward; slots are allocated on
  // first use and charged to the ledger, so peak activation memory counts the micro-batches
  // a schedule holds at once).
  double forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                 std::int64_t B, std::int64_t T, int slot = 0);

  // Pipeline stages (chapter 7): the buffers of a [B, T] micro-batch, allocated now (forward
  // does it too). stage_input(): [B, T, C], a non-first stage's input (the activation it
  // receives). stage_output(): [B, T, C], a non-last stage's output after forward (the
  // activation it sends). output_grad(): [B, T, C], where a non-last stage's backward starts
  // (the gradient it receives, written before backward). input_grad(): [B, T, C], after
  // backward on a non-first stage, the gradient of the loss w.r.t. stage_input() (it sends).
  // The slot's buffers for stage_input() / stage_output(); output_grad() and input_grad() are
  // one workspace shared by every slot (a backward reads it, the next one overwrites it).
  void prepare(std::int64_t B, std::int64_t T, int slot = 0) {
    select_slot(slot);
    ensure_buffers(B, T);
  }
  Tensor& stage_input(int slot = 0);
  const Tensor& stage_output(int slot = 0) const;
  Tensor& output_grad();
  const Tensor& input_grad() const;
  int slots() const { return static_cast<int>(slots_.size()); }
  // Frees one slot's activations (its backward ran; a pipeline frees it before the next).
  void release_slot(int slot);
  const GptStage& stage() const { return options_.stage; }
  // The vocabulary rows [vocab_begin(), + vocab_shard()) this rank holds of the padded wte
  // (all of V on one rank).
  std::int64_t vocab_shard() const { return padded_vocab(config_.vocab_size, options_.tp.size) /
                                            options_.tp.size; }
  std::int64_t vocab_begin() const { return options_.tp.rank * vocab_shard(); }
  // logits [B, T, V] of the last forward (this rank's [B, T, vocab_shard()] with tensor
  // parallelism, padded columns -inf), in the working dtype. Backward overwrites them
  // with their gradient (in place, as llm.c does: one [B*T, V] buffer instead of two).
  const Tensor& logits() const { return cur().logits; }

  // Backward of the last forward with targets. The gradient of the mean loss is multiplied by
  // loss_scale before its first rounding into the working dtype (chapter 2's loss scaling:
  // FP16 gradients overflow or underflow right there). accumulate: gradients are added to
  // (micro-batches); otherwise overwritten. A non-last stage starts from output_grad() (which
  // carries the loss scale already) and ignores loss_scale.
  void backward(float loss_scale = 1.0f, bool accumulate = false, int slot = 0);

  // The same backward split in two (chapter 7's ZB-H1; Qi et al. 2023), backward() being
  // backward_input then backward_weight bit for bit. backward_input (B): the input gradient,
  // input_grad() on a non-first stage (what the stage sends back), with the LayerNorms'
  // weight gradients (O(B T C)); `accumulate` applies to those. backward_weight (W): every
  // other weight gradient (the GEMMs', the head's wte, the embedding's), and the gradient-ready
  // hook, from what B left in the slot: the layer inputs and the output gradients, written
  // over activations B has consumed, so a slot waiting for W holds no more than after its
  // forward; the slot is released by W (keep_buffers false) and may not be forwarded into
  // before it. Not with recompute or sequence parallelism (std::invalid_argument): both share
  // activation buffers between blocks.
  void backward_input(float loss_scale = 1.0f, bool accumulate = false, int slot = 0);
  void backward_weight(bool accumulate = false, int slot = 0);

  ParamRegistry& registry() { return registry_; }
  const ParamRegistry& registry() const { return registry_; }
  std::vector<NamedTensor> parameters() const { return registry_.parameters(); }
  std::vector<NamedTensor> gradients() const { return registry_.gradients(); }
  const Tensor& param(std::string_view name) const { return registry_.at(name).param; }
  const Tensor& grad(std::string_view name) const { return registry_.at(name).grad; }
  void zero_grad() { registry_.zero_grad(); }

  // The linear layers the stage's block i (model block first_block + i) holds: DenseLinear on
  // one rank, chapter 6's column- and row-parallel layers with tensor parallelism
  // (block_linear.h); with sequence parallelism sp_block_linears (and block_linears is empty).
  const BlockLinears& block_linears(std::size_t i) const { return linears_.at(i); }
  const SpBlockLinears& sp_block_linears(std::size_t i) const { return sp_linears_.at(i); }

  // Frees every activation and workspace buffer now (they are allocated again on demand).
  void release_buffers();

  // Called during backward, on its thread, once per parameter with its index in
  // registry().entries(), as soon as that gradient is final for this backward (written or
  // accumulated): ln_f after the head, block L-1 .. 0 after each block's backward, then wpe and
  // wte (tied: final only after the embedding). DDP starts reducing buckets from it. An empty
  // function removes the hook. A stage reports the entries it holds, in the same order (on a
  // last stage that is not the first, wte right after the head).
  using GradReadyHook = std::function<void(std::size_t entry)>;
  void set_grad_ready_hook(GradReadyHook hook) { grad_ready_ = std::move(hook); }

  // ZeRO-3's hook (null: none; it must outlive its use). Not with the split backward
  // (backward_input / backward_weight: std::invalid_argument).
  void set_block_param_hook(BlockParamHook* hook) { param_hook_ = hook; }
  // Re-reads every block's parameter handles from the registry, after the entries' param were
  // pointed at other storage (ZeRO-3's per-block gathered buffers).
  void rebind_params();

 private:
  void ensure_buffers(std::int64_t B, std::int64_t T);
  GptBlockActs& acts_of(std::int64_t layer);  // the layer's own set, or the shared one (recompute)
  void backward_head_input(float loss_scale, bool accumulate);
  void backward_head_weight(bool accumulate);
  Tensor ln_f_parts();
  void add_ln_f_parts(const Tensor& summed, bool accumulate);
  void backward_blocks(bool accumulate);
  void backward_embedding(const Tensor& dx0, bool accumulate);
  void release_after_backward();  // keep_buffers false: the slot, then the workspace
  void check_split(const char* what) const;
  void report_ready(std::size_t first, std::size_t count) const;  // hook on entries [first, +count)
  std::size_t entry_index(std::string_view name) const;
  void params_before(std::int64_t block, BlockParamHook::Phase phase) const {
    if (param_hook_ != nullptr) param_hook_->before_block(block, phase);
  }
  void params_after(std::int64_t block, BlockParamHook::Phase phase) const {
    if (param_hook_ != nullptr) param_hook_->after_block(block, phase);
  }
  std::int64_t first_block() const { return options_.stage.first_block; }
  std::int64_t local_blocks() const { return options_.stage.blocks(config_); }
  // The tp group, or null on one rank (the unsplit code path).
  TensorParallelGroup* tp() const { return options_.tp.size > 1 ? options_.tp_ops : nullptr; }
  bool sp() const { return tp() != nullptr && options_.sequence_parallel; }
  // Sequence parallel: the replicated gradients' sums over tp are one call after the stage's
  // last block (backward_blocks), the head's ln_f among them; not under a block parameter hook.
  bool batch_sp_grads() const { return sp() && param_hook_ == nullptr; }
  std::int64_t local_heads() const { return config_.n_head / options_.tp.size; }

  GptConfig config_;
  GptOptions options_;
  ParamRegistry registry_;
  std::vector<GptBlockWeights> w_, dw_;  // per layer: handles on parameters, gradients
  // Per layer: its four linear layers, built once (sequence parallel: sp_linears_ instead).
  std::vector<BlockLinears> linears_;
  std::vector<SpBlockLinears> sp_linears_;
  // Per layer: the branch in place of its MLP, or null (GptOptions::feed_forward).
  std::vector<BlockFeedForward*> ffn_;
  // What one micro-batch's backward needs (kActivations), one set per slot. resid[i]
  // [B, T, C] is the input of the stage's block i (block first_block + i of the model),
  // resid[n] the last block's output. acts has one set per block, or a single shared set under
  // recompute.
  struct Slot {
    std::vector<std::int32_t> tokens, targets;  // of the slot's last forward, [B, T]
    std::vector<Tensor> resid;
    std::vector<GptBlockActs> acts;
    Tensor lnf, lnf_mean, lnf_rstd;    // [B, T, C], [B*T], [B*T]
    Tensor logits;                     // [B, T, V]; d(logits) after backward
    Tensor lse;                        // [B*T] log-sum-exp of each row, for backward
    layers::CrossEntropyStats ce_stats;  // [B*T] each, kOther
    bool ready_for_backward = false;
    bool weight_pending = false;  // backward_input ran, backward_weight not yet
    void release();
  };
  Slot& cur() { return slots_[static_cast<std::size_t>(slot_)]; }
  const Slot& cur() const { return slots_[static_cast<std::size_t>(slot_)]; }
  void select_slot(int slot);  // grows slots_ on demand; std::invalid_argument if < 0

  std::vector<Slot> slots_ = std::vector<Slot>(1);
  int slot_ = 0;          // the slot forward and backward work on
  GptBlockWorkspace ws_;  // kOther, shared by the slots (one backward runs at a time)
  GradReadyHook grad_ready_;
  BlockParamHook* param_hook_ = nullptr;
};

}  // namespace mixpar
