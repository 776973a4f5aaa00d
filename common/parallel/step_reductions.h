// The per-step reductions of a parallel run, each over its own group and written once:
//   loss       the mean over the dp replicas (and cp ranks, each its rows') of the last
//              pipeline stage's loss (the stage
//              that computes it), then shared along the pipeline, so every rank logs it;
//   found-inf  any rank of the world: one rank's fp16 overflow skips every rank's step (a
//              rank that stepped while another skipped would part the replicas and scales);
//   grad norm  the sum over the world of each rank's counted squares (count_once.h): every
//              parameter element exactly once, so every rank clips with the same coefficient.
// With no grid (a single device) nothing is sent and each returns its input.
#pragma once

#include <vector>

#include "comm/parallel_grid.h"
#include "parallel/grad_sync.h"
#include "trace/chrome_trace.h"

namespace mixpar {

class StepReductions {
 public:
  StepReductions() = default;  // a single device
  explicit StepReductions(const ParallelGrid* grid) : grid_(grid) {}

  // local: this rank's mean loss over its micro-batches (ignored off the stage that computes
  // it: the last stage, on pp rank p - 1 unless loss_on_pp_rank says another).
  double loss(double local);
  // The pp rank that runs the last stage, where a placement other than one stage per rank puts
  // it elsewhere (chapter 7's V: rank 0).
  void loss_on_pp_rank(int pp_rank) { loss_pp_rank_ = pp_rank; }
  bool found_inf(bool local);
  // local_sum_sq: counted_sum_of_squares of this rank's gradients; returns the global L2 norm.
  double grad_norm(double local_sum_sq);

  // Their communication, all of it exposed (the compute thread waits for each), and spans.
  void add_times_to(StepTimes& t);
  std::vector<TraceSpan> take_spans();

 private:
  void timed(const char* name, double start_us);
  const ParallelGrid* grid_ = nullptr;
  int loss_pp_rank_ = -1;  // -1: the last pp rank
  double seconds_ = 0;
  std::vector<TraceSpan> spans_;
};

}  // namespace mixpar
