// The memory bill of training: bytes per device by category (working parameters, gradients,
// FP32 master weights, optimizer state, activations) for a parameter count or a GPT-2 shape,
// under mixed precision, ZeRO stages 0-3, tensor/pipeline parallelism and recompute.
// Pure functions, no I/O; every invalid configuration is an InputError.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "numerics/dtype.h"

namespace mixpar::mem {

// fp16/bf16 mean mixed precision: a 16-bit working copy and 16-bit gradients, FP32 masters.
enum class Precision { kFp32, kFp16, kBf16 };
// AdamW keeps m and v (FP32); SGD with momentum keeps one FP32 buffer.
enum class Optimizer { kAdamW, kSgdMomentum };
// What each transformer layer keeps for backward (Korthikanti et al. 2022, Table 2).
enum class Recompute { kNone, kSelective, kFull };

std::string_view name(Precision p);  // "fp32" | "fp16" | "bf16"
std::string_view name(Optimizer o);  // "adamw" | "sgd"
std::string_view name(Recompute r);  // "none" | "selective" | "full"
// Inverses of name(); an unknown word is an InputError listing the choices.
Precision parse_precision(std::string_view text);
Optimizer parse_optimizer(std::string_view text);
Recompute parse_recompute(std::string_view text);

// Element type of the working copy, its gradients and the activations.
DType working_dtype(Precision p);

// A GPT-2 shape (letters of Korthikanti et al.: s = seq, b = micro_batch, h = n_embd,
// a = n_head, L = n_layer, v = vocab_size). n_positions = 0 means "equal to seq".
struct GptShape {
  std::int64_t n_layer = 0, n_embd = 0, n_head = 0, vocab_size = 0;
  std::int64_t seq = 0, micro_batch = 0, n_positions = 0;
  std::int64_t positions() const { return n_positions > 0 ? n_positions : seq; }
};

// Mixture-of-Experts blocks (chapter 9; the flags train_gpt takes): every moe_every-th block
// (blocks moe_every - 1, 2 moe_every - 1, ...) runs n_experts experts of GPT-2's MLP shape,
// top_k per token, sharded over ep ranks borrowed from dp. capacity_factor 0: no capacity
// limit. n_experts 0: a dense model. The arithmetic is moe_memory.h's.
struct MoeShape {
  std::int64_t n_experts = 0, top_k = 2, moe_every = 1, ep = 1;
  double capacity_factor = 0;
  bool any() const { return n_experts > 0; }
};

// How the job is laid out over devices: dp x tp x pp devices, ZeRO inside each dp group.
struct Layout {
  // ZeRO stage: 0 = plain data parallel, 1 = optimizer state (with the fp32 masters),
  // 2 = + gradients, 3 = + parameters.
  int zero_stage = 0;
  std::int64_t dp = 1, tp = 1, pp = 1;
  bool sequence_parallel = false;  // Megatron SP: norms/dropouts split along the sequence
  Recompute recompute = Recompute::kNone;
  MoeShape moe;  // needs a shape
};

// One training configuration. Give either `params` (model states only) or `shape`.
struct TrainingSetup {
  std::int64_t params = 0;
  std::optional<GptShape> shape;
  Precision precision = Precision::kBf16;
  Optimizer optimizer = Optimizer::kAdamW;
  Layout layout;
  double device_memory_bytes = 80e9;
  // ZeRO-Offload (Ren et al. 2021): the FP32 masters and the optimizer state (this rank's
  // shard of them) billed to host memory; the device keeps the working parameters, gradients
  // and activations, and only those are compared with device_memory_bytes.
  bool offload_optimizer = false;
};

// Unsharded bytes per parameter of each model state: fp32 AdamW 4+4+0+8 = 16,
// mixed AdamW 2+2+4+8 = 16 (ZeRO paper: 2 + 2 + K with K = 12), fp32 SGD 4+4+0+4,
// mixed SGD 2+2+4+4.
struct StateBytesPerParam {
  int parameters = 0, gradients = 0, master_params = 0, optimizer_state = 0;
  int total() const { return parameters + gradients + master_params + optimizer_state; }
};
StateBytesPerParam state_bytes_per_param(Precision p, Optimizer o);

// Model-state bytes held by one device.
struct ModelStates {
  std::int64_t parameters = 0, gradients = 0, master_params = 0, optimizer_state = 0;
  std::int64_t total() const { return parameters + gradients + master_params + optimizer_state; }
};

// Model states of a device whose model slice has `n` parameters, ZeRO-sharded over `dp` ranks.
// With zero_stage 0 and dp 1 this is the single-device bill: n x state_bytes_per_param(p, o).
// A sharded category holds ceil(n / dp) elements per rank (the flat buffer padded to dp
// shards), which is exactly n / dp when dp divides n.
ModelStates model_states(std::int64_t n, Precision p, Optimizer o, int zero_stage = 0,
                         std::int64_t dp = 1);

// GPT-2 parameter count: wte V*C + wpe P*C + L x (12 C^2 + 13 C) + final LayerNorm 2C.
// The LM head is tied to wte (GPT-2), so it adds no parameters.
std::int64_t gpt2_param_count(const GptShape& s);

// Parameters held by one device of pipeline stage `stage` (0-based) with tensor-parallel
// degree tp: matrices, the 3C QKV bias and the 4C MLP bias split by tp, vocabulary rows of
// wte split by tp, LayerNorms, wpe and the two output-projection biases replicated.
// Layers split evenly over pp stages; wte and wpe on stage 0; the final LayerNorm on the
// last stage, which also holds a copy of wte for the tied LM head when pp > 1 (Megatron).
std::int64_t gpt2_stage_param_count(const GptShape& s, std::int64_t tp, std::int64_t pp,
                                    std::int64_t stage);

// Activation bytes one transformer layer keeps for backward, for one micro-batch
// (Korthikanti et al. 2022, Eq. 1, Eq. 2, Eq. 4 and Table 2; see the .cpp).
std::int64_t activation_bytes_per_layer(const GptShape& s, Precision p, std::int64_t tp,
                                        bool sequence_parallel, Recompute r);

// Micro-batches whose activations stage `stage` holds at its peak under 1F1B: pp - stage
// (assumes at least pp micro-batches per step). Without pipelining, one.
std::int64_t micro_batches_in_flight(std::int64_t pp, std::int64_t stage);

// The MoE blocks' part of one device's bill (moe_memory.h says how each term is counted).
struct MoeBill {
  std::int64_t blocks = 0;             // MoE blocks on the billed stage
  std::int64_t experts_per_rank = 0;   // E / ep
  std::int64_t edp = 1;                // dp / ep: the ranks that hold the same experts
  std::int64_t router_params = 0, expert_params = 0;  // on this device, all its MoE blocks
  ModelStates states;                  // of those parameters
  // Rows of one block and micro-batch: T tokens of this rank, the assignments it sends
  // (kept ones: T k without a capacity) and the rows its experts run; the last two are bounds
  // (capacity: E x capacity and ep El x capacity; none: T k and ep T min(k, El)) unless ep is
  // 1 and there is no capacity, where they are exact.
  std::int64_t tokens = 0, rows_sent = 0, rows_run = 0;
  std::int64_t capacity = -1;          // per expert and rank; -1: no limit (worst case billed)
  std::int64_t activations_per_block = 0;  // one micro-batch, FP32
  std::int64_t activations = 0;            // every MoE block's activations in flight
  // One block's all-to-all send and receive buffers (FP32 rows), transient: one block's at a
  // time, counted once in the total. 0 with ep 1 (no dispatch).
  std::int64_t dispatch_send = 0, dispatch_receive = 0;
  std::int64_t dispatch() const { return dispatch_send + dispatch_receive; }
};

// The bill of one device: the pipeline stage with the largest total.
struct MemoryBill {
  std::int64_t model_params = 0;   // P, the whole model
  std::int64_t device_params = 0;  // this device's model slice (before ZeRO sharding)
  std::int64_t stage = 0;          // the pipeline stage billed (the worst one)
  std::int64_t layers_on_stage = 0, micro_batches_in_flight = 0;
  std::int64_t activations_per_layer = 0;  // one micro-batch; 0 without a shape
  ModelStates states;
  std::optional<std::int64_t> activations;  // present only when a shape was given
  // --n-experts: the MoE blocks' part, already inside device_params, states, activations and
  // total_bytes (its dispatch buffers too).
  std::optional<MoeBill> moe;
  // The device's bytes: model states and activations, less host_bytes when offloaded.
  std::int64_t total_bytes = 0;
  // offload_optimizer: the host's share, masters + optimizer state (0 otherwise).
  std::int64_t host_bytes = 0;
  double device_memory_bytes = 0;
  bool fits = false;
};

// Throws InputError naming the first thing wrong with `setup`.
void validate(const TrainingSetup& setup);
// validate(), then the bill of the worst pipeline stage.
MemoryBill compute_bill(const TrainingSetup& setup);
// Notes for the reader: corrections to the source articles (docs/SOURCES.md) that this
// configuration touches, the exact ZeRO saving, and the fp32-activation assumption (empty when
// none apply).
std::vector<std::string> bill_notes(const TrainingSetup& setup, const MemoryBill& bill);

}  // namespace mixpar::mem
