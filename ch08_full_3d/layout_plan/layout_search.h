// The layouts mixpar-plan considers: every dp x tp x cp x pp mesh of the cluster's devices with
// a pipeline schedule, micro-batch size and count, ZeRO stage, recompute and dtype, kept when
// train_gpt would run it (the same mesh rules, through a TrainerConfig: mesh_rules.h) and
// billed by chapter 3's calculator (memory_calculator.h, what mixpar-mem prints).
//
// Rules beyond the mesh rules, as train_gpt's flag checks state them (trainer_config.cpp):
// a pipeline plans at most 1024 micro-batches; the schedule's own layout rules (interleaved:
// v >= 2 and m a multiple of pp; ch07::check_layout); zb-h1 keeps every block's activations
// from B to W, so not with recompute. One rule of the advisor's own: tp stays inside a node
// (its all-reduces are on the critical path of every block). And chapter 3's calculator must
// bill it: it splits the layers evenly over the stages, so pp divides n_layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ch03_master_weights/memory_calculator.h"
#include "ch07_pipeline/pipeline_schedule.h"
#include "cluster.h"
#include "model_presets.h"
#include "trainer_config.h"

namespace mixpar::plan {

struct Candidate {
  int dp = 1, tp = 1, cp = 1, pp = 1;
  ch07::ScheduleKind schedule = ch07::ScheduleKind::kOneFOneB;  // 1f1b when pp == 1
  int virtual_stages = 1;
  std::int64_t micro_batch = 1, micro_batches = 1;  // b sequences, m per optimizer step
  int zero_stage = 0;
  mem::Recompute recompute = mem::Recompute::kNone;
  mem::Precision precision = mem::Precision::kBf16;
  // Megatron's sequence parallelism over the tp group (tp > 1; train_gpt runs it without a
  // pipeline only: mesh rule pp-whole-activations).
  bool sequence_parallel = false;
  int devices() const { return dp * tp * cp * pp; }
  // "dp 8 tp 8 pp 1 cp 1 sp, b 1 x m 4, zero 1, recompute selective, bf16" (schedule when
  // pp > 1, "sp" with sequence parallelism)
  std::string text() const;
};

// What the search is asked.
struct SearchSpace {
  std::int64_t global_batch = 0;  // sequences per optimizer step
  std::int64_t seq = 0;
  std::vector<mem::Precision> precisions = {mem::Precision::kBf16};
  std::vector<int> zero_stages = {0, 1, 2, 3};
  std::vector<mem::Recompute> recomputes = {mem::Recompute::kNone, mem::Recompute::kSelective,
                                            mem::Recompute::kFull};
  std::vector<std::int64_t> micro_batch_sizes = {1, 2, 4, 8, 16, 32};
  std::vector<int> virtual_stages = {2, 4};  // interleaved's v
  // The pipeline schedules of pp > 1 layouts.
  std::vector<ch07::ScheduleKind> schedules = {ch07::ScheduleKind::kOneFOneB,
                                               ch07::ScheduleKind::kInterleaved,
                                               ch07::ScheduleKind::kZbH1};
  bool context_parallel = true;              // cp > 1 considered
  // Degrees to keep (empty: every divisor): a published layout is evaluated by fixing them.
  std::vector<int> dp_degrees, tp_degrees, cp_degrees, pp_degrees;
  bool pipeline = true;                      // pp > 1 considered
};

// The TrainerConfig of train_gpt that runs the candidate (model, seq, batch = b, grad_accum = m,
// the mesh, schedule, ZeRO, recompute, dtype); selective recompute has no train_gpt flag and
// maps to recompute off (its memory is the calculator's, its time the advisor's).
ch08::TrainerConfig trainer_config_of(const Candidate& c, const GptConfig& model, std::int64_t seq);

// "" when train_gpt would run it on this cluster, else why not ("mesh rule tp-divides-heads:
// ...", "pipeline: ...", "tp 16 spans nodes of 8 devices").
std::string refusal(const Candidate& c, const GptConfig& model, std::int64_t seq,
                    const Cluster& cluster);

// One device's bill: chapter 3's (mem::compute_bill) model states of the worst stage, and its
// activations (one layer's for one micro-batch, Korthikanti et al.) times the layers the
// schedule keeps in flight on that stage (the ch07 simulator's peak: 1F1B's p - stage,
// interleaved's chunks, zb-h1's min(p, m)), divided by cp (each cp rank holds T/cp of every
// sequence, as train_gpt splits it). For 1F1B with m >= pp and cp 1 this is mixpar-mem's total.
struct DeviceMemory {
  mem::MemoryBill bill;           // the calculator's, as mixpar-mem prints it
  std::int64_t states_bytes = 0;  // bill.states.total()
  std::int64_t activation_bytes = 0;
  double layers_in_flight = 0;    // stage-layers whose activations are held at the peak
  std::int64_t total() const { return states_bytes + activation_bytes; }
};
mem::TrainingSetup training_setup_of(const Candidate& c, const GptConfig& model, std::int64_t seq,
                                     const Cluster& cluster);
DeviceMemory device_memory(const Candidate& c, const GptConfig& model, std::int64_t seq,
                           const Cluster& cluster);

// Every candidate whose degrees multiply to the cluster's devices, before any rule is checked
// (the divisors of the devices and of the global batch; InputError when the global batch or
// seq is not positive).
std::vector<Candidate> all_candidates(const SearchSpace& space, const Cluster& cluster);

}  // namespace mixpar::plan
