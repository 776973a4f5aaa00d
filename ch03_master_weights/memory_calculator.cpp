// The memory calculator's formulas. Model states follow the ZeRO paper (Rajbhandari et al.
// 2020, section 3 and Figure 1); activations follow Korthikanti et al. 2022, "Reducing
// Activation Recomputation in Large Transformer Models" (arXiv:2205.05198), section 4.
// All byte counts are exact integers; anything that would overflow 64 bits is an InputError.
#include "ch03_master_weights/memory_calculator.h"

#include <algorithm>

#include "ch03_master_weights/moe_memory.h"
#include "report/format.h"
#include "util/errors.h"

namespace mixpar::mem {

namespace {

std::int64_t mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw InputError("configuration too large: byte counts overflow 64 bits");
  }
  return r;
}

std::int64_t add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    throw InputError("configuration too large: byte counts overflow 64 bits");
  }
  return r;
}

std::int64_t ceil_div(std::int64_t n, std::int64_t d) { return n / d + (n % d != 0 ? 1 : 0); }

void require_positive(const char* what, std::int64_t v) {
  if (v <= 0) throw InputError(std::string(what) + " must be positive, got " + num(v));
}

}  // namespace

std::string_view name(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kFp16: return "fp16";
    case Precision::kBf16: return "bf16";
  }
  return "?";
}

std::string_view name(Optimizer o) { return o == Optimizer::kAdamW ? "adamw" : "sgd"; }

std::string_view name(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}

Precision parse_precision(std::string_view t) {
  if (t == "fp32") return Precision::kFp32;
  if (t == "fp16") return Precision::kFp16;
  if (t == "bf16") return Precision::kBf16;
  throw InputError("precision '" + std::string(t) + "' is not one of fp32|fp16|bf16");
}

Optimizer parse_optimizer(std::string_view t) {
  if (t == "adamw" || t == "adam") return Optimizer::kAdamW;
  if (t == "sgd") return Optimizer::kSgdMomentum;
  throw InputError("optimizer '" + std::string(t) + "' is not one of adamw|sgd");
}

Recompute parse_recompute(std::string_view t) {
  if (t == "none") return Recompute::kNone;
  if (t == "selective") return Recompute::kSelective;
  if (t == "full") return Recompute::kFull;
  throw InputError("recompute '" + std::string(t) + "' is not one of none|selective|full");
}

DType working_dtype(Precision p) {
  switch (p) {
    case Precision::kFp32: return DType::kF32;
    case Precision::kFp16: return DType::kF16;
    case Precision::kBf16: return DType::kBF16;
  }
  return DType::kF32;
}

// Pure fp32 needs no master copy: the working weights are already fp32. Mixed precision
// keeps a 16-bit working copy and 16-bit gradients plus fp32 masters; the optimizer state
// is fp32 in both (AdamW: m and v, 4 + 4; SGD: one momentum buffer, 4).
StateBytesPerParam state_bytes_per_param(Precision p, Optimizer o) {
  const int w = static_cast<int>(dtype_size(working_dtype(p)));
  const int fp32 = static_cast<int>(dtype_size(DType::kF32));
  StateBytesPerParam b;
  b.parameters = w;
  b.gradients = w;
  b.master_params = p == Precision::kFp32 ? 0 : fp32;
  b.optimizer_state = o == Optimizer::kAdamW ? 2 * fp32 : fp32;
  return b;
}

