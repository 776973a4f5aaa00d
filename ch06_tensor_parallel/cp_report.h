// The chapter demo's second part (ch06_tensor_parallel): context parallelism's tables --
// equality with one device, traffic per algorithm against its formula, attention work per rank
// contiguous vs zigzag, activation memory per rank -- and its failure modes (--bug NAME), each
// added to the demo's claim table.
#pragma once

#include <string>
#include <vector>

#include "report/claim_table.h"

namespace mixpar::ch06 {

// The cp failure modes, in the order the demo shows them.
const std::vector<std::string>& cp_demo_bugs();

void print_context_parallel(int steps, ClaimTable& checks);
void print_cp_bug(const std::string& bug, int steps, ClaimTable& checks);

}  // namespace mixpar::ch06
