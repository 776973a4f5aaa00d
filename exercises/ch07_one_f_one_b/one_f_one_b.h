// Exercise (chapter 7): the 1F1B action list of one pipeline rank: the order in which rank r
// of p stages runs the forward ('F') and backward ('B') of m micro-batches in one step.
//
// What makes a list 1F1B (the tests check it against chapter 7's schedule, the plan
// train_gpt --pp runs):
//   - every micro-batch 0..m-1 has exactly one F and one B on the rank, its F before its B;
//   - in each direction the micro-batches go in order 0, 1, ..., m-1;
//   - memory: at no point does the rank hold more than min(p - r, m) micro-batches in flight
//     (forwards whose backward has not run yet): the last stage holds one, the first p. This
//     bound is what 1F1B buys over all-forward-all-backward, which holds m;
//   - no forward is held back: whenever a forward remains and running it keeps the bound, the
//     next action is that forward (the pipeline fills as early as it can).
// These four rules determine the list. See ch07_pipeline/README.md and docs/REFERENCE.md
// (Pipeline bubbles).
#pragma once

#include <vector>

namespace mixpar::exercises {

struct PipeStep {
  char work = 'F';  // 'F' forward, 'B' backward
  int micro_batch = 0;
  bool operator==(const PipeStep&) const = default;
};

std::vector<PipeStep> one_f_one_b(int rank, int p, int m);

}  // namespace mixpar::exercises