// ZeRO (Rajbhandari et al. 2020, Figure 1): stage 1 partitions the optimizer state, which
// includes the fp32 master copy (the paper's K = 12 for mixed AdamW = master 4 + m 4 + v 4);
// stage 2 also the gradients; stage 3 also the parameters. For mixed AdamW with N = dp:
// (2 + 2 + 12/N) P, (2 + 14/N) P and 16P/N per rank.
ModelStates model_states(std::int64_t n, Precision p, Optimizer o, int zero_stage,
                         std::int64_t dp) {
  if (n < 0) throw InputError("parameter count must not be negative, got " + num(n));
  require_positive("dp", dp);
  if (zero_stage < 0 || zero_stage > 3) {
    throw InputError("zero stage must be 0, 1, 2 or 3, got " + std::to_string(zero_stage));
  }
  const StateBytesPerParam b = state_bytes_per_param(p, o);
  const std::int64_t shard = ceil_div(n, dp);
  ModelStates s;
  s.master_params = mul(zero_stage >= 1 ? shard : n, b.master_params);
  s.optimizer_state = mul(zero_stage >= 1 ? shard : n, b.optimizer_state);
  s.gradients = mul(zero_stage >= 2 ? shard : n, b.gradients);
  s.parameters = mul(zero_stage >= 3 ? shard : n, b.parameters);
  add(add(add(s.parameters, s.gradients), s.master_params), s.optimizer_state);  // total() fits
  return s;
}

namespace {

// One GPT-2 block on one tensor-parallel rank. Unsplit: ln_1 2C + c_attn (3C^2 + 3C) +
// attn c_proj (C^2 + C) + ln_2 2C + c_fc (4C^2 + 4C) + mlp c_proj (4C^2 + C) = 12C^2 + 13C.
// Megatron splits the column-parallel c_attn and c_fc (weights and biases) and the
// row-parallel c_proj weights by t; the LayerNorms and the row-parallel biases (added after
// the all-reduce) stay whole on every rank: 12C^2/t + 7C/t + 6C.
std::int64_t block_params(std::int64_t c, std::int64_t tp) {
  return add(add(mul(12, mul(c, c / tp)), mul(7, c / tp)), mul(6, c));
}

std::int64_t wte_params(const GptShape& s, std::int64_t tp) {
  return mul(s.vocab_size / tp, s.n_embd);  // vocab-parallel rows
}

}  // namespace

std::int64_t gpt2_param_count(const GptShape& s) {
  std::int64_t p = add(wte_params(s, 1), mul(s.positions(), s.n_embd));  // wte + wpe
  p = add(p, mul(s.n_layer, block_params(s.n_embd, 1)));
  return add(p, mul(2, s.n_embd));  // final LayerNorm; the LM head is tied to wte
}

std::int64_t gpt2_stage_param_count(const GptShape& s, std::int64_t tp, std::int64_t pp,
                                    std::int64_t stage) {
  std::int64_t p = mul(s.n_layer / pp, block_params(s.n_embd, tp));
  if (stage == 0) p = add(p, add(wte_params(s, tp), mul(s.positions(), s.n_embd)));
  if (stage == pp - 1) {
    p = add(p, mul(2, s.n_embd));
    // The tied LM head needs wte on the last stage too: Megatron keeps a copy there and
    // all-reduces the two copies' gradients, so it is billed like any parameter.
    if (pp > 1) p = add(p, wte_params(s, tp));
  }
  return p;
}

