// GradSync: the seam between a training step and whatever makes the data-parallel replicas'
// gradients agree. The step calls it in four places:
//
//   begin_step()                 before the step's first forward
//   last_backward_starts(m)      the step's last backward (its m-th) is about to run
//   grad_ready(entry)            during that backward, as each parameter's gradient is final
//   finish()                     after it: every gradient this rank holds is synchronised
//
// Chapter 4's bucketed all-reduce (ch04_ddp/bucketed_allreduce.h) is one implementation:
// buckets leave during the last backward and finish() waits for the stragglers. Chapter 5's
// ZeRO stages reduce-scatter instead. With one replica nothing needs to agree (LocalGradients).
//
// A sync also owns what it shards (as torchtitan's FSDP and picotron's wrappers do): which
// pieces of which parameters this rank's optimizer steps and checkpoints, how the step's
// count-once norm is summed, and how the stepped pieces get back into every replica's working
// copy. A replicated sync (one replica, chapter 4) owns every parameter whole and keeps the
// defaults below; chapter 5's ZeRO overrides them. The trainer asks these questions and never
// asks which implementation it holds: it is handed one (ch08_full_3d/strategy_factory.cpp,
// the one place a chapter plugs its own in).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
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

class GradSync {
 public:
  virtual ~GradSync() = default;

  // A phrase for the pre-flight summary: how the gradients meet.
  virtual std::string describe() const = 0;
  // true: finish() leaves the mean over the dp ranks and the step's micro-batches (the
  // implementation divides the sum), so the backward's seed is the loss scale alone. false:
  // the gradients are used as the backward left them, and the caller divides the seed by the
  // number of micro-batches.
  virtual bool averages() const = 0;

  virtual void begin_step() {}
  virtual void last_backward_starts(int micro_batches) = 0;
  // On the backward's thread; ignored outside the last backward of a step.
  virtual void grad_ready(std::size_t entry) = 0;
  // Blocks until this rank's gradients are synchronised; returns the seconds it waited.
  virtual double finish() = 0;

  // Busy seconds of communication and its trace spans since the last call.
  virtual double take_comm_seconds() { return 0; }
  virtual std::vector<TraceSpan> take_spans() { return {}; }
  // Bytes sent so far on communicators the sync made for itself (chapter 5's ZeRO-3 gathers
  // the parameters on a group split from dp): the trainer counts them with the dp group's.
  virtual std::uint64_t own_bytes_sent() const { return 0; }

  // ---- What this rank owns. `params`: the registry the sync was built on (this rank's
  // model, or all its model chunks). The defaults are a replica's: every entry, whole.

  // How much of the training state is split over dp, in ZeRO's numbering (Rajbhandari et al.
  // 2020): 0 nothing (every replica holds and steps everything), 1 the optimizer state, 2 and
  // the gradients, 3 and the parameters. A checkpoint records it: with 1 or more every dp
  // rank writes the pieces it owns.
  virtual int sharding_stage() const { return 0; }
  // The pieces the optimizer steps, in the order of owned_params() and owned_grads().
  virtual std::vector<OwnedPiece> owned_pieces(const ParamRegistry& params) const;
  // Views of the working copy and of the synchronised gradients at those pieces: what the
  // optimizer is built on (its masters and moments then cover those pieces only).
  virtual std::vector<Tensor> owned_params(ParamRegistry& params) const;
  virtual std::vector<Tensor> owned_grads(ParamRegistry& params) const;
  // Per piece: its parameter's weight-decay flag (GPT-2's two parameter groups).
  virtual std::vector<bool> owned_weight_decay(const ParamRegistry& params) const;
  // Per entry: whether this rank counts it in the global norm (parallel/count_once.h; a
  // replica counts only on dp rank 0, a shard owner counts its own pieces on any dp rank).
  virtual std::vector<bool> norm_counted(const ParamRegistry& params, const GridCoord& at) const;
  // This rank's share of the norm's sum of squares over the owned pieces' FP32 gradients
  // (collective over dp for a sharding sync): summed over the world it is the one-device sum.
  virtual double counted_sum_of_squares(std::span<const Tensor> grads32,
                                        const std::vector<bool>& counted) const;
  // After the optimizer stepped the owned pieces (their rounded values already written into
  // owned_params()): every replica's working copy made whole again. Collective over dp for a
  // sharding sync; a replica has nothing to do.
  virtual void gather_params() {}
  // Collective over dp for a sharding sync: one tensor per entry, in the held shape, from
  // every rank's `owned` tensors (one per owned piece, e.g. the FP32 masters). A replica's
  // owned tensors are its entries already.
  virtual std::vector<Tensor> whole_params(const ParamRegistry& params,
                                           std::span<const Tensor> owned) const;
  // true when finish() has already summed the tied embedding's two pipeline copies (their
  // sum must precede a reduce-scatter); otherwise the schedule sums them after the sync.
  virtual bool sums_tied_copies() const { return false; }
};

// One replica (dp = 1): the gradients the backward accumulated are the step's.
class LocalGradients final : public GradSync {
 public:
  std::string describe() const override { return "one replica: nothing to synchronise"; }
  bool averages() const override { return false; }
  void last_backward_starts(int) override {}
  void grad_ready(std::size_t) override {}
  double finish() override { return 0.0; }
};

}  // namespace mixpar
