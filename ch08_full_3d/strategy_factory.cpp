// The strategies behind the trainer's seams, chosen from its flags (strategy_factory.h).
#include "strategy_factory.h"

#include "ch04_ddp/bucketed_allreduce.h"
#include "ch04_ddp/ddp.h"
#include "ch05_zero/zero_stage3.h"
#include "ch06_tensor_parallel/cp_grad_sync.h"
#include "ch06_tensor_parallel/cp_model_attention.h"
#include "ch06_tensor_parallel/tp_collectives.h"
#include "ch07_pipeline/pipeline_runtime.h"
#include "parallel/replicas.h"
#include "tied_embedding_sync.h"

namespace mixpar::ch08 {

namespace {

// Whether the compute thread talks to groups other than dp during backward: context parallel
// to the cp group all through it (the ring's hops, the gradients' sums over cp), tensor
// parallel to the tp group (Megatron's all-reduces), a pipeline to its neighbours (the last
// micro-batch's sends), MoE blocks to the ep group (the all-to-alls).
bool talks_beside_dp(const TrainerConfig& c) {
  return c.cp > 1 || c.tp > 1 || c.pp > 1 || c.moe.n_experts > 0;
}

}  // namespace

// Beside other groups' calls the buckets need dp's dup (Communicator::dup): with a rank's two
// threads in one group's bookkeeping at once, the local backend's deadlock check read the
// rank by one status and called a live rank stuck (seen as a "deadlock" between a dp
// reduce-scatter and a tp all-reduce under load), and its fast channels took two producers.
// ZeRO-3 over the dup runs its gathers on its own thread there too (Zero3Options::dp_is_a_dup).
bool buckets_overlap_backward(const TrainerConfig& c, bool dp_lane) {
  if (!c.overlap) return false;
  return !talks_beside_dp(c) || dp_lane;
}

std::unique_ptr<Communicator> make_dp_lane(const ParallelGrid* grid, const TrainerConfig& c) {
  if (grid == nullptr || grid->dp().size() == 1 || !talks_beside_dp(c)) return nullptr;
  if (!buckets_overlap_backward(c, true)) return nullptr;
  return grid->dp().dup();  // nullptr where the backend cannot (MPI below THREAD_MULTIPLE)
}

namespace {

ch04::ReducerConfig reducer_config(const TrainerConfig& c, bool overlap) {
  ch04::ReducerConfig r;
  r.bucket_cap_bytes = static_cast<std::size_t>(c.bucket_mb * 1024.0 * 1024.0);
  r.algo = c.allreduce;
  r.overlap = overlap;
  return r;
}

// One replica of a grid (dp 1). ZeRO with one replica (e.g. --tp 2 or --pp 2 alone): a shard
// of one is the whole, so each stage is stage 0 exactly (Rajbhandari et al. 2020: the savings
// are 1/N_d), run as one replica's gradients and named so in the run's log.
std::unique_ptr<GradSync> one_replica(const TrainerConfig& c) {
  if (c.zero_stage == 0) return std::make_unique<LocalGradients>();
  return std::make_unique<LocalGradients>("ZeRO-" + std::to_string(c.zero_stage) +
                                          " with dp 1: nothing to shard, runs as stage 0");
}

// The pipeline's tied wte (two copies, first and last stage, each with half the gradient)
// meets in the gradient sync, before it reduces over dp > 1 (TiedEmbeddingFirst). ZeRO needs
// that order: its reduce-scatter leaves each dp rank only its shard, cut at different offsets
// on the two stages. Chapter 4's all-reduce could sum the copies after the sync instead, but
// FP32 addition does not associate: (a0 + b0) + (a1 + b1) and (a0 + a1) + (b0 + b1) differ in
// the last bits, and DDP and ZeRO would no longer give the same bits beside a pipeline. Both
// take Megatron-LM's order. With one replica the pipeline schedule sums the copies after the
// (absent) sync (ch07's PipelineSchedule::after_sync), the same sum. Decided here, once.
bool tied_copies_meet_in_sync(const ParallelGrid* grid, const TrainerConfig& c) {
  // The V (zb-v, dualpipev) holds one wte, on rank 0: no copies to meet.
  if (ch07::placement_of(ch07::parse_schedule(c.pipeline_schedule)) == ch07::Placement::kV) {
    return false;
  }
  return grid != nullptr && grid->dp().size() > 1;
}

// Chapter 5's ZeRO stage c.zero_stage (>= 1) over dp.
std::unique_ptr<GradSync> make_zero(Communicator& dp, GptModel& model, const TrainerConfig& c,
                                    bool overlap, bool dp_is_a_dup) {
  ch05::ZeroConfig z;
  z.bucket_cap_bytes = reducer_config(c, overlap).bucket_cap_bytes;
  z.overlap = overlap;
  if (c.zero_stage == 3) {
    verify_replicas(dp, rank_params(model).flat_params());  // before the copy is split
    ch05::Zero3Options o;
    o.prefetch = c.zero3_prefetch;
    o.dp_is_a_dup = dp_is_a_dup;
    return std::make_unique<ch05::ZeroStage3>(dp, model, z, o);
  }
  if (c.zero_stage == 2) return std::make_unique<ch05::ZeroStage2>(dp, rank_params(model), z);
  return std::make_unique<ch05::ZeroStage1>(dp, rank_params(model), z);
}

}  // namespace

ParamRegistry& rank_params(GptModel& m) {
  return m.options().params != nullptr ? *m.options().params : m.registry();
}
const ParamRegistry& rank_params(const GptModel& m) {
  return m.options().params != nullptr ? *m.options().params : m.registry();
}

namespace {

// The data-parallel sync of make_grad_sync, over the dp group, or its lane when given.
std::unique_ptr<GradSync> make_dp_grad_sync(GptModel& model, const ParallelGrid* grid,
                                            const TrainerConfig& c, Communicator* dp_lane) {
  if (grid == nullptr) return std::make_unique<LocalGradients>();
  if (grid->dp().size() == 1) return one_replica(c);
  Communicator& dp = grid->dp();
  sync_initial_weights(dp, rank_params(model).flat_params(), c.init_sync);
  const bool overlap = buckets_overlap_backward(c, dp_lane != nullptr);
  Communicator& buckets = dp_lane != nullptr ? *dp_lane : dp;
  std::unique_ptr<GradSync> sync =
      c.zero_stage >= 1 ? make_zero(buckets, model, c, overlap, dp_lane != nullptr)
                        : std::make_unique<ch04::BucketedAllReduce>(
                              buckets, rank_params(model), reducer_config(c, overlap),
                              ch04::model_reports_grad_ready());
  // ZeRO-3 has released the whole working copy (it checked the replicas before splitting it).
  if (c.zero_stage != 3) verify_replicas(dp, rank_params(model).flat_params());
  // Pipeline stages: the tied wte's two copies meet before the dp reduction
  // (tied_embedding_sync.h) on the ranks that hold one.
  Communicator* embedding = grid->embedding();
  if (tied_copies_meet_in_sync(grid, c) && embedding != nullptr && embedding->size() > 1 &&
      rank_params(model).contains("wte.weight")) {
    sync = std::make_unique<TiedEmbeddingFirst>(std::move(sync), rank_params(model), *embedding,
                                                grid->coord().rank);
  }
  return sync;
}

}  // namespace

std::unique_ptr<GradSync> make_grad_sync(GptModel& model, const ParallelGrid* grid,
                                         const TrainerConfig& c, Communicator* dp_lane) {
  std::unique_ptr<GradSync> dp = make_dp_grad_sync(model, grid, c, dp_lane);
  // Context parallel (chapter 6, part 2): the cp ranks' shares summed first (cp shards nothing).
  if (grid == nullptr || grid->cp() == nullptr) return dp;
  return std::make_unique<ch06::CpGradSync>(std::move(dp), *grid->cp(), rank_params(model));
}

std::unique_ptr<Schedule> make_schedule(const TrainerConfig& c, const ParallelGrid* grid,
                                        std::vector<GptModel*> chunks) {
  const int m = static_cast<int>(c.grad_accum);
  if (grid == nullptr || grid->shape().pp == 1) return std::make_unique<SingleStage>(m);
  const ch07::ScheduleKind kind = ch07::parse_schedule(c.pipeline_schedule);
  auto pipeline = std::make_unique<ch07::PipelineSchedule>(
      kind, ch07::layout_for(kind, c.pp, m, c.virtual_stages), *grid);
  // Interleaved and the V: the rank's last backward (or W) is chunk 0's (the registry's first
  // entries: its hook's indices are the registry's); the other chunks' gradients are final
  // before it, report nothing, and are sent by the sync's finish().
  if (chunks.size() > 1) pipeline->set_chunks(std::move(chunks));
  if (tied_copies_meet_in_sync(grid, c)) pipeline->leave_tied_copies_to_sync();
  return pipeline;
}

std::unique_ptr<TensorParallelGroup> make_tp_ops(const ParallelGrid* grid) {
  if (grid == nullptr || grid->shape().tp == 1) return nullptr;
  return std::make_unique<ch06::TpCollectives>(grid->tp());
}

std::unique_ptr<AttentionSeam> make_cp_attention(const ParallelGrid* grid, const TrainerConfig& c) {
  if (grid == nullptr || grid->cp() == nullptr) return nullptr;
  return std::make_unique<ch06::CpModelAttention>(
      grid->cp(), ch06::cp_layout(c.seq, c.cp, ch06::CpSplit::kZigzag),
      c.cp_algo == "all-to-all" ? ch06::CpAlgo::kAllToAll : ch06::CpAlgo::kRing);
}

}  // namespace mixpar::ch08
