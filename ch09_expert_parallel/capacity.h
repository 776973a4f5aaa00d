// Capacity: an expert takes at most `capacity` assignments of a rank's tokens (Switch
// Transformer sec. 2.2: capacity = factor x tokens x k / E), so every expert's buffer has a
// fixed size. The assignments over it are dropped: the token's MoE output lacks that expert's
// term, and a token that loses all its choices passes through on the residual alone (the
// block adds x to the MoE output). Which ones go is the policy (moe_config.h): the lowest
// probabilities, or the latest tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "ch09_expert_parallel/moe_config.h"
#include "ch09_expert_parallel/top_k.h"

namespace mixpar::ch09 {

// keep[a] for every assignment a of r (1: kept). capacity < 0 keeps all.
std::vector<char> apply_capacity(const Routing& r, int n_experts, std::int64_t capacity,
                                 DropPolicy policy);

}  // namespace mixpar::ch09
