// Where the experts live: expert parallelism (ep) borrows its ranks from data parallelism, as
// Megatron-LM and torchtitan do (docs/SOURCES.md). The ranks of one dp x cp group (those
// holding the same model shard, different tokens) are re-split as edp x ep: an ep group's
// ranks hold different experts and exchange tokens; an edp (expert-data-parallel) group's
// ranks hold the same experts and sum their gradients. The expert mesh is the same world as
// the standard one (common/comm/device_mesh.h), [pp, edp, ep, tp], with the dp x cp
// coordinate d cp + c read as e ep + x; rank numbers do not change.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/device_mesh.h"

namespace mixpar::ch09 {

// InputError unless ep >= 1 divides dp x cp of `mesh`.
DeviceMesh expert_mesh(const DeviceMesh& mesh, int ep);

struct ExpertGroups {
  std::unique_ptr<Communicator> ep;     // exchanges tokens (all-to-all or all-gather)
  std::unique_ptr<Communicator> edp;    // sums expert gradients
  std::unique_ptr<Communicator> dense;  // dp x cp: sums the router's (and every dense) gradient
};
// The three groups of this rank, split from `world` (collective over it).
ExpertGroups split_expert_groups(Communicator& world, const DeviceMesh& mesh, int ep);

}  // namespace mixpar::ch09
