#include "layout_search.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "ch07_pipeline/bubble.h"
#include "mesh_rules.h"
#include "util/errors.h"

namespace mixpar::plan {

namespace {

bool allowed(const std::vector<int>& degrees, int d) {
  return degrees.empty() || std::find(degrees.begin(), degrees.end(), d) != degrees.end();
}

std::vector<int> divisors(std::int64_t n) {
  std::vector<int> out;
  for (std::int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(static_cast<int>(d));
  }
  return out;
}

DType dtype_of(mem::Precision p) {
  switch (p) {
    case mem::Precision::kFp32: return DType::kF32;
    case mem::Precision::kFp16: return DType::kF16;
    case mem::Precision::kBf16: return DType::kBF16;
  }
  return DType::kF32;
}

}  // namespace

std::string Candidate::text() const {
  std::string s = "dp " + std::to_string(dp) + " tp " + std::to_string(tp) + " pp " +
                  std::to_string(pp) + " cp " + std::to_string(cp) +
                  (sequence_parallel ? " sp" : "");
  if (pp > 1) {
    s += ", " + std::string(ch07::schedule_name(schedule));
    if (virtual_stages > 1) s += " v " + std::to_string(virtual_stages);
  }
  s += ", b " + std::to_string(micro_batch) + " x m " + std::to_string(micro_batches) +
       ", zero " + std::to_string(zero_stage) + ", recompute " +
       std::string(mem::name(recompute)) + ", " + std::string(mem::name(precision));
  return s;
}

ch08::TrainerConfig trainer_config_of(const Candidate& c, const GptConfig& model,
                                      std::int64_t seq) {
  ch08::TrainerConfig t;
  t.model = model;
  t.seq = seq;
  t.batch = c.micro_batch;
  t.grad_accum = c.micro_batches;
  t.ranks = c.devices();
  t.dp = c.dp;
  t.tp = c.tp;
  t.cp = c.cp;
  t.pp = c.pp;
  t.pipeline_schedule = std::string(ch07::schedule_name(c.schedule));
  t.virtual_stages = c.virtual_stages;
  t.zero_stage = c.zero_stage;
  t.recompute = c.recompute == mem::Recompute::kFull;
  t.sequence_parallel = c.sequence_parallel;
  t.dtype = dtype_of(c.precision);
  return t;
}

std::string refusal(const Candidate& c, const GptConfig& model, std::int64_t seq,
                    const Cluster& cluster) {
  if (c.tp > cluster.devices_per_node) {
    return "tp " + std::to_string(c.tp) + " spans nodes of " +
           std::to_string(cluster.devices_per_node) + " devices";
  }
  const ch08::TrainerConfig t = trainer_config_of(c, model, seq);
  try {
    ch08::check_mesh_rules(t);
    if (c.pp > 1) {
      if (c.micro_batches > 1024) return "pipeline: more than 1024 micro-batches per step";
      ch07::check_layout(c.schedule, ch07::layout_for(c.schedule, c.pp,
                                                      static_cast<int>(c.micro_batches),
                                                      c.virtual_stages));
      if (ch07::splits_backward(c.schedule) && c.recompute != mem::Recompute::kNone) {
        return "pipeline: " + t.pipeline_schedule + " keeps every block's activations from B "
               "to W: not with recompute";
      }
    }
    // Chapter 3's calculator bills layers split evenly over the stages: a layout it cannot
    // bill (pp not dividing n_layer) is not ranked.
    mem::validate(training_setup_of(c, model, seq, cluster));
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

mem::TrainingSetup training_setup_of(const Candidate& c, const GptConfig& model, std::int64_t seq,
                                     const Cluster& cluster) {
  mem::TrainingSetup s;
  s.shape = mem::GptShape{.n_layer = model.n_layer, .n_embd = model.n_embd,
                          .n_head = model.n_head, .vocab_size = model.vocab_size, .seq = seq,
                          .micro_batch = c.micro_batch, .n_positions = model.n_positions};
  s.precision = c.precision;
  s.layout = mem::Layout{.zero_stage = c.dp > 1 ? c.zero_stage : 0, .dp = c.dp, .tp = c.tp,
                         .pp = c.pp, .sequence_parallel = c.sequence_parallel,
                         .recompute = c.recompute, .moe = {}};  // dense models only
  s.device_memory_bytes = cluster.memory_bytes;
  return s;
}

DeviceMemory device_memory(const Candidate& c, const GptConfig& model, std::int64_t seq,
                           const Cluster& cluster) {
  DeviceMemory d;
  d.bill = mem::compute_bill(training_setup_of(c, model, seq, cluster));
  d.states_bytes = d.bill.states.total();
  // The chunks (1/v of the stage's layers each) the schedule holds at its peak on the billed
  // stage; with 1F1B and m >= pp, p - stage: the calculator's micro_batches_in_flight.
  int held = 1;
  if (c.pp > 1) {
    const ch07::PipelineLayout l = ch07::layout_for(
        c.schedule, c.pp, static_cast<int>(c.micro_batches), c.virtual_stages);
    held = ch07::expected_peak_activations(c.schedule, l, static_cast<int>(d.bill.stage));
  }
  d.layers_in_flight =
      static_cast<double>(d.bill.layers_on_stage) * held / static_cast<double>(c.virtual_stages);
  const double act = static_cast<double>(d.bill.activations_per_layer) * d.layers_in_flight /
                     static_cast<double>(c.cp);
  d.activation_bytes = static_cast<std::int64_t>(act);
  return d;
}

std::vector<Candidate> all_candidates(const SearchSpace& space, const Cluster& cluster) {
  if (space.global_batch < 1) throw InputError("--global-batch must be a positive number of sequences");
  if (space.seq < 1) throw InputError("--seq must be positive");
  std::vector<Candidate> out;
  const std::int64_t n = cluster.devices;
  for (int tp : divisors(n)) {
    for (int cp : divisors(n / tp)) {
      if (cp > 1 && !space.context_parallel) continue;
      for (int pp : divisors(n / tp / cp)) {
        if (pp > 1 && !space.pipeline) continue;
        const int dp = static_cast<int>(n / tp / cp / pp);
        if (space.global_batch % dp != 0) continue;
        if (!allowed(space.dp_degrees, dp) || !allowed(space.tp_degrees, tp) ||
            !allowed(space.cp_degrees, cp) || !allowed(space.pp_degrees, pp)) {
          continue;
        }
        struct Sched {
          ch07::ScheduleKind kind;
          int v;
        };
        std::vector<Sched> scheds;
        if (pp == 1) {
          scheds.push_back({ch07::ScheduleKind::kOneFOneB, 1});
        } else {
          for (ch07::ScheduleKind k : space.schedules) {
            if (k == ch07::ScheduleKind::kInterleaved) {
              for (int v : space.virtual_stages) scheds.push_back({k, v});
            } else {
              scheds.push_back({k, ch07::placement_of(k) == ch07::Placement::kV ? 2 : 1});
            }
          }
        }
        for (std::int64_t b : space.micro_batch_sizes) {
          if ((space.global_batch / dp) % b != 0) continue;
          const std::int64_t m = space.global_batch / dp / b;
          for (const Sched& s : scheds) {
            for (int zero : space.zero_stages) {
              if (dp == 1 && zero > 0) continue;  // no dp group to shard over: stage 0
              for (mem::Recompute r : space.recomputes) {
                for (mem::Precision p : space.precisions) {
                  for (bool sp : {false, true}) {
                    if (sp && tp == 1) continue;
                    out.push_back(Candidate{.dp = dp, .tp = tp, .cp = cp, .pp = pp,
                                            .schedule = s.kind, .virtual_stages = s.v,
                                            .micro_batch = b, .micro_batches = m,
                                            .zero_stage = zero, .recompute = r, .precision = p,
                                            .sequence_parallel = sp});
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace mixpar::plan
