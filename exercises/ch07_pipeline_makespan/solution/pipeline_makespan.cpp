#include "ch07_pipeline_makespan/pipeline_makespan.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

namespace mixpar::exercises {

UnitPlay play_unit_costs(const std::vector<std::vector<UnitAction>>& programs) {
  const auto p = static_cast<int>(programs.size());
  // When each (rank, work, micro-batch) ended: what a neighbour's action waits for.
  std::map<std::pair<int, std::pair<char, int>>, std::int64_t> done;
  std::vector<std::size_t> next(programs.size(), 0);
  std::vector<std::int64_t> free_at(programs.size(), 0);
  std::int64_t busy = 0, makespan = 0;
  // Sweep the ranks, running every action whose data is there, until all have run; a sweep
  // that runs nothing while actions remain is a deadlock. Times do not depend on the order of
  // the sweep: each action starts at max(its rank free, its data ready).
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const auto& prog = programs[static_cast<std::size_t>(r)];
      auto& i = next[static_cast<std::size_t>(r)];
      while (i < prog.size()) {
        const UnitAction a = prog[i];
        std::int64_t ready = free_at[static_cast<std::size_t>(r)];
        const int from = a.work == 'F' ? r - 1 : r + 1;
        if (from >= 0 && from < p) {
          const auto dep = done.find({from, {a.work, a.micro_batch}});
          if (dep == done.end()) break;  // its data is not there yet
          ready = std::max(ready, dep->second);
        }
        const std::int64_t cost = a.work == 'F' ? 1 : 2;
        const std::int64_t end = ready + cost;
        done[{r, {a.work, a.micro_batch}}] = end;
        free_at[static_cast<std::size_t>(r)] = end;
        busy += cost;
        makespan = std::max(makespan, end);
        ++i;
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r) {
    if (next[static_cast<std::size_t>(r)] < programs[static_cast<std::size_t>(r)].size()) {
      throw std::invalid_argument("play_unit_costs: rank " + std::to_string(r) +
                                  " waits forever (a cycle of waits)");
    }
  }
  UnitPlay out;
  out.makespan = makespan;
  out.bubble = makespan == 0 ? 0.0
                             : 1.0 - static_cast<double>(busy) /
                                         (static_cast<double>(p) * static_cast<double>(makespan));
  return out;
}

}  // namespace mixpar::exercises
