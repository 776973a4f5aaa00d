// The advisor's answer: every candidate of the search space checked (layout_search.h), billed,
// timed (step_time_model.h) and sorted by predicted step time; what was dropped and why, and
// the smallest memory any valid layout needs (what a model that fits nothing is told).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "layout_search.h"
#include "step_time_model.h"
#include "util/json.h"

namespace mixpar::plan {

struct RankedLayout {
  Candidate layout;
  DeviceMemory memory;
  StepTime time;
  double headroom_bytes = 0;  // device memory - the bill
};

struct Ranking {
  std::vector<RankedLayout> layouts;  // fitting, fastest first
  std::int64_t candidates = 0, refused = 0, too_big = 0;
  // The smallest bill of any valid layout (fitting or not); 0 when none was valid.
  std::int64_t smallest_bytes = 0;
  Candidate smallest_layout;
  std::string first_refusal;  // one rule that refused, for the message when none is valid
};

Ranking rank_layouts(const SearchSpace& space, const GptConfig& model, const Cluster& cluster);

// One sentence: the part of the breakdown (compute, each exposed collective, bubble) where the
// two layouts differ most, with both values.
std::string why_faster(const RankedLayout& best, const RankedLayout& next);

Json to_json(const RankedLayout& r);

}  // namespace mixpar::plan
