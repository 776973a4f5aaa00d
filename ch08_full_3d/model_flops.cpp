#include "model_flops.h"

#include <algorithm>
#include <string>

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

namespace {

bool is_moe_block(const TrainerConfig& c, std::int64_t layer) {
  return c.uses_moe() && (layer + 1) % c.moe_every == 0;  // moe_blocks.h's rule
}

}  // namespace

double moe_flops_delta_per_token(const TrainerConfig& c, const std::vector<double>& kept) {
  if (!c.uses_moe()) return 0;
  const auto C = static_cast<double>(c.model.n_embd);
  const auto E = static_cast<double>(c.moe.n_experts), k = static_cast<double>(c.moe.top_k);
  double delta = 0;
  std::size_t i = 0;
  for (std::int64_t l = 0; l < c.model.n_layer; ++l) {
    if (!is_moe_block(c, l)) continue;
    const double f = i < kept.size() ? kept[i] : 1.0;
    ++i;
    delta += 6.0 * (C * E + k * f * 8.0 * C * C - 8.0 * C * C);
  }
  return delta;
}

double grid_flops_per_step(const TrainerConfig& c, const std::vector<double>& kept) {
  const GptConfig& m = c.model;
  const auto C = static_cast<double>(m.n_embd), L = static_cast<double>(m.n_layer);
  const auto V = static_cast<double>(padded_vocab(m.vocab_size, c.tp));
  const double per_token = 6.0 * (12.0 * L * C * C + V * C) +
                           6.0 * L * C * static_cast<double>(c.seq) +
                           moe_flops_delta_per_token(c, kept);
  return per_token * static_cast<double>(c.tokens_per_step());
}

double process_flops_per_step(const TrainerConfig& c, const ParamRegistry& registry,
                              const std::vector<double>& kept) {
  if (c.backend != CommBackend::kMpi) return grid_flops_per_step(c, kept);
  const double replica_tokens = static_cast<double>(c.batch) * static_cast<double>(c.seq) *
                                static_cast<double>(c.grad_accum);
  double per_token = rank_flops_per_token(registry, c.model, c.seq, c.tp);
  if (c.uses_moe()) {
    // This rank's MoE blocks: their unused MLP tensors out, their routed work in, shared by
    // the tp ranks that run the same layer (one model's FLOPs between them). The ep group's
    // rows over its ranks average a replica's tokens x k each, as on one device.
    const auto C = static_cast<double>(c.model.n_embd);
    const auto E = static_cast<double>(c.moe.n_experts), k = static_cast<double>(c.moe.top_k);
    std::size_t i = 0;
    for (std::int64_t l = 0; l < c.model.n_layer; ++l) {
      if (!is_moe_block(c, l)) continue;
      const double f = i < kept.size() ? kept[i] : 1.0;
      ++i;
      const std::string h = "h." + std::to_string(l) + ".mlp.";
      if (!registry.contains(h + "c_fc.weight")) continue;  // another pipeline stage's
      for (const char* w : {"c_fc.weight", "c_proj.weight"}) {
        const ParamEntry& e = registry.at(h + w);
        per_token -= 6.0 * static_cast<double>(shape_numel(held_shape(e.shape, e.holding)));
      }
      per_token += 6.0 * (C * E + k * f * 8.0 * C * C) / static_cast<double>(c.tp);
    }
  }
  // Context parallel: a rank runs T / cp of each sequence's rows (its attention over the whole
  // sequence: the zigzag split gives every rank the same share of the causal work).
  return per_token * replica_tokens / static_cast<double>(c.cp);
}

std::vector<double> kept_fractions(const Json& moe_stats) {
  std::vector<double> out;
  if (!moe_stats.is_object() || !moe_stats.contains("blocks")) return out;
  const Json& blocks = moe_stats.at("blocks");
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    out.push_back(1.0 - blocks.at(i).at("dropped_frac").as_double());
  }
  return out;
}

}  // namespace mixpar::ch08
