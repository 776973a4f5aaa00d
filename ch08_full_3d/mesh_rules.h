// The rank mesh of a training run (common/comm/device_mesh.h) and the rules between its
// dimensions and the model: every layout is checked here once, by one table, and each
// refusal is an InputError that names its rule ("mesh rule tp-heads: --tp 3 does not divide
// n_head = 2: ...").
//
// A mesh rule relates degrees to each other or to the model's shape (tp divides the heads,
// cp the sequence, pp x virtual stages the blocks, pipelines and ZeRO stages over dp, ...).
// What a flag alone decides (a schedule's micro-batch count, --bucket-mb's range, zb-h1 with
// --recompute) stays a flag check of trainer_config.cpp.
#pragma once

#include <string>
#include <vector>

#include "comm/device_mesh.h"
#include "trainer_config.h"

namespace mixpar::ch08 {

// The run's dimensions, outermost first: Megatron's [pp, dp, cp, tp] from --pp --dp --cp --tp,
// with c.extra_dims placed where they say. Any degree, a bad one included.
std::vector<MeshDim> mesh_dims(const TrainerConfig& c);
// The run's mesh; c must have passed validate() (else std::invalid_argument for a bad degree).
DeviceMesh mesh_of(const TrainerConfig& c);

struct MeshRule {
  const char* name;  // as the refusal names it: "mesh rule <name>: ..."
  // The refusal's text without the prefix when c breaks the rule, "" when it keeps it.
  std::string (*refusal)(const TrainerConfig& c);
};
// Every rule, in the order they are checked (the product of the degrees first).
const std::vector<MeshRule>& mesh_rules();
// InputError "mesh rule <name>: <refusal>" for the first rule c breaks.
void check_mesh_rules(const TrainerConfig& c);

}  // namespace mixpar::ch08