// Korthikanti et al. 2022, section 4.1, counts one layer's stored activations with 16-bit
// values and 1-byte dropout masks. In units of sbh: attention block 11 (QKV input 2, Q and K
// 4, V 2, output-projection input 2, dropout mask 1) plus 5as/h (softmax output 2, its
// dropout mask 1, dropout output 2); MLP block 19 (input 2, GeLU input 8, GeLU output 8,
// mask 1); two LayerNorm inputs 4. Total Eq. 1: sbh(34 + 5as/h).
// We keep the paper's split with e = bytes per activation value (2, or 4 for fp32) so fp32
// is exact, not "times two": masks stay 1 byte. The terms regroup as
//   replicated under TP  (4e + 2) sbh  = 10 sbh    (LayerNorm inputs, block inputs, masks)
//   split by TP          12e sbh / t   = 24 sbh/t  (inside the column/row-parallel pairs)
//   attention scores     (2e + 1) a s^2 b / t = 5as^2b/t
// which is Eq. 2, sbh(10 + 24/t + 5as/(ht)) at e = 2. Sequence parallelism splits the
// replicated part too: Eq. 4, (sbh/t)(34 + 5as/h). Selective recompute drops the attention
// scores: Table 2, sbh(10 + 24/t), and with SP sbh(34/t) (Eq. 6). Full recompute keeps only
// the layer input: Table 2, sbh(2); under SP that input is the [s/t, b, h] shard.
// Transient memory while a layer is being recomputed is not counted (as in the paper).
std::int64_t activation_bytes_per_layer(const GptShape& s, Precision p, std::int64_t tp,
                                        bool sequence_parallel, Recompute r) {
  const std::int64_t e = static_cast<std::int64_t>(dtype_size(working_dtype(p)));
  const std::int64_t sbh = mul(mul(s.seq, s.micro_batch), s.n_embd);
  const std::int64_t sbh_t = mul(mul(s.seq, s.micro_batch), s.n_embd / tp);
  const std::int64_t scores_t =
      mul(mul(2 * e + 1, s.n_head / tp), mul(mul(s.seq, s.seq), s.micro_batch));
  const bool sp = sequence_parallel;
  if (r == Recompute::kFull) return mul(e, sp ? sbh_t : sbh);
  const std::int64_t replicated = mul(4 * e + 2, sp ? sbh_t : sbh);
  const std::int64_t split = mul(12 * e, sbh_t);
  const std::int64_t linear = add(replicated, split);
  return r == Recompute::kSelective ? linear : add(linear, scores_t);
}

// 1F1B (Narayanan et al. 2021): stage i runs p - i warm-up forwards before its first
// backward, so it holds p - i micro-batches' activations; stage 0 holds p, which over its
// L/p layers is L layers' worth (Korthikanti et al., Eq. 5). Assumes >= p micro-batches.
std::int64_t micro_batches_in_flight(std::int64_t pp, std::int64_t stage) { return pp - stage; }

namespace {

void validate_shape(const GptShape& s, const Layout& l) {
  require_positive("n_layer", s.n_layer);
  require_positive("n_embd", s.n_embd);
  require_positive("n_head", s.n_head);
  require_positive("vocab_size", s.vocab_size);
  require_positive("seq", s.seq);
  require_positive("micro_batch", s.micro_batch);
  if (s.n_positions < 0) {
    throw InputError("n_positions must be positive, got " + num(s.n_positions));
  }
  if (s.n_embd % s.n_head != 0) {
    throw InputError("n_head " + num(s.n_head) + " does not divide n_embd " + num(s.n_embd));
  }
  if (s.seq > s.positions()) {
    throw InputError("seq " + num(s.seq) + " is longer than the position table (n_positions " +
                     num(s.positions()) + ")");
  }
  if (s.n_head % l.tp != 0) {
    throw InputError("tp " + num(l.tp) + " does not divide n_head " + num(s.n_head));
  }
  if (s.vocab_size % l.tp != 0) {
    throw InputError("tp " + num(l.tp) + " does not divide vocab_size " + num(s.vocab_size) +
                     " (pad the vocabulary to a multiple of tp, e.g. GPT-2's 50257 -> 50304)");
  }
  if (s.n_layer % l.pp != 0) {
    throw InputError("pp " + num(l.pp) + " does not divide n_layer " + num(s.n_layer));
  }
  if (l.sequence_parallel && l.tp == 1) {
    // Megatron's sequence parallelism splits the LayerNorm and dropout regions over the tp
    // ranks: with one there is nothing to split, and the bill would not be of a real layout.
    throw InputError("sequence parallel splits the LayerNorm regions over the tp ranks: it needs "
                     "tp > 1");
  }
  if (l.sequence_parallel && s.seq % l.tp != 0) {
    throw InputError("sequence parallel needs tp " + num(l.tp) + " to divide seq " + num(s.seq));
  }
}

}  // namespace

