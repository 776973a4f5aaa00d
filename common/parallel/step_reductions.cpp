#include "parallel/step_reductions.h"

#include <cmath>
#include <utility>

#include "comm/control.h"

namespace mixpar {
namespace {

// One value summed over `group`; f64 so sums of f64 inputs lose nothing.
double all_reduce_sum(Communicator& group, double v) {
  Tensor t = Tensor::empty({1}, DType::kF64, MemCategory::kCommBuffers);
  t.data_as<double>()[0] = v;
  group.all_reduce(t, ReduceOp::kSum);
  return t.data_as<double>()[0];
}

}  // namespace

void StepReductions::timed(const char* name, double start_us) {
  const double dur = trace_now_us() - start_us;
  seconds_ += dur * 1e-6;
  spans_.push_back({name, "exposed", grid_->coord().rank, 0, start_us, dur});
}

double StepReductions::loss(double local) {
  if (grid_ == nullptr) return local;
  const double t0 = trace_now_us();
  // Off the last stage the loss is unknown: 0, so that the sum along the pipeline is the
  // last stage's mean.
  const bool last_stage =
      loss_pp_rank_ < 0 ? grid_->is_last_stage() : grid_->coord().pp == loss_pp_rank_;
  double mean = last_stage ? local : 0.0;
  // Over dp x cp (the dp group when cp == 1): each cp rank's loss is its rows' mean.
  if (grid_->dp_cp().size() > 1) {
    mean = all_reduce_sum(grid_->dp_cp(), mean) / grid_->dp_cp().size();
  }
  if (grid_->pp().size() > 1) mean = all_reduce_sum(grid_->pp(), mean);
  timed("loss average", t0);
  return mean;
}

bool StepReductions::found_inf(bool local) {
  if (grid_ == nullptr) return local;
  const double t0 = trace_now_us();
  const bool any = any_true(grid_->world(), local);  // a boolean vote: one byte a rank
  timed("found-inf vote", t0);
  return any;
}

double StepReductions::grad_norm(double local_sum_sq) {
  if (grid_ == nullptr) return std::sqrt(local_sum_sq);
  const double t0 = trace_now_us();
  const double total = all_reduce_sum(grid_->world(), local_sum_sq);
  timed("grad-norm sum", t0);
  return std::sqrt(total);
}

void StepReductions::add_times_to(StepTimes& t) {
  t.comm_s += seconds_;
  t.exposed_s += seconds_;
  seconds_ = 0;
}

std::vector<TraceSpan> StepReductions::take_spans() { return std::exchange(spans_, {}); }

}  // namespace mixpar
