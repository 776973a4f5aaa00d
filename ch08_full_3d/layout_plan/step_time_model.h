// The predicted time of one optimizer step of a layout (mixpar-plan): compute + exposed
// communication + pipeline bubble, each from first principles and stated here.
//
// compute   the busiest rank's model FLOPs per step (6 x its GEMM weights + 6 L C T per
//           token, as model_flops.h counts them; recompute adds a forward: full re-runs the
//           whole block, 2 FLOPs per weight, selective the attention core, 2 C T per block and
//           token) over peak x the cluster's GEMM efficiency (cluster.h) at the size of the
//           rank's MLP GEMM [b T / cp, C] x [C, 4 C / tp] taken as the square GEMM of the same
//           FLOPs, (M K N)^(1/3). FP32 at peak x fp32_peak_ratio.
// comm      each group's bytes per step from preflight.h's estimate_group_traffic (ring
//           volumes, docs/REFERENCE.md) over the link the group crosses (tp, cp, dp, pp groups
//           placed [pp, dp, cp, tp] with tp fastest: a group whose span tp x ... fits in a node
//           is intra-node, else inter-node), plus alpha per ring step of each collective.
//           Overlap rules: tp's and cp's collectives sit between a block's GEMMs: exposed.
//           dp's bucketed reduce (25 MB buckets, chapter 4) overlaps the last micro-batch's
//           backward, except its last bucket; ZeRO-3's parameter gathers overlap each
//           micro-batch's compute (prefetch), exposed only beyond it. pp's sends are exposed
//           once per micro-batch boundary (2 m v messages). The tied embedding's all-reduce
//           is exposed.
// memory    the step's update, memory-bound: each rank reads and writes the model states it
//           holds (chapter 3's bill: 2 x states bytes) at the memory bandwidth. Replicated over
//           dp and cp (without ZeRO) like the states themselves. On a shared machine also each
//           micro-batch's weights (3 reads) and gradient accumulation (read + write): time
//           slices evict the caches (the field keeps the name `optimizer`).
// bubble    chapter 7's simulator plays the schedule with unit costs (F 1, B 2, or B 1 + W 1):
//           the makespan beyond the rank's own compute, in units of compute / (3 m v).
// On a machine whose devices are threads sharing `shared_cores` cores (this-machine), the
// ranks' compute adds up: compute = the sum over ranks / the machine's rate; a bubble costs
// only where fewer ranks are busy than there are cores (the simulator's timeline, slot by
// slot); and nothing overlaps, the communication threads' copies taking the same cores. The
// optimizer's traffic is then the sum over the ranks at the machine's bandwidth.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "ch07_pipeline/schedule_simulator.h"
#include "cluster.h"
#include "layout_search.h"

namespace mixpar::plan {

struct StepTime {
  double compute = 0;
  double tp = 0, cp = 0, dp = 0, pp = 0, embedding = 0;  // exposed, seconds
  double bubble = 0;
  double optimizer = 0;
  double gemm_efficiency = 0;
  double flops_per_step = 0;  // the whole grid's model FLOPs (model_flops.h)
  double comm() const { return tp + cp + dp + pp + embedding; }
  double total() const { return compute + comm() + bubble + optimizer; }
};

// The ch07 timeline of (schedule, p, m, v), played once per distinct key.
class BubbleCache {
 public:
  const ch07::Timeline& timeline(ch07::ScheduleKind kind, int pp, int m, int v);

 private:
  std::map<std::tuple<int, int, int, int>, ch07::Timeline> cache_;
};

StepTime predict_step_time(const Candidate& c, const GptConfig& model, std::int64_t seq,
                           const Cluster& cluster, BubbleCache& bubbles);

// The link a group of `span` consecutive device ids (its stride x its size) crosses.
const Link& link_for_span(const Cluster& cluster, std::int64_t span);

}  // namespace mixpar::plan
