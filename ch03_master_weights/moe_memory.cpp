// The MoE blocks' bill (moe_memory.h): Fedus et al. 2021 (Switch Transformer) for the
// capacity, Rajbhandari et al. 2020 for ZeRO over the expert-data-parallel group. Exact
// integers; an overflow is an InputError.
#include "ch03_master_weights/moe_memory.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "report/format.h"
#include "util/checked_math.h"
#include "util/errors.h"

namespace mixpar::mem {
namespace {

constexpr std::int64_t kFp32 = 4;
const char* const kWhat = "the MoE bill";

std::int64_t mul(std::int64_t a, std::int64_t b) {
  return checked_product(kWhat, {{"", a}, {"", b}});
}
std::int64_t add(std::int64_t a, std::int64_t b) { return checked_sum(kWhat, a, b); }

void add_into(ModelStates& to, const ModelStates& s) {
  to.parameters = add(to.parameters, s.parameters);
  to.gradients = add(to.gradients, s.gradients);
  to.master_params = add(to.master_params, s.master_params);
  to.optimizer_state = add(to.optimizer_state, s.optimizer_state);
}

}  // namespace

void validate_moe(const MoeShape& m, const GptShape& s, const Layout& l) {
  if (!m.any()) {
    if (m.ep != 1) throw InputError("--ep " + num(m.ep) + " shards experts: it needs --n-experts");
    return;
  }
  if (m.n_experts < 0 || m.top_k < 1 || m.moe_every < 1 || m.ep < 1) {
    throw InputError("--n-experts, --top-k, --moe-every and --ep must be positive");
  }
  if (m.top_k > m.n_experts) {
    throw InputError("--top-k " + num(m.top_k) + " is above --n-experts " + num(m.n_experts) +
                     ": a token cannot choose more experts than there are");
  }
  if (m.n_experts % m.ep != 0) {
    throw InputError("--ep " + num(m.ep) + " does not divide --n-experts " + num(m.n_experts));
  }
  if (l.dp % m.ep != 0) {
    throw InputError("--ep " + num(m.ep) + " does not divide --dp " + num(l.dp) +
                     " (expert parallelism borrows its ranks from data parallelism)");
  }
  if (m.moe_every > s.n_layer) {
    throw InputError("--moe-every " + num(m.moe_every) + " with " + num(s.n_layer) +
                     " layers: no block would be an MoE block");
  }
  if (!std::isfinite(m.capacity_factor) || m.capacity_factor < 0) {
    throw InputError("--capacity-factor must be finite and >= 0");
  }
  (void)moe_capacity(m, s.seq * s.micro_batch);  // refuses a capacity under one token
}

std::int64_t moe_blocks_in(std::int64_t first, std::int64_t end, std::int64_t moe_every) {
  if (moe_every < 1 || end <= first) return 0;
  // Multiples of moe_every in (first, end]: layer l is an MoE block when l + 1 is one.
  return end / moe_every - first / moe_every;
}

std::int64_t moe_router_params(std::int64_t n_embd, const MoeShape& m) {
  return mul(n_embd, m.n_experts);
}

std::int64_t moe_expert_params(std::int64_t n_embd, const MoeShape& m) {
  const std::int64_t expert = add(mul(8, mul(n_embd, n_embd)), mul(5, n_embd));
  return mul(m.n_experts / m.ep, expert);
}

ModelStates moe_model_states(std::int64_t n_embd, const MoeShape& m, std::int64_t blocks,
                             Optimizer o, int zero_stage, std::int64_t edp) {
  ModelStates total;
  if (!m.any() || blocks == 0) return total;
  // The router: FP32 whatever the dtype (chapter 9: routing decisions must not flip with the
  // working precision), so no master copy, and never sharded (train_gpt steps it whole).
  const ModelStates router = model_states(moe_router_params(n_embd, m), Precision::kFp32, o);
  // The experts: FP32 too, their own masters in a 16-bit run (train_gpt rounds a working copy
  // of them per use, as ch09's grouped GEMM does); each of this rank's four expert tensors
  // split over edp on its own.
  const std::int64_t C = n_embd, El = m.n_experts / m.ep, H = 4 * n_embd;
  ModelStates experts;
  for (const std::int64_t n : {mul(El, mul(C, H)), mul(El, H), mul(El, mul(H, C)), mul(El, C)}) {
    ModelStates t = model_states(n, Precision::kFp32, o, std::min(zero_stage, 1), edp);
    if (zero_stage >= 3) {
      const ModelStates s3 = model_states(n, Precision::kFp32, o, 3, edp);
      t.parameters = s3.parameters;
      t.gradients = s3.gradients;
    }
    add_into(experts, t);
  }
  for (std::int64_t b = 0; b < blocks; ++b) {
    add_into(total, router);
    add_into(total, experts);
  }
  return total;
}

std::int64_t moe_capacity(const MoeShape& m, std::int64_t tokens) {
  if (m.capacity_factor == 0) return -1;
  // Switch eq. 3, as chapter 9's expert_capacity: ceil(f x tokens x k / E), at least one token.
  const double share = m.capacity_factor * double(tokens) * double(m.top_k) / double(m.n_experts);
  if (share < 1) {
    throw InputError("--capacity-factor " + num(m.capacity_factor) + " gives each expert " +
                     num(share) + " of a rank's " + num(tokens) + " tokens: below one token");
  }
  // An expert takes each token at most once: a capacity of T or more limits nothing (and a
  // huge factor must not overflow the conversion).
  if (share >= double(tokens)) return tokens;
  return static_cast<std::int64_t>(std::ceil(share));
}

std::int64_t moe_activation_bytes(std::int64_t n_embd, const MoeShape& m, std::int64_t tokens,
                                  std::int64_t rows_sent, std::int64_t rows_run, Precision p) {
  const std::int64_t C = n_embd, H = 4 * n_embd;
  std::int64_t values = mul(2, mul(tokens, m.n_experts));         // logits, probabilities
  if (p != Precision::kFp32) values = add(values, mul(tokens, C));  // the input's FP32 copy
  values = add(values, mul(rows_run, add(mul(2, C), mul(2, H))));   // rows in/out, GELU in/out
  if (m.ep > 1) values = add(values, mul(rows_sent, C));            // rows returned home
  return mul(kFp32, values);
}

MoeBill moe_bill(const GptShape& s, const MoeShape& m, std::int64_t blocks, std::int64_t held,
                 Precision p, Optimizer o, const Layout& l) {
  MoeBill b;
  b.blocks = blocks;
  b.experts_per_rank = m.n_experts / m.ep;
  b.edp = l.dp / m.ep;
  b.router_params = mul(blocks, moe_router_params(s.n_embd, m));
  b.expert_params = mul(blocks, moe_expert_params(s.n_embd, m));
  b.states = moe_model_states(s.n_embd, m, blocks, o, l.zero_stage, b.edp);
  b.tokens = mul(s.seq, s.micro_batch);
  b.capacity = moe_capacity(m, b.tokens);
  const std::int64_t El = b.experts_per_rank;
  b.rows_sent = mul(b.tokens, m.top_k);
  b.rows_run = mul(m.ep, mul(b.tokens, std::min(m.top_k, El)));
  if (b.capacity >= 0) {
    b.rows_sent = std::min(b.rows_sent, mul(m.n_experts, b.capacity));
    b.rows_run = std::min(b.rows_run, mul(m.ep, mul(El, b.capacity)));
  }
  if (m.ep == 1) b.rows_run = b.rows_sent;  // no dispatch: the rows stay here
  b.activations_per_block =
      moe_activation_bytes(s.n_embd, m, b.tokens, b.rows_sent, b.rows_run, p);
  b.activations = mul(mul(blocks, held), b.activations_per_block);
  if (m.ep > 1 && blocks > 0) {
    b.dispatch_send = mul(kFp32, mul(b.rows_sent, s.n_embd));
    b.dispatch_receive = mul(kFp32, mul(b.rows_run, s.n_embd));
  }
  return b;
}

}  // namespace mixpar::mem
