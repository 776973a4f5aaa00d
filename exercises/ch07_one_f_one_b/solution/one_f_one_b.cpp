#include "ch07_one_f_one_b/one_f_one_b.h"

#include <algorithm>

namespace mixpar::exercises {

std::vector<PipeStep> one_f_one_b(int rank, int p, int m) {
  std::vector<PipeStep> steps;
  const int warmup = std::min(p - rank - 1, m);
  int f = 0, b = 0;
  for (; f < warmup; ++f) steps.push_back({'F', f});
  while (f < m) {
    steps.push_back({'F', f++});
    steps.push_back({'B', b++});
  }
  while (b < m) steps.push_back({'B', b++});
  return steps;
}

}  // namespace mixpar::exercises
