#include "ch07_pipeline_makespan/pipeline_makespan.h"

namespace mixpar::exercises {

UnitPlay play_unit_costs(const std::vector<std::vector<UnitAction>>& programs) {
  // Write this: give every action its start and end time by the rules of the header.
  (void)programs;
  return {};
}

}  // namespace mixpar::exercises