void validate(const TrainingSetup& setup) {
  const Layout& l = setup.layout;
  if (l.zero_stage < 0 || l.zero_stage > 3) {
    throw InputError("zero stage must be 0, 1, 2 or 3, got " + std::to_string(l.zero_stage));
  }
  require_positive("dp", l.dp);
  require_positive("tp", l.tp);
  require_positive("pp", l.pp);
  if (!(setup.device_memory_bytes > 0)) throw InputError("device memory must be positive");
  if (setup.shape) {
    if (setup.params != 0) throw InputError("give either a parameter count or a shape, not both");
    validate_shape(*setup.shape, l);
    validate_moe(l.moe, *setup.shape, l);
    return;
  }
  if (l.moe.any() || l.moe.ep != 1) {
    throw InputError("MoE blocks (--n-experts, --ep) need a GPT shape (--n-layer --n-embd ...), "
                     "not --params");
  }
  if (setup.params == 0) throw InputError("give a parameter count or a GPT shape");
  require_positive("parameter count", setup.params);
  if (setup.params < mul(l.tp, l.pp)) {
    throw InputError("tp x pp = " + num(mul(l.tp, l.pp)) + " devices for " + num(setup.params) +
                     " parameters: some devices would hold none");
  }
}

namespace {

MemoryBill stage_bill(const TrainingSetup& setup, std::int64_t stage) {
  const Layout& l = setup.layout;
  MemoryBill b;
  b.stage = stage;
  b.device_memory_bytes = setup.device_memory_bytes;
  if (setup.shape) {
    const GptShape& s = *setup.shape;
    b.model_params = gpt2_param_count(s);
    b.device_params = gpt2_stage_param_count(s, l.tp, l.pp, stage);
    b.layers_on_stage = s.n_layer / l.pp;
    b.micro_batches_in_flight = micro_batches_in_flight(l.pp, stage);
    b.activations_per_layer =
        activation_bytes_per_layer(s, setup.precision, l.tp, l.sequence_parallel, l.recompute);
    b.activations = mul(mul(b.layers_on_stage, b.micro_batches_in_flight), b.activations_per_layer);
    if (l.moe.any()) {
      const std::int64_t first = stage * b.layers_on_stage;
      b.moe = moe_bill(s, l.moe, moe_blocks_in(first, first + b.layers_on_stage, l.moe.moe_every),
                       b.micro_batches_in_flight, setup.precision, setup.optimizer, l);
    }
  } else {
    // Simplifying assumption without a shape: tp x pp split the model evenly.
    b.model_params = setup.params;
    b.device_params = ceil_div(setup.params, mul(l.tp, l.pp));
  }
  b.states = model_states(b.device_params, setup.precision, setup.optimizer, l.zero_stage, l.dp);
  if (b.moe) {
    // The MoE blocks' tensors live beside the dense ones (which keep their own MLP tensors):
    // their parameters, states and activations join this device's, and one block's dispatch
    // buffers the total.
    const MoeBill& m = *b.moe;
    b.device_params = add(b.device_params, add(m.router_params, m.expert_params));
    b.states.parameters = add(b.states.parameters, m.states.parameters);
    b.states.gradients = add(b.states.gradients, m.states.gradients);
    b.states.master_params = add(b.states.master_params, m.states.master_params);
    b.states.optimizer_state = add(b.states.optimizer_state, m.states.optimizer_state);
    b.activations = add(*b.activations, m.activations);
    // The whole model: every MoE block's router and all its E = ep x El experts.
    const std::int64_t C = setup.shape->n_embd;
    const std::int64_t block =
        add(moe_router_params(C, l.moe), mul(l.moe.ep, moe_expert_params(C, l.moe)));
    b.model_params =
        add(b.model_params, mul(moe_blocks_in(0, setup.shape->n_layer, l.moe.moe_every), block));
  }
  b.total_bytes = add(b.states.total(), b.activations.value_or(0));
  if (b.moe) b.total_bytes = add(b.total_bytes, b.moe->dispatch());
  if (setup.offload_optimizer) {
    // ZeRO-Offload: the device keeps (2 + 2) P (divided by the ZeRO stage as before), the
    // host the K P / N_d of masters and moments (K = 12 for mixed AdamW).
    b.host_bytes = add(b.states.master_params, b.states.optimizer_state);
    b.total_bytes -= b.host_bytes;
  }
  b.fits = static_cast<double>(b.total_bytes) <= setup.device_memory_bytes;
  return b;
}

}  // namespace

