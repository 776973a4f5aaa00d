// DistributedDataParallel: the constructor's replica sync, the backward wrapper that opens and
// closes the reducer, and the small collectives a training loop needs. The model's gradient-
// ready hook is used when GptModel has one (detected at compile time), so this file builds and
// works, without overlap, against a model that does not.
#include "ddp.h"

#include <cstring>
#include <functional>
#include <utility>

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

std::string hex(std::uint64_t h) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// "rank 1", "ranks 1, 3"
std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

}  // namespace

bool model_reports_grad_ready() { return ReportsGradReady<GptModel>; }

std::uint64_t weights_hash(const Tensor& t) {
  const Tensor host = t.is_cpu() ? t : t.to_device(Device::kCPU);
  const auto* p = static_cast<const unsigned char*>(host.data());
  const std::size_t n = host.nbytes();
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a offset basis and prime, on 8-byte words
  constexpr std::uint64_t kPrime = 0x100000001b3ull;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * kPrime;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * kPrime;
  return h;
}

DistributedDataParallel::DistributedDataParallel(GptModel& model, Communicator& comm,
                                                 DdpConfig config)
    : model_(model), comm_(comm), config_(config) {
  if (config_.init == InitSync::kBroadcast) {
    Tensor params = model_.registry().flat_params();  // a handle: broadcast writes the weights
    comm_.broadcast(params, 0);
  }
  reducer_ = std::make_unique<BucketReducer>(comm_, model_.registry(), config_.reducer);
  if (config_.check_at_init) verify_replicas();
  // Last: a constructor that throws must not leave the model calling into a dead object.
  hooked_ = set_hook(model_, [this](std::size_t entry) {
    if (syncing_) reducer_->mark_ready(entry);
  });
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
  if (sync) reducer_->begin(static_cast<double>(comm_.size()) * micro_steps_);
  syncing_ = sync;
  const double t0 = trace_now_us();
  try {
    model_.backward(loss_scale, accumulate);
  } catch (...) {
    syncing_ = false;
    throw;
  }
  syncing_ = false;
  times_.compute_s += seconds_since(t0);
  span("backward", "compute", t0);
  if (!sync) return;
  const double w0 = trace_now_us();
  reducer_->finish();  // marks what the model did not report, waits for the last buckets
  times_.exposed_s += seconds_since(w0);
  span("wait for gradients", "exposed", w0);
  micro_steps_ = 0;
}

void DistributedDataParallel::reduce_gradients() {
  if (micro_steps_ == 0) {
    throw std::logic_error("DistributedDataParallel::reduce_gradients: no backward since the "
                           "last synchronisation");
  }
  reducer_->begin(static_cast<double>(comm_.size()) * micro_steps_);
  const double w0 = trace_now_us();
  reducer_->finish();
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
  Tensor v = Tensor::empty({1}, DType::kF32, MemCategory::kCommBuffers);
  v.data_as<float>()[0] = local_found_inf ? 1.0f : 0.0f;
  comm_.all_reduce(v, ReduceOp::kMax);
  const double s = seconds_since(t0);
  times_.comm_s += s;
  times_.exposed_s += s;
  span("found-inf vote", "exposed", t0);
  return v.data_as<float>()[0] != 0.0f;
}

ReplicaCheck DistributedDataParallel::check_replicas() {
  const std::uint64_t h = weights_hash(model_.registry().flat_params());
  const int n = comm_.size();
  Tensor mine = Tensor::empty({1}, DType::kF64, MemCategory::kCommBuffers);
  Tensor all = Tensor::empty({n}, DType::kF64, MemCategory::kCommBuffers);
  std::memcpy(mine.data(), &h, sizeof h);  // the hash's bits travel in an 8-byte element
  comm_.all_gather(mine, all);
  ReplicaCheck check;
  check.hashes.resize(static_cast<std::size_t>(n));
  std::memcpy(check.hashes.data(), all.data(), sizeof h * static_cast<std::size_t>(n));
  std::vector<int> differ;
  for (int r = 1; r < n; ++r) {
    if (check.hashes[std::size_t(r)] != check.hashes[0]) differ.push_back(r);
  }
  check.ok = differ.empty();
  if (!check.ok) {
    check.message = "replica check: " + rank_list(differ) +
                    " hold weights different from rank 0's (hash " + hex(check.hashes[0]) +
                    " on rank 0, " + hex(check.hashes[std::size_t(differ[0])]) + " on rank " +
                    std::to_string(differ[0]) + ")";
  }
  return check;
}

void DistributedDataParallel::verify_replicas() {
  const ReplicaCheck c = check_replicas();
  if (!c.ok) throw ReplicaMismatch(c.message);
}

StepTimes DistributedDataParallel::take_step_times() {
  StepTimes t = std::exchange(times_, {});
  t.comm_s += reducer_->take_comm_seconds();
  return t;
}

std::vector<TraceSpan> DistributedDataParallel::take_spans() {
  std::vector<TraceSpan> all = std::exchange(spans_, {});
  for (TraceSpan& s : reducer_->take_spans()) all.push_back(std::move(s));
  return all;
}

}  // namespace mixpar::ch04
