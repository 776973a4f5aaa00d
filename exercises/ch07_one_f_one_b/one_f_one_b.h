// Exercise (chapter 7): the 1F1B action list of one pipeline rank. With p stages and m
// micro-batches, rank r first runs min(p - r - 1, m) warm-up forwards, then alternates one
// forward and one backward while forwards remain, then runs the remaining backwards
// (cool-down). Micro-batches go in order 0, 1, ..., m-1 in both directions. See
// ch07_pipeline/README.md and docs/REFERENCE.md (Pipeline bubbles).
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
