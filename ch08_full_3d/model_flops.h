// The model FLOPs a training step multiplies (the numerator of MFU, gemm_peak.h): llm.c's
// 6 N + 6 L C T per token (docs/REFERENCE.md, "FLOPs per token and MFU"), with N the weights
// that take part in a GEMM on the ranks counted (the four projections of each block and the
// tied LM head; wpe, biases and LayerNorms do no multiply-add per weight and are left out) and
// the attention term over the heads those ranks hold. Recomputed forwards are not model FLOPs.
#pragma once

#include <cstdint>
#include <vector>

#include "model/gpt_params.h"
#include "trainer_config.h"
#include "util/json.h"

namespace mixpar::ch08 {

// One rank's FLOPs per token of its replica's batch, from what its registry holds: 6 x the
// held elements of its blocks' GEMM weights and of wte when it runs the LM head (it holds
// ln_f), + 6 x its blocks x (n_embd / tp) x seq.
double rank_flops_per_token(const ParamRegistry& registry, const GptConfig& model,
                            std::int64_t seq, int tp);

// Chapter 9's MoE blocks (--n-experts): such a block runs no dense MLP (its registry tensors
// stay unused), but its router, C E weights, for every token, and one expert of the MLP's
// 8 C^2 weights for every assignment an expert keeps. kept[i]: the kept fraction of MoE block
// i's top-k assignments (1 - dropped_frac of the step's moe statistics); empty: nominal, every
// assignment kept (the count Megatron's MFU uses, capacity drops ignored). So per token and
// MoE block the count changes by 6 (C E + k kept 8 C^2 - 8 C^2); 0 for a dense model.
double moe_flops_delta_per_token(const TrainerConfig& c, const std::vector<double>& kept = {});

// The whole grid's FLOPs per optimizer step: dp replicas, each of B x T x m tokens, each
// replica's ranks together multiplying every GEMM weight once (tp splits each weight, pp the
// blocks): 6 (12 L C^2 + V' C) + 6 L C T per token, V' the vocabulary padded for tp; MoE
// blocks as moe_flops_delta_per_token (kept: the routed count; empty: nominal).
double grid_flops_per_step(const TrainerConfig& c, const std::vector<double>& kept = {});

// What this process's ranks multiply per step: the whole grid when all its ranks are threads
// of this process (or it is one device), else (one rank per MPI process) this rank's share
// (with MoE blocks: its share of their routed FLOPs, the ep group's rows spread evenly over
// its ranks and the replicated layer's over tp).
double process_flops_per_step(const TrainerConfig& c, const ParamRegistry& registry,
                              const std::vector<double>& kept = {});

// The kept fractions of a step's moe statistics (StepStats::moe: 1 - each block's
// dropped_frac); empty when there are none.
std::vector<double> kept_fractions(const Json& moe_stats);

}  // namespace mixpar::ch08
