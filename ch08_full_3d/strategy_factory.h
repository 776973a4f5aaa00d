// The one place the trainer's flags become strategies: which gradient sync (chapter 4's
// bucketed all-reduce, chapter 5's ZeRO stages, decorated for the tied embedding of a
// pipeline), which schedule (one stage, or chapter 7's pipeline over this rank's model
// chunks) and which tensor-parallel collectives (chapter 6). The trainer holds what these
// return through the interfaces of common/parallel and common/model and never asks which
// implementation it holds: a new strategy touches its chapter and this file only.
#pragma once

#include <memory>
#include <vector>

#include "comm/parallel_grid.h"
#include "model/gpt.h"
#include "model/tensor_parallel.h"
#include "parallel/grad_sync.h"
#include "parallel/schedule.h"
#include "trainer_config.h"

namespace mixpar::ch08 {

// The parameters the optimizer, the gradient sync, the norm and --save see: the model's own,
// or with --virtual-stages > 1 the registry of every model chunk of this rank
// (ch07_pipeline/model_chunks.h), of which the model (chunk 0) and the other chunks are views.
ParamRegistry& rank_params(GptModel& m);
const ParamRegistry& rank_params(const GptModel& m);

// Whether the gradient sync reduces its buckets on a communication thread while backward runs
// (--overlap). On a pure data-parallel layout, over dp itself. Where the compute thread calls
// other groups' collectives during backward (tp, cp, pp or MoE blocks), over dp's dup
// (`dp_lane`: make_dp_lane; ZeRO-3's gathers then run on its own thread too); without one,
// after backward, on the compute thread. The bits are the same either way.
bool buckets_overlap_backward(const TrainerConfig& c, bool dp_lane);
// The dp group's dup for the buckets' thread (Communicator::dup), where the layout needs one to
// overlap: collective over dp. nullptr where it needs none, with --no-overlap, or where the
// backend cannot run two threads' calls at once. The caller keeps it alive as
// long as the sync made over it.
std::unique_ptr<Communicator> make_dp_lane(const ParallelGrid* grid, const TrainerConfig& c);

// --zero-stage, --allreduce, --bucket-mb, --overlap, --init-sync over the grid's dp group (the
// buckets over `dp_lane` where there is one). The dp replicas are made equal first (rank 0's
// weights broadcast, or one seed) and checked.
std::unique_ptr<GradSync> make_grad_sync(GptModel& model, const ParallelGrid* grid,
                                         const TrainerConfig& c, Communicator* dp_lane = nullptr);
// --schedule, --grad-accum, --virtual-stages: chunks are this rank's model chunks, chunk 0
// first (one with --virtual-stages 1).
std::unique_ptr<Schedule> make_schedule(const TrainerConfig& c, const ParallelGrid* grid,
                                        std::vector<GptModel*> chunks);
// Chapter 6's tp group over the grid's tp communicator, which hands each block of the model
// its ColumnParallelLinear and RowParallelLinear and runs the vocabulary-parallel
// collectives; null unless tp > 1.
std::unique_ptr<TensorParallelGroup> make_tp_ops(const ParallelGrid* grid);
// Chapter 6 (part 2): the model's attention over the grid's cp group, its rows the zigzag
// split of --seq (c.cp_algo: ring or all-to-all); null unless cp > 1.
std::unique_ptr<AttentionSeam> make_cp_attention(const ParallelGrid* grid, const TrainerConfig& c);

}  // namespace mixpar::ch08
