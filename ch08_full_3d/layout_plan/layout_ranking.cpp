#include "layout_ranking.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

namespace mixpar::plan {

Ranking rank_layouts(const SearchSpace& space, const GptConfig& model, const Cluster& cluster) {
  Ranking out;
  BubbleCache bubbles;
  std::int64_t smallest = std::numeric_limits<std::int64_t>::max();
  for (const Candidate& c : all_candidates(space, cluster)) {
    ++out.candidates;
    const std::string why = refusal(c, model, space.seq, cluster);
    if (!why.empty()) {
      ++out.refused;
      if (out.first_refusal.empty()) out.first_refusal = why;
      continue;
    }
    RankedLayout r{.layout = c, .memory = device_memory(c, model, space.seq, cluster), .time = {}};
    if (r.memory.total() < smallest) {
      smallest = r.memory.total();
      out.smallest_layout = c;
    }
    r.headroom_bytes = cluster.memory_bytes - static_cast<double>(r.memory.total());
    if (r.headroom_bytes < 0) {
      ++out.too_big;
      continue;
    }
    r.time = predict_step_time(c, model, space.seq, cluster, bubbles);
    out.layouts.push_back(std::move(r));
  }
  out.smallest_bytes = smallest == std::numeric_limits<std::int64_t>::max() ? 0 : smallest;
  // Fastest first; ties (bf16 and fp16 cost the same) keep the search order.
  std::stable_sort(out.layouts.begin(), out.layouts.end(),
                   [](const RankedLayout& a, const RankedLayout& b) {
                     return a.time.total() < b.time.total();
                   });
  return out;
}

std::string why_faster(const RankedLayout& best, const RankedLayout& next) {
  const std::pair<const char*, double> parts[] = {
      {"compute", next.time.compute - best.time.compute},
      {"tp communication", next.time.tp - best.time.tp},
      {"cp communication", next.time.cp - best.time.cp},
      {"dp communication", next.time.dp - best.time.dp},
      {"pp communication", next.time.pp - best.time.pp},
      {"embedding all-reduce", next.time.embedding - best.time.embedding},
      {"bubble", next.time.bubble - best.time.bubble},
      {"optimizer step", next.time.optimizer - best.time.optimizer}};
  const auto* most = std::max_element(std::begin(parts), std::end(parts),
                                      [](const auto& a, const auto& b) {
                                        return std::fabs(a.second) < std::fabs(b.second);
                                      });
  char buf[512];
  const double gap = next.time.total() - best.time.total();
  if (gap <= 0) {
    std::snprintf(buf, sizeof buf,
                  "#1 and #2 tie at %.4g s (the same breakdown: they differ only in what the "
                  "time model does not see, e.g. bf16 vs fp16)", best.time.total());
    return buf;
  }
  // The part's value in each layout.
  const auto value = [&](const RankedLayout& r) {
    const std::string n = most->first;
    if (n == "compute") return r.time.compute;
    if (n == "tp communication") return r.time.tp;
    if (n == "cp communication") return r.time.cp;
    if (n == "dp communication") return r.time.dp;
    if (n == "pp communication") return r.time.pp;
    if (n == "embedding all-reduce") return r.time.embedding;
    if (n == "optimizer step") return r.time.optimizer;
    return r.time.bubble;
  };
  std::snprintf(buf, sizeof buf,
                "#1 beats #2 by %.4g s per step (%.1f%%); the largest difference is %s: %.4g s "
                "vs %.4g s",
                gap, 100.0 * gap / next.time.total(), most->first, value(best), value(next));
  return buf;
}

Json to_json(const RankedLayout& r) {
  const Candidate& c = r.layout;
  Json j = Json::object();
  j.set("dp", c.dp);
  j.set("tp", c.tp);
  j.set("cp", c.cp);
  j.set("pp", c.pp);
  j.set("schedule", c.pp > 1 ? Json(std::string(ch07::schedule_name(c.schedule))) : Json());
  j.set("virtual_stages", c.virtual_stages);
  j.set("sequence_parallel", c.sequence_parallel);
  j.set("micro_batch", c.micro_batch);
  j.set("micro_batches", c.micro_batches);
  j.set("zero_stage", c.zero_stage);
  j.set("recompute", mem::name(c.recompute));
  j.set("dtype", mem::name(c.precision));
  j.set("memory_bytes", r.memory.total());
  j.set("model_states_bytes", r.memory.states_bytes);
  j.set("activation_bytes", r.memory.activation_bytes);
  j.set("headroom_bytes", r.headroom_bytes);
  j.set("step_s", r.time.total());
  j.set("compute_s", r.time.compute);
  j.set("gemm_efficiency", r.time.gemm_efficiency);
  j.set("tp_comm_s", r.time.tp);
  j.set("cp_comm_s", r.time.cp);
  j.set("dp_comm_s", r.time.dp);
  j.set("pp_comm_s", r.time.pp);
  j.set("embedding_comm_s", r.time.embedding);
  j.set("bubble_s", r.time.bubble);
  j.set("optimizer_s", r.time.optimizer);
  j.set("flops_per_step", r.time.flops_per_step);
  return j;
}

}  // namespace mixpar::plan
