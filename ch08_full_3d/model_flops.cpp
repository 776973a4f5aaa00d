#include "model_flops.h"

#include <algorithm>

namespace mixpar::ch08 {

double rank_flops_per_token(const ParamRegistry& registry, const GptConfig& model,
                            std::int64_t seq, int tp) {
  const bool head = registry.contains("ln_f.weight");  // the last stage runs the LM head
  double gemm_weights = 0;
  std::int64_t blocks = 0;
  for (const ParamEntry& e : registry.entries()) {
    const bool block_weight = e.name.starts_with("h.") && e.name.ends_with(".weight") &&
                              e.shape.size() == 2;
    if (block_weight || (head && e.name == "wte.weight")) {
      gemm_weights += static_cast<double>(shape_numel(held_shape(e.shape, e.holding)));
    }
    if (e.name.ends_with(".attn.c_attn.weight")) ++blocks;
  }
  const double attention = static_cast<double>(blocks) *
                           static_cast<double>(model.n_embd / std::max(1, tp)) *
                           static_cast<double>(seq);
  return 6.0 * gemm_weights + 6.0 * attention;
}

double grid_flops_per_step(const TrainerConfig& c) {
  const GptConfig& m = c.model;
  const auto C = static_cast<double>(m.n_embd), L = static_cast<double>(m.n_layer);
  const auto V = static_cast<double>(padded_vocab(m.vocab_size, c.tp));
  const double per_token =
      6.0 * (12.0 * L * C * C + V * C) + 6.0 * L * C * static_cast<double>(c.seq);
  return per_token * static_cast<double>(c.tokens_per_step());
}

double process_flops_per_step(const TrainerConfig& c, const ParamRegistry& registry) {
  if (c.backend != CommBackend::kMpi) return grid_flops_per_step(c);
  const double replica_tokens = static_cast<double>(c.batch) * static_cast<double>(c.seq) *
                                static_cast<double>(c.grad_accum);
  // Context parallel: a rank runs T / cp of each sequence's rows (its attention over the whole
  // sequence: the zigzag split gives every rank the same share of the causal work).
  return rank_flops_per_token(registry, c.model, c.seq, c.tp) * replica_tokens /
         static_cast<double>(c.cp);
}

}  // namespace mixpar::ch08
