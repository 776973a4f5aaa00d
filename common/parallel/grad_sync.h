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
// The trainer names no implementation: it is handed one (ch08_full_3d/trainer.cpp,
// make_grad_sync, the one place a chapter plugs its own in).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "trace/chrome_trace.h"

namespace mixpar {

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
