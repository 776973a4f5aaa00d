// The seam between a training step and whatever makes the data-parallel replicas' gradients
// agree, split by job into three small interfaces (a strategy implements the ones it plays):
//
//   StepSync       what the step calls, in four places:
//                    begin_step()             before the step's first forward
//                    last_backward_starts(m)  the step's last backward (its m-th) is about to run
//                    grad_ready(entry)        during it, as each parameter's gradient is final
//                    finish()                 after it: every gradient this rank holds is
//                                             synchronised
//   ShardOwnership what the strategy owns: which pieces of which parameters this rank's
//                  optimizer steps and checkpoints, how the step's count-once norm is summed,
//                  and how the stepped pieces get back into every replica's working copy (as
//                  torchtitan's FSDP and picotron's wrappers own theirs)
//   SyncTelemetry  what the logs and the trace read: a description, busy seconds, spans, bytes
//
// GradSync is all three: what strategy_factory.cpp (chapter 8) hands the trainer, which asks
// these questions and never asks which implementation it holds. Chapter 4's bucketed
// all-reduce (ch04_ddp/bucketed_allreduce.h) is one implementation: buckets leave during the
// last backward and finish() waits for the stragglers; chapter 5's ZeRO stages reduce-scatter
// instead and own shards; with one replica nothing needs to agree (LocalGradients). A replica
// (one replica, chapter 4) owns every parameter whole: ReplicatedGradSync answers
// ShardOwnership so. Decorators (a strategy wrapped around another) derive from
// ForwardingGradSync (parallel/forwarding_sync.h).
//
// Every method of the three interfaces is pure: a class that forwards them all
// (ForwardingGradSync) does not compile until a method added later is forwarded too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/parallel_grid.h"
#include "model/gpt_params.h"
#include "trace/chrome_trace.h"

namespace mixpar {

// Elements [entry_offset, entry_offset + count) of registry entry `entry`'s held tensor (its
// row-major elements): one piece of the parameters this rank's optimizer steps.
struct OwnedPiece {
  std::size_t entry = 0;
  std::int64_t entry_offset = 0;
  std::int64_t count = 0;
};

// One optimizer step's time as a rank's compute thread saw it.
struct StepTimes {
  double compute_s = 0;  // forward and backward
  double comm_s = 0;     // all communication: gradients, the found-inf vote, loss and norm
  double exposed_s = 0;  // the part of comm_s the compute thread waited for
};

// What a training step calls on the gradient sync.
class StepSync {
 public:
  virtual ~StepSync() = default;

  // true: finish() leaves the mean over the dp ranks and the step's micro-batches (the
  // implementation divides the sum), so the backward's seed is the loss scale alone. false:
  // the gradients are used as the backward left them, and the caller divides the seed by the
  // number of micro-batches (backward_seed below).
  virtual bool averages() const = 0;

  virtual void begin_step() = 0;
  virtual void last_backward_starts(int micro_batches) = 0;
  // On the backward's thread; ignored outside the last backward of a step.
  virtual void grad_ready(std::size_t entry) = 0;
  // Blocks until this rank's gradients are synchronised; returns the seconds it waited.
  virtual double finish() = 0;
};

// The seed of each micro-batch's backward in a step of `micro_batches`: each micro-batch's
// gradient is of its own mean loss, so the seed divided by m makes their sum the gradient of
// the step's mean, unless the sync divides the sum itself (StepSync::averages). Every
// schedule seeds its backwards with this (common/parallel/schedule.cpp, ch07's pipeline).
float backward_seed(const StepSync& sync, float loss_scale, int micro_batches);

// What a strategy owns. `params`: the registry the sync was built on (this rank's model, or
// all its model chunks).
class ShardOwnership {
 public:
  virtual ~ShardOwnership() = default;

