// The lesson of chapter 9, as functions the demo prints and the tests call: the router's
// precision, the equalities (one expert = the dense MLP, the grouped GEMM = each expert alone,
// permute then unpermute = the identity, ep 1 = 2 = 4, all-to-all = all-gather), capacity and
// what dropping costs, load balancing, the aux loss's scaling rule, and the failure modes
// (--bug ...), each with the claims it checks.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ch09_expert_parallel/expert_dispatch.h"
#include "ch09_expert_parallel/moe_config.h"
#include "report/claim_table.h"
#include "tensor/tensor.h"
#include "util/json.h"

namespace mixpar::ch09 {

struct Section {
  std::string title, text;
  std::vector<Claim> claims;
  // The figure's data of the sections scripts/figures.py draws (the demo's --json): an object
  // whose members go into the file's top object; null for the other sections.
  Json figure;
};

// Seeded FP32 tokens [T, C] ~ N(0, 1), plus `shared` times one fixed direction in every token
// (hidden states share a mean direction, which is what sends them all to one expert).
Tensor lesson_tokens(std::int64_t T, std::int64_t C, std::uint64_t seed, float shared = 0);

// The layer of the lesson: C 16, H 32, E 4, k 2, seed 5.
MoeConfig lesson_config();

// One step of an MoE layer on `world` local ranks, dp = world, ep borrowed from it: each rank
// its own tokens (seed 100 + rank) and output gradient (seed 200 + rank), forward, backward
// with the aux and z seeds of c's coefficients, the gradient sums, a bias update.
struct EpRunOptions {
  int world = 4;
  int ep = 1;
  std::int64_t tokens = 24;  // per rank
  DispatchKind dispatch = DispatchKind::kAllToAll;
  bool expert_grads_over_dp = false;  // the bug: expert gradients summed over dp, not edp
  bool bias_counts_reduced = true;    // false: the bug of local counts
};
struct EpRun {
  std::vector<std::vector<float>> y, dx;                // by rank
  std::vector<float> router_grad;                       // rank 0's, after the dp sum
  std::map<int, std::vector<float>> expert_grads;       // by global expert (edp rank 0's)
  std::vector<std::vector<float>> bias;                 // by rank, after the update
  std::vector<std::vector<std::int64_t>> kept;          // by rank, [E]
  std::vector<std::size_t> sent, sent_formula;          // by rank: ep bytes, and the formula's
};
EpRun run_expert_parallel(const MoeConfig& c, const EpRunOptions& o);

// The bytes one rank sends over the ep group in one forward and backward with all-gather
// dispatch: ep - 1 of every ring step's blocks, for the routing (expert, kept, gate: 3 T k
// FP32), x and dy gathered, y and dx reduce-scattered (T C FP32 each), and the gates'
// gradients reduce-scattered (T k FP32): 16 (ep - 1) T (C + k). It depends on the shapes
// alone, never on the routing, and grows with ep.
std::size_t all_gather_bytes_formula(std::int64_t tokens, std::int64_t d_model, int top_k, int ep);

// Sections of the demo.
Section router_precision();
Section dense_equality();
Section grouped_gemm_equality();
Section permutation_identity();
Section expert_parallel_equality();
Section capacity_and_dropping();
Section load_balancing();
Section aux_loss_scaling();

// Failure modes.
std::vector<std::string> bug_names();
Section bug_section(const std::string& name);

}  // namespace mixpar::ch09
