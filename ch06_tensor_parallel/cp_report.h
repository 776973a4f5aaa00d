// The chapter demo's second part (ch06_tensor_parallel): context parallelism's tables --
// equality with one device, traffic per algorithm against its formula, attention work per rank
// contiguous vs zigzag, activation memory per rank -- and its failure modes (--bug NAME), each
// added to the demo's claim table.
#pragma once

#include <string>
#include <vector>

#include "report/claim_table.h"
#include "util/json.h"

namespace mixpar::ch06 {

// The cp failure modes, in the order the demo shows them.
const std::vector<std::string>& cp_demo_bugs();

void print_context_parallel(int steps, ClaimTable& checks);
void print_cp_bug(const std::string& bug, int steps, ClaimTable& checks);

// The figure's data (scripts/figures.py, ch06_cp_balance): at cp 4, T 32, the ring's measured
// work per rank under each split and the chunks each rank holds; the bytes each rank sends per
// layer by algorithm at cp 2 and 4.
Json cp_figure_data();

}  // namespace mixpar::ch06