MemoryBill compute_bill(const TrainingSetup& setup) {
  validate(setup);
  MemoryBill worst = stage_bill(setup, 0);
  for (std::int64_t stage = 1; stage < setup.layout.pp; ++stage) {
    MemoryBill b = stage_bill(setup, stage);
    if (b.total_bytes > worst.total_bytes) worst = b;
  }
  return worst;
}

namespace {

// The exact ZeRO saving against stage 0, next to the paper's asymptotic 4x / 8x / N.
std::string zero_saving_note(const TrainingSetup& setup, const MemoryBill& bill) {
  const Layout& l = setup.layout;
  // The dense part's (the MoE blocks' states shard over edp, by their own rule).
  std::int64_t params = bill.device_params, states = bill.states.total();
  if (bill.moe) {
    params -= bill.moe->router_params + bill.moe->expert_params;
    states -= bill.moe->states.total();
  }
  const ModelStates base = model_states(params, setup.precision, setup.optimizer);
  const double ratio = static_cast<double>(base.total()) / static_cast<double>(states);
  std::string note = "ZeRO-" + std::to_string(l.zero_stage) + " over dp " + num(l.dp) +
                     " cuts " + (bill.moe ? "the dense model states " : "model states ") +
                     fmt("%.3g", ratio) + "x exactly";
  const bool mixed_adam =
      setup.precision != Precision::kFp32 && setup.optimizer == Optimizer::kAdamW;
  if (mixed_adam && l.zero_stage <= 2) {
    note += std::string(l.zero_stage == 1 ? ": (2+2+12/N)P" : ": (2+14/N)P") + "; the \"" +
            (l.zero_stage == 1 ? "4x" : "8x") +
            "\" of articles B and C is the ZeRO paper's limit as N grows, not the saving at N = " +
            num(l.dp);
  } else if (mixed_adam) {
    note += ": 16P/N";
  }
  return note;
}

}  // namespace

std::vector<std::string> bill_notes(const TrainingSetup& setup, const MemoryBill& bill) {
  std::vector<std::string> notes;
  const Layout& l = setup.layout;
  const bool mixed_adam =
      setup.precision != Precision::kFp32 && setup.optimizer == Optimizer::kAdamW;
  const bool seven_b = bill.model_params == 7'000'000'000;
  if (seven_b && mixed_adam) {
    notes.push_back(
        "article A puts 7B mixed-precision Adam at 98 GB because it counts \"7 GB for FP16 "
        "weights\"; 7e9 x 2 B = 14 GB (and 14 GB of 16-bit gradients): 2+2+4+4+4 = 16 B/param "
        "= 112 GB, as article B says");
  }
  if (seven_b && mixed_adam && l.zero_stage == 1 && l.dp == 8 && l.tp == 1 && l.pp == 1) {
    notes.push_back(
        "article A's ZeRO-1 example says 25 GB/GPU on 8 GPUs; with 14 GB of 16-bit weights it is "
        "14 + 14 + 84/8 = 38.5 GB");
  }
  if (l.zero_stage > 0 && l.dp > 1) notes.push_back(zero_saving_note(setup, bill));
  if (bill.moe) {
    notes.push_back(
        "MoE blocks: their own dense MLP tensors and buffers stay billed (train_gpt's GPT-2 "
        "registry keeps them, unused); the router and its states are FP32 and whole on every "
        "rank; ZeRO-1/2 shard the experts' masters and moments over edp, not their gradients");
  }
  if (setup.shape && setup.precision == Precision::kFp32) {
    notes.push_back(
        "fp32 activations: Korthikanti et al. count 2-byte values and 1-byte dropout masks; "
        "here values are 4 bytes and masks stay 1 byte (sbh(66 + 9as/h) per layer, not 2x34)");
  }
  return notes;
}

}  // namespace mixpar::mem
