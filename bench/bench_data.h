// Training data for the trainer benchmarks: n pseudo-random token ids below `vocab` (Philox,
// fixed seed), so a step's cost does not depend on a data file and runs repeat exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ch08_full_3d/training_data.h"
#include "random/philox.h"

namespace mixpar::bench {

inline ch08::TrainingData random_tokens(std::int64_t n, std::int64_t vocab) {
  Philox g(42);
  std::vector<std::uint16_t> t(static_cast<std::size_t>(n));
  for (auto& x : t)
    x = static_cast<std::uint16_t>(g.next_u32() % static_cast<std::uint32_t>(vocab));
  ch08::TrainingData d;
  d.description = "random tokens";
  d.tokens = std::make_shared<const std::vector<std::uint16_t>>(std::move(t));
  return d;
}

}  // namespace mixpar::bench
