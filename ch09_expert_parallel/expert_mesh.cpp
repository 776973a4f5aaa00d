#include "ch09_expert_parallel/expert_mesh.h"

#include <string>

#include "util/errors.h"

namespace mixpar::ch09 {

DeviceMesh expert_mesh(const DeviceMesh& mesh, int ep) {
  const int dpcp = mesh.size({"dp", "cp"});
  if (ep < 1 || dpcp % ep != 0) {
    throw InputError("moe: ep " + std::to_string(ep) + " must divide dp x cp = " +
                     std::to_string(dpcp) + " (ep borrows its ranks from data parallelism)");
  }
  return DeviceMesh({{"pp", mesh.size("pp")},
                     {"edp", dpcp / ep},
                     {"ep", ep},
                     {"tp", mesh.size("tp")}});
}

ExpertGroups split_expert_groups(Communicator& world, const DeviceMesh& mesh, int ep) {
  const DeviceMesh em = expert_mesh(mesh, ep);
  const int r = world.rank();
  ExpertGroups g;
  g.ep = world.split(em.group_index(r, {"ep"}), r);
  g.edp = world.split(em.group_index(r, {"edp"}), r);
  g.dense = world.split(mesh.group_index(r, {"dp", "cp"}), r);
  return g;
}

}  // namespace mixpar::ch09
