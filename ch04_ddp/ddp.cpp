// DistributedDataParallel: the constructor's replica sync, the backward wrapper that opens and
// closes the reducer, and the small collectives a training loop needs. The model's gradient-
// ready hook is used when GptModel has one (detected at compile time), so this file builds and
// works, without overlap, against a model that does not.
#include "ddp.h"

#include <functional>
#include <utility>

#include "comm/control.h"

namespace mixpar::ch04 {
namespace {

using GradReadyHook = std::function<void(std::size_t)>;

template <class M>
concept ReportsGradReady = requires(M& m, GradReadyHook hook) { m.set_grad_ready_hook(hook); };

// Installs hook (or removes it, when empty) if the model has the hook; false otherwise.
template <class M> bool set_hook(M& model, GradReadyHook hook) {
  if constexpr (ReportsGradReady<M>) {
    model.set_grad_ready_hook(std::move(hook));
    return true;
  } else {
    (void)model;
    (void)hook;
    return false;
  }
}

double seconds_since(double start_us) { return (trace_now_us() - start_us) * 1e-6; }

}  // namespace

bool model_reports_grad_ready() { return ReportsGradReady<GptModel>; }

DistributedDataParallel::DistributedDataParallel(GptModel& model, Communicator& comm,
                                                 DdpConfig config)
    : model_(model), comm_(comm), config_(config) {
  sync_initial_weights(comm_, model_.registry().flat_params(), config_.init);
  sync_ = std::make_unique<BucketedAllReduce>(comm_, model_.registry(), config_.reducer,
                                              model_reports_grad_ready());
  if (config_.check_at_init) verify_replicas();
  // Last: a constructor that throws must not leave the model calling into a dead object.
  hooked_ = set_hook(model_, [this](std::size_t entry) { sync_->grad_ready(entry); });
}

DistributedDataParallel::~DistributedDataParallel() {
  if (hooked_) set_hook(model_, GradReadyHook());
}

void DistributedDataParallel::span(const char* name, const char* cat, double start_us) {
  spans_.push_back({name, cat, comm_.rank(), 0, start_us, trace_now_us() - start_us});
}

double DistributedDataParallel::forward(std::span<const std::int32_t> tokens,
                                        std::span<const std::int32_t> targets, std::int64_t B,
                                        std::int64_t T) {
  const double t0 = trace_now_us();
  const double loss = model_.forward(tokens, targets, B, T);
  times_.compute_s += seconds_since(t0);
  span("forward", "compute", t0);
  return loss;
}

void DistributedDataParallel::backward(float loss_scale, bool sync) {
  const bool accumulate = micro_steps_ > 0;
  ++micro_steps_;
  // Outside a synchronising backward the sync ignores the model's ready calls.
  if (sync) sync_->last_backward_starts(micro_steps_);
  const double t0 = trace_now_us();
  model_.backward(loss_scale, accumulate);
  times_.compute_s += seconds_since(t0);
  span("backward", "compute", t0);
  if (!sync) return;
  const double w0 = trace_now_us();
  sync_->finish();  // marks what the model did not report, waits for the last buckets
  times_.exposed_s += seconds_since(w0);
  span("wait for gradients", "exposed", w0);
  micro_steps_ = 0;
}

void DistributedDataParallel::reduce_gradients() {
  if (micro_steps_ == 0) {
    throw std::logic_error("DistributedDataParallel::reduce_gradients: no backward since the "
                           "last synchronisation");
  }
  sync_->last_backward_starts(micro_steps_);
  const double w0 = trace_now_us();
  sync_->finish();
  times_.exposed_s += seconds_since(w0);
  span("reduce gradients", "exposed", w0);
  micro_steps_ = 0;
}

double DistributedDataParallel::global_mean(double local) {
  const double t0 = trace_now_us();
  Tensor v = Tensor::empty({1}, DType::kF64, MemCategory::kCommBuffers);
  v.data_as<double>()[0] = local;
  comm_.all_reduce(v);
  const double s = seconds_since(t0);
  times_.comm_s += s;
  times_.exposed_s += s;
  return v.data_as<double>()[0] / comm_.size();
}

bool DistributedDataParallel::agree_found_inf(bool local_found_inf) {
  const double t0 = trace_now_us();
  // The step is skipped everywhere unless every rank's gradients are finite.
  const bool all_finite = all_true(comm_, !local_found_inf);
  const double s = seconds_since(t0);
  times_.comm_s += s;
  times_.exposed_s += s;
  span("found-inf vote", "exposed", t0);
  return !all_finite;
}

ReplicaCheck DistributedDataParallel::check_replicas() {
  return mixpar::check_replicas(comm_, model_.registry().flat_params());
}

void DistributedDataParallel::verify_replicas() {
  mixpar::verify_replicas(comm_, model_.registry().flat_params());
}

StepTimes DistributedDataParallel::take_step_times() {
  StepTimes t = std::exchange(times_, {});
  t.comm_s += sync_->take_comm_seconds();
  return t;
}

std::vector<TraceSpan> DistributedDataParallel::take_spans() {
  std::vector<TraceSpan> all = std::exchange(spans_, {});
  for (TraceSpan& s : sync_->take_spans()) all.push_back(std::move(s));
  return all;
}

}  // namespace mixpar::ch04
