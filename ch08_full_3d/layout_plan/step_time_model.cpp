#include "step_time_model.h"

#include <algorithm>
#include <cmath>

#include "ch07_pipeline/bubble.h"
#include "model_flops.h"
#include "numerics/dtype.h"
#include "preflight.h"

namespace mixpar::plan {

namespace {

constexpr double kBucketBytes = 25e6;  // train_gpt's --bucket-mb default (PyTorch's 25 MB)

// A ring collective over a group of g ranks: 2 (g - 1) steps for an all-reduce, each a message.
double ring_latency(const Link& link, int g, double collectives) {
  return g > 1 ? collectives * 2.0 * (g - 1) * link.latency : 0.0;
}

bool is_busy(const ch07::TimedAction& a) {
  return a.action.work != ch07::Work::kTransfer;
}

}  // namespace

const ch07::Timeline& BubbleCache::timeline(ch07::ScheduleKind kind, int pp, int m, int v) {
  const auto key = std::make_tuple(static_cast<int>(kind), pp, m, v);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  const ch07::PipelinePlan plan = ch07::make_plan(kind, ch07::layout_for(kind, pp, m, v));
  ch07::PlayResult r = ch07::play(plan, ch07::SendMode::kEager);
  return cache_.emplace(key, std::move(r.timeline)).first->second;
}

const Link& link_for_span(const Cluster& cluster, std::int64_t span) {
  return span <= cluster.devices_per_node ? cluster.intra : cluster.inter;
}

StepTime predict_step_time(const Candidate& c, const GptConfig& model, std::int64_t seq,
                           const Cluster& cluster, BubbleCache& bubbles) {
  StepTime t;
  const ch08::TrainerConfig tc = trainer_config_of(c, model, seq);
  t.flops_per_step = ch08::grid_flops_per_step(tc);

  // The busiest rank's FLOPs: its stages' blocks (and the LM head on the last stage) over tp,
  // its tokens T / cp of the dp replica's b m sequences. Summed over the ranks this is
  // grid_flops_per_step (tested).
  const double C = static_cast<double>(model.n_embd), T = static_cast<double>(seq);
  const double tokens = static_cast<double>(c.micro_batch * c.micro_batches) * T / c.cp;
  const double vpad = static_cast<double>(padded_vocab(model.vocab_size, c.tp));
  const double recompute_block =
      c.recompute == mem::Recompute::kFull ? 2 * 12 * C * C + 2 * C * T
      : c.recompute == mem::Recompute::kSelective ? 2 * C * T
                                                  : 0.0;
  double busiest = 0, all_ranks = 0;
  const int stages = c.pp * c.virtual_stages;
  for (int r = 0; r < c.pp; ++r) {
    double per_token = 0;
    for (int k = 0; k < c.virtual_stages; ++k) {
      const GptStage st = gpt_stage(model, k * c.pp + r, stages);
      const double blocks = static_cast<double>(st.blocks(model));
      per_token += blocks * (6 * 12 * C * C + 6 * C * T + recompute_block) / c.tp;
      if (st.is_last()) per_token += 6 * vpad * C / c.tp;
    }
    busiest = std::max(busiest, per_token * tokens);
    all_ranks += per_token * tokens * c.tp * c.cp * c.dp;
  }
  // The MLP's GEMM, the rank's largest: [b T / cp, C] x [C, 4 C / tp], sized as the square
  // GEMM of the same FLOPs (the cube root of M K N), which is what the curve was measured on.
  const double gemm_size =
      std::cbrt(static_cast<double>(c.micro_batch) * T / c.cp * C * 4 * C / c.tp);
  t.gemm_efficiency = cluster.gemm_efficiency(gemm_size);
  const double peak = cluster.peak_flops *
                      (c.precision == mem::Precision::kFp32 ? cluster.fp32_peak_ratio : 1.0);
  const bool shared = cluster.shared_cores > 0;
  t.compute = (shared ? all_ranks : busiest) / (peak * t.gemm_efficiency);

  // The optimizer step: 2 x the states each rank holds (exact element counts, preflight.h).
  {
    double worst = 0, all = 0;
    const int zero = c.dp > 1 ? c.zero_stage : 0;
    for (int st = 0; st < c.pp; ++st) {
      const mem::ModelStates ms = mem::model_states(ch08::rank_parameter_count(tc, st), c.precision,
                                                    mem::Optimizer::kAdamW, zero, c.dp);
      const double bytes = 2.0 * static_cast<double>(ms.total());
      worst = std::max(worst, bytes);
      all += bytes * c.dp * c.tp * c.cp;
    }
    t.optimizer = (shared ? all : worst) / cluster.memory_bandwidth;
    if (shared) {
      // Rank threads time-sliced on shared cores evict each other's caches: each micro-batch
      // reads the rank's weights three times (forward, input and weight gradients) and
      // accumulates its gradients (a read and a write), all from memory.
      double held = 0;
      for (int st = 0; st < c.pp; ++st) {
        held += static_cast<double>(ch08::rank_parameter_count(tc, st)) * c.dp * c.tp * c.cp;
      }
      const double w = static_cast<double>(dtype_size(tc.dtype));
      t.optimizer += held * 5.0 * w * static_cast<double>(c.micro_batches) / cluster.memory_bandwidth;
    }
  }

  // Communication: preflight's bytes per step of the busiest rank of each group.
  const ch08::GroupTraffic g = ch08::estimate_group_traffic(tc);
  const std::int64_t tp_span = c.tp, cp_span = std::int64_t{c.tp} * c.cp,
                     dp_span = cp_span * c.dp, pp_span = dp_span * c.pp;
  const double m = static_cast<double>(c.micro_batches);
  const double blocks_max = std::ceil(static_cast<double>(model.n_layer) / c.pp);
  if (c.tp > 1) {
    const Link& l = link_for_span(cluster, tp_span);
    const double collectives = ((c.recompute == mem::Recompute::kFull ? 6 : 4) * blocks_max + 1) * m;
    t.tp = static_cast<double>(g.tp) / l.bandwidth + ring_latency(l, c.tp, collectives);
  }
  if (c.cp > 1) {
    const Link& l = link_for_span(cluster, cp_span);
    // The ring's K/V steps: (cp - 1) forward and 2 (cp - 1) backward per block and micro-batch.
    t.cp = static_cast<double>(g.cp) / l.bandwidth + 3.0 * (c.cp - 1) * blocks_max * m * l.latency;
  }
  const double per_mb_compute = t.compute / m;
  if (c.dp > 1) {
    const Link& l = link_for_span(cluster, dp_span);
    const double bytes = static_cast<double>(g.dp);
    const int z = c.zero_stage;
    // The step's gradient sync (ZeRO-3: the 2 of its 1 + 2m passes that are the sync).
    const double sync_bytes = z == 3 ? bytes * 2.0 / (1 + 2 * m) : bytes;
    const double buckets = std::max(1.0, std::ceil(sync_bytes / 2.0 / kBucketBytes));
    const double sync = sync_bytes / l.bandwidth + ring_latency(l, c.dp, buckets);
    if (shared) {
      t.dp = sync;
    } else {
      // The last micro-batch's backward (2/3 of its compute) hides all but the last bucket.
      const double last_bucket = sync / buckets;
      t.dp = last_bucket + std::max(0.0, sync - last_bucket - per_mb_compute * 2.0 / 3.0);
    }
    if (z == 3) {
      // Two gathers per micro-batch (forward and backward) beside its compute.
      const double gather = (bytes - sync_bytes) / l.bandwidth / (2 * m);
      t.dp += shared ? gather * 2 * m
                     : 2 * m * std::max(0.0, gather - per_mb_compute / 2.0);
    }
  }
  if (c.pp > 1) {
    const Link& l = link_for_span(cluster, pp_span);
    const double messages = 2.0 * m * c.virtual_stages;
    t.pp = static_cast<double>(g.pp) / l.bandwidth + messages * l.latency;
    const Link& e = link_for_span(cluster, pp_span);
    t.embedding = static_cast<double>(g.embedding) / e.bandwidth + e.latency;
  }

  // The bubble, from the simulator's timeline.
  if (c.pp > 1) {
    const ch07::Timeline& tl = bubbles.timeline(c.schedule, c.pp, static_cast<int>(c.micro_batches),
                                                c.virtual_stages);
    const double units = 3.0 * m * c.virtual_stages;  // one rank's compute, in unit costs
    if (!shared) {
      t.bubble = t.compute * (static_cast<double>(tl.makespan) - units) / units;
    } else {
      // Slot by slot: k pipeline ranks busy in each of the dp x tp x cp replicas run at
      // min(k R, cores) cores' speed; the step is their sum, the bubble what exceeds the
      // compute at all cores busy.
      std::vector<int> busy(static_cast<std::size_t>(tl.makespan), 0);
      for (const auto& rank : tl.ranks) {
        for (const ch07::TimedAction& a : rank) {
          if (!is_busy(a)) continue;
          for (std::int64_t u = a.start; u < a.end; ++u) ++busy[static_cast<std::size_t>(u)];
        }
      }
      const double replicas = static_cast<double>(c.devices()) / c.pp;
      const double cores = cluster.shared_cores;
      double slots = 0, work = 0;
      for (int k : busy) {
        const double w = k * replicas;
        work += w;
        if (w > 0) slots += w / std::min(w, cores);
      }
      // compute = work x tau / cores; the timeline's wall = slots x tau.
      const double tau = t.compute * cores / work;
      t.bubble = std::max(0.0, slots * tau - t.compute);
    }
  }
  return t;
}

}  // namespace mixpar::plan
