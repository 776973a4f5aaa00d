// Exercise (chapter 9): which of its assignments an expert keeps when more tokens choose it
// than its capacity allows, as chapter 9's capacity.h does before the tokens are permuted.
// A rank's tokens have made T k choices; choice a = t k + j is token t's j-th, of expert
// expert[a] with router probability prob[a]. Return keep[a] (1 kept, 0 dropped):
//   - capacity < 0 is the no-drop mode: every choice is kept;
//   - otherwise each expert keeps at most `capacity` of the choices made of it, and every choice
//     of an expert within its capacity is kept;
//   - by position (by_probability false): an expert over capacity keeps its earliest choices
//     (lowest a);
//   - by probability: it keeps its most probable choices; equal probabilities go to the lower a.
// A dropped choice adds nothing to its token's output; a token with every choice dropped rides
// the residual. See ch09_expert_parallel/README.md (section 4) and capacity.h.
#pragma once

#include <cstdint>
#include <vector>

namespace mixpar::exercises {

std::vector<char> keep_within_capacity(const std::vector<int>& expert,
                                       const std::vector<float>& prob, int n_experts,
                                       std::int64_t capacity, bool by_probability);

}  // namespace mixpar::exercises
