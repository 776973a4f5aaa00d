#include "context_parallel_sync.h"

#include <chrono>
#include <string>

#include "ops/elementwise.h"
#include "parallel/replicas.h"

namespace mixpar::ch08 {

TokenBatch cp_rows(const TokenBatch& b, const std::vector<std::int64_t>& positions) {
  TokenBatch out = b;
  out.T = static_cast<std::int64_t>(positions.size());
  out.inputs.clear();
  out.targets.clear();
  for (std::int64_t r = 0; r < b.B; ++r) {
    for (std::int64_t p : positions) {
      out.inputs.push_back(b.inputs[static_cast<std::size_t>(r * b.T + p)]);
      out.targets.push_back(b.targets[static_cast<std::size_t>(r * b.T + p)]);
    }
  }
  return out;
}

CpGradSync::CpGradSync(std::unique_ptr<GradSync> inner, Communicator& cp, ParamRegistry& params)
    : inner_(std::move(inner)), cp_(cp), params_(params), reduced_(params.entries().size()) {
  // ZeRO-3 has released the whole working copy; otherwise the cp ranks must agree now.
  if (params_.flat_params().resident()) verify_replicas(cp_, params_.flat_params());
}

std::string CpGradSync::describe() const {
  return "context parallel over " + std::to_string(cp_.size()) +
         " ranks (gradients summed over cp, then " + inner_->describe() + ")";
}

void CpGradSync::begin_step() {
  in_last_backward_ = false;
  reduced_.assign(reduced_.size(), false);
  inner_->begin_step();
}

void CpGradSync::last_backward_starts(int micro_batches) {
  in_last_backward_ = true;
  inner_->last_backward_starts(micro_batches);
}

void CpGradSync::reduce(std::size_t entry) {
  if (reduced_[entry]) return;
  const auto t0 = std::chrono::steady_clock::now();
  Tensor g = params_.entries()[entry].grad;
  // Each cp rank's gradient is its rows' mean's, cp times its share of the sequence's: divided
  // first, so that the sum is the one-device gradient and no larger (an fp16 gradient near the
  // top of its range must not overflow in the sum; 1/cp is exact for a power of two).
  ops::scale(g, 1.0 / cp_.size());
  cp_.all_reduce(g);
  reduced_[entry] = true;
  comm_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void CpGradSync::grad_ready(std::size_t entry) {
  if (!in_last_backward_) return;
  reduce(entry);
  inner_->grad_ready(entry);
}

double CpGradSync::finish() {
  // Entries the backward did not report (an interleaved pipeline's later chunks): now, in
  // registry order on every cp rank, before the dp sync reads them.
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t e = 0; e < reduced_.size(); ++e) reduce(e);
  const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  in_last_backward_ = false;
  return mine + inner_->finish();
}

double CpGradSync::take_comm_seconds() {
  const double s = comm_s_;
  comm_s_ = 0;
  return s + inner_->take_comm_seconds();
}

std::uint64_t CpGradSync::own_bytes_sent() const { return inner_->own_bytes_sent(); }

std::vector<bool> CpGradSync::norm_counted(const ParamRegistry& params, const GridCoord& at) const {
  std::vector<bool> counted = inner_->norm_counted(params, at);
  if (at.cp != 0) counted.assign(counted.size(), false);
  return counted;
}

}  // namespace mixpar::ch08
