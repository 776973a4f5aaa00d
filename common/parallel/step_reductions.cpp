#include "parallel/step_reductions.h"

#include <cmath>
#include <utility>

namespace mixpar {
namespace {

// One value all-reduced over `group`; f64 so sums of f64 inputs lose nothing.
double all_reduce_one(Communicator& group, double v, DType dtype, ReduceOp op) {
  Tensor t = Tensor::empty({1}, dtype, MemCategory::kCommBuffers);
  if (dtype == DType::kF64)
    t.data_as<double>()[0] = v;
  else
    t.data_as<float>()[0] = static_cast<float>(v);
  group.all_reduce(t, op);
  return dtype == DType::kF64 ? t.data_as<double>()[0] : t.data_as<float>()[0];
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
  double mean = grid_->is_last_stage() ? local : 0.0;
  // Over dp x cp (the dp group when cp == 1): each cp rank's loss is its rows' mean.
  if (grid_->dp_cp().size() > 1) {
    mean = all_reduce_one(grid_->dp_cp(), mean, DType::kF64, ReduceOp::kSum) /
           grid_->dp_cp().size();
  }
  if (grid_->pp().size() > 1) mean = all_reduce_one(grid_->pp(), mean, DType::kF64, ReduceOp::kSum);
  timed("loss average", t0);
  return mean;
}

bool StepReductions::found_inf(bool local) {
  if (grid_ == nullptr) return local;
  const double t0 = trace_now_us();
  const bool any =
      all_reduce_one(grid_->world(), local ? 1.0 : 0.0, DType::kF32, ReduceOp::kMax) != 0.0;
  timed("found-inf vote", t0);
  return any;
}

double StepReductions::grad_norm(double local_sum_sq) {
  if (grid_ == nullptr) return std::sqrt(local_sum_sq);
  const double t0 = trace_now_us();
  const double total = all_reduce_one(grid_->world(), local_sum_sq, DType::kF64, ReduceOp::kSum);
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
