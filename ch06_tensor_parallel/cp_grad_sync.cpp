#include "ch06_tensor_parallel/cp_grad_sync.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
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
  batch_ = false;
  ready_.clear();
  reduced_.assign(reduced_.size(), false);
  inner().begin_step();
}

void CpGradSync::last_backward_starts(int micro_batches) {
  in_last_backward_ = true;
  batch_ = batches();
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

bool CpGradSync::batches() const {
  const Tensor& flat = params_.flat_grads();
  if (!flat.resident()) return false;
  const auto* base = static_cast<const std::byte*>(flat.data());
  for (const ParamEntry& e : params_.entries()) {
    const auto* at = base + static_cast<std::size_t>(e.offset) * dtype_size(flat.dtype());
    if (e.grad.numel() > 0 && (e.grad.dtype() != flat.dtype() || e.grad.data() != at)) {
      return false;
    }
  }
  return true;
}

void CpGradSync::reduce_in_runs(const std::vector<std::size_t>& entries) {
  // Each entry's elements are divided and summed exactly as sum_cp_shares does entry by entry
  // (both elementwise, and the all-reduce's order over ranks is fixed), so the bits are the
  // same; a run of entries adjacent in the flat buffer is one call instead of one per entry.
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::size_t> by_offset;
  for (const std::size_t e : entries) {
    if (!reduced_[e] && params_.entries()[e].grad.numel() > 0) by_offset.push_back(e);
    reduced_[e] = true;
  }
  const auto& es = params_.entries();
  std::sort(by_offset.begin(), by_offset.end(),
            [&](std::size_t a, std::size_t b) { return es[a].offset < es[b].offset; });
  for (std::size_t i = 0; i < by_offset.size();) {
    const std::int64_t begin = es[by_offset[i]].offset;
    std::int64_t end = begin + es[by_offset[i]].grad.numel();
    std::size_t j = i + 1;
    for (; j < by_offset.size() && es[by_offset[j]].offset == end; ++j) {
      end += es[by_offset[j]].grad.numel();
    }
    Tensor run = params_.flat_grads().flat_slice(begin, end - begin);
    sum_cp_shares(cp_, run);
    i = j;
  }
  comm_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void CpGradSync::grad_ready(std::size_t entry) {
  if (!in_last_backward_) return;
  if (batch_) {
    ready_.push_back(entry);  // summed with the others in finish(), then handed on
    return;
  }
  reduce(entry);
  inner().grad_ready(entry);
}

double CpGradSync::finish() {
  const auto t0 = std::chrono::steady_clock::now();
  // The entries the last backward reported, then those it did not (an interleaved
  // pipeline's later chunks): summed over cp before the dp sync reads them, which hears of
  // the reported ones in the backward's order.
  std::vector<std::size_t> all = ready_;
  for (std::size_t e = 0; e < reduced_.size(); ++e) all.push_back(e);
  if (batch_) {
    reduce_in_runs(all);
  } else {
    for (const std::size_t e : all) reduce(e);
  }
  for (const std::size_t e : ready_) inner().grad_ready(e);
  ready_.clear();
  batch_ = false;
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
