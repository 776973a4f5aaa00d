// train_gpt's flags for chapter 9's MoE blocks (--n-experts, --top-k, --moe-every,
// --capacity-factor, --drop-policy, --moe-gates, the balancing coefficients, --ep,
// --moe-dispatch): declared, read into TrainerConfig, and checked before any work.
#pragma once

#include <string>

#include "trainer_config.h"
#include "util/cli.h"

namespace mixpar::ch08 {

void add_moe_flags(ArgParser& a);
void read_moe(const ArgParser& a, TrainerConfig& c);
// What the flags alone decide (the layout's rules, ep dividing the experts and dp x cp and the
// dimensions not supported yet, are mesh rules): InputError naming the flag.
void validate_moe(const TrainerConfig& c);
// The log's second model line for an MoE run ("\nmoe: ..."); empty for a dense model.
std::string moe_log_line(const TrainerConfig& c);

}  // namespace mixpar::ch08