  // How much of the training state is split over dp, in ZeRO's numbering (Rajbhandari et al.
  // 2020): 0 nothing (every replica holds and steps everything), 1 the optimizer state, 2 and
  // the gradients, 3 and the parameters. A checkpoint records it: with 1 or more every dp
  // rank writes the pieces it owns.
  virtual int sharding_stage() const = 0;
  // The pieces the optimizer steps, in the order of owned_params() and owned_grads().
  virtual std::vector<OwnedPiece> owned_pieces(const ParamRegistry& params) const = 0;
  // Views of the working copy and of the synchronised gradients at those pieces: what the
  // optimizer is built on (its masters and moments then cover those pieces only).
  virtual std::vector<Tensor> owned_params(ParamRegistry& params) const = 0;
  virtual std::vector<Tensor> owned_grads(ParamRegistry& params) const = 0;
  // Per piece: its parameter's weight-decay flag (GPT-2's two parameter groups).
  virtual std::vector<bool> owned_weight_decay(const ParamRegistry& params) const = 0;
  // Per entry: whether this rank counts it in the global norm (parallel/count_once.h; a
  // replica counts only on dp rank 0, a shard owner counts its own pieces on any dp rank).
  virtual std::vector<bool> norm_counted(const ParamRegistry& params,
                                         const GridCoord& at) const = 0;
  // This rank's share of the norm's sum of squares over the owned pieces' FP32 gradients
  // (collective over dp for a sharding sync): summed over the world it is the one-device sum.
  virtual double counted_sum_of_squares(std::span<const Tensor> grads32,
                                        const std::vector<bool>& counted) const = 0;
  // After the optimizer stepped the owned pieces (their rounded values already written into
  // owned_params()): every replica's working copy made whole again. Collective over dp for a
  // sharding sync; a replica has nothing to do.
  virtual void gather_params() = 0;
  // Collective over dp for a sharding sync: one tensor per entry, in the held shape, from
  // every rank's `owned` tensors (one per owned piece, e.g. the FP32 masters). A replica's
  // owned tensors are its entries already.
  virtual std::vector<Tensor> whole_params(const ParamRegistry& params,
                                           std::span<const Tensor> owned) const = 0;
};

// What the run's log and trace read from the sync.
class SyncTelemetry {
 public:
  virtual ~SyncTelemetry() = default;

  // A phrase for the pre-flight summary: how the gradients meet.
  virtual std::string describe() const = 0;
  // Busy seconds of communication and its trace spans since the last call.
  virtual double take_comm_seconds() = 0;
  virtual std::vector<TraceSpan> take_spans() = 0;
  // Bytes sent so far on communicators the sync made for itself (chapter 5's ZeRO-3 gathers
  // the parameters on a group split from dp): the trainer counts them with the dp group's.
  virtual std::uint64_t own_bytes_sent() const = 0;
};

// The trainer's gradient-sync strategy: all three jobs.
class GradSync : public StepSync, public ShardOwnership, public SyncTelemetry {};

// A strategy whose rank owns every parameter of its registry whole (one replica, chapter 4's
// all-reduce): ShardOwnership answered for a replica.
class ReplicatedGradSync : public GradSync {
 public:
  int sharding_stage() const override { return 0; }
  std::vector<OwnedPiece> owned_pieces(const ParamRegistry& params) const override;
  std::vector<Tensor> owned_params(ParamRegistry& params) const override;
  std::vector<Tensor> owned_grads(ParamRegistry& params) const override;
  std::vector<bool> owned_weight_decay(const ParamRegistry& params) const override;
  std::vector<bool> norm_counted(const ParamRegistry& params, const GridCoord& at) const override;
  double counted_sum_of_squares(std::span<const Tensor> grads32,
                                const std::vector<bool>& counted) const override;
  void gather_params() override {}
  std::vector<Tensor> whole_params(const ParamRegistry& params,
                                   std::span<const Tensor> owned) const override;
};

// One replica (dp = 1): the gradients the backward accumulated are the step's. `why`, when
// given, says in the log why there is one replica (chapter 8's factory: a ZeRO stage with dp 1
// runs as this, stage 0, and says so).
class LocalGradients final : public ReplicatedGradSync {
 public:
  explicit LocalGradients(std::string why = {}) : why_(std::move(why)) {}
  std::string describe() const override;
  bool averages() const override { return false; }
  void begin_step() override {}
  void last_backward_starts(int) override {}
  void grad_ready(std::size_t) override {}
  double finish() override { return 0.0; }
  double take_comm_seconds() override { return 0.0; }
  std::vector<TraceSpan> take_spans() override { return {}; }
  std::uint64_t own_bytes_sent() const override { return 0; }

 private:
  std::string why_;
};

}  // namespace mixpar
