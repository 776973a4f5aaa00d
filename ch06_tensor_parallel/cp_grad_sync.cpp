#include "ch06_tensor_parallel/cp_grad_sync.h"

#include <chrono>
#include <string>
#include <utility>

#include "ops/elementwise.h"
#include "parallel/replicas.h"

namespace mixpar::ch06 {

void sum_cp_shares(Communicator& cp, Tensor& grad) {
  // Each cp rank's gradient is its rows' mean's, cp times its share of the sequence's: divided
  // first, so that the sum is the one-device gradient and no larger (an fp16 gradient near the
  // top of its range must not overflow in the sum; 1/cp is exact for a power of two).
  ops::scale(grad, 1.0 / cp.size());
  cp.all_reduce(grad);
}

CpGradSync::CpGradSync(std::unique_ptr<GradSync> inner, Communicator& cp, ParamRegistry& params)
    : ForwardingGradSync(std::move(inner)),
      cp_(cp),
      params_(params),
      reduced_(params.entries().size()) {
  // ZeRO-3 has released the whole working copy; otherwise the cp ranks must agree now.
  if (params_.flat_params().resident()) verify_replicas(cp_, params_.flat_params());
}

std::string CpGradSync::describe() const {
  return "context parallel over " + std::to_string(cp_.size()) +
         " ranks (gradients summed over cp, then " + inner().describe() + ")";
}

void CpGradSync::begin_step() {
  in_last_backward_ = false;
  reduced_.assign(reduced_.size(), false);
  inner().begin_step();
}

void CpGradSync::last_backward_starts(int micro_batches) {
  in_last_backward_ = true;
  inner().last_backward_starts(micro_batches);
}

void CpGradSync::reduce(std::size_t entry) {
  if (reduced_[entry]) return;
  const auto t0 = std::chrono::steady_clock::now();
  Tensor g = params_.entries()[entry].grad;
  sum_cp_shares(cp_, g);
  reduced_[entry] = true;
  comm_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void CpGradSync::grad_ready(std::size_t entry) {
  if (!in_last_backward_) return;
  reduce(entry);
  inner().grad_ready(entry);
}

double CpGradSync::finish() {
  // Entries the backward did not report (an interleaved pipeline's later chunks): now, in
  // registry order on every cp rank, before the dp sync reads them.
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t e = 0; e < reduced_.size(); ++e) reduce(e);
  const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  in_last_backward_ = false;
  return mine + inner().finish();
}

double CpGradSync::take_comm_seconds() {
  return std::exchange(comm_s_, 0.0) + inner().take_comm_seconds();
}

std::vector<bool> CpGradSync::norm_counted(const ParamRegistry& params, const GridCoord& at) const {
  std::vector<bool> counted = inner().norm_counted(params, at);
  if (at.cp != 0) counted.assign(counted.size(), false);
  return counted;
}

}  // namespace mixpar::ch06
