// Exercise (chapter 7): play a pipeline schedule on unit costs and measure its bubble, as
// chapter 7's simulator does for every schedule it prints (the demo's Gantt charts and bubble
// table). Given each rank's list of forwards and backwards (afab, 1f1b or any other order):
//   - costs: a forward takes 1 time unit, a backward 2; sending activations or gradients
//     between neighbours is free and instantaneous;
//   - data: the forward of micro-batch i on rank r > 0 needs the forward of i on rank r - 1 to
//     have finished; the backward of i on rank r < p - 1 needs the backward of i on rank r + 1;
//   - a rank runs its list in order, one action at a time, each as early as both its rank and
//     its data allow (nothing waits longer than it must);
//   - makespan: the time the last action on any rank ends; bubble: the idle share of p ranks x
//     the makespan, 1 - (time spent computing, all ranks) / (p x makespan);
//   - a list that can never finish (a cycle of waits, or a micro-batch whose producer never
//     runs it) is a std::invalid_argument, not a hang.
// For 1F1B the bubble is (p - 1) / (m + p - 1): the formula follows from the play, and the
// tests check it besides comparing with ch07::play (ch07_pipeline/schedule_simulator.h) on
// chapter 7's own schedules. See ch07_pipeline/README.md and docs/REFERENCE.md (Pipeline
// bubbles).
#pragma once

#include <cstdint>
#include <vector>

namespace mixpar::exercises {

struct UnitAction {
  char work = 'F';  // 'F' forward, 'B' backward
  int micro_batch = 0;
};

struct UnitPlay {
  std::int64_t makespan = 0;
  double bubble = 0;
};

// programs[r]: rank r's actions in order (p = programs.size() ranks).
UnitPlay play_unit_costs(const std::vector<std::vector<UnitAction>>& programs);

}  // namespace mixpar::exercises
