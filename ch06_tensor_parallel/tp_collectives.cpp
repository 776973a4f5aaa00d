#include "ch06_tensor_parallel/tp_collectives.h"

#include <chrono>
#include <utility>

#include "ch06_tensor_parallel/conjugate_ops.h"

namespace mixpar::ch06 {

template <class Call>
void TpCollectives::counted(const char* region, const Tensor& t, Call call) {
  const std::size_t before = tp_.traffic().total().bytes_sent;
  const auto t0 = std::chrono::steady_clock::now();
  call();
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  TpRegionTraffic& r = traffic_[region];
  ++r.calls;
  r.elements += t.numel();
  r.bytes_sent += tp_.traffic().total().bytes_sent - before;
}

void TpCollectives::f_backward(Tensor& input_grad) {
  if (bugs_.skip_f_backward) return;  // the bug: each rank keeps its partial gradient
  counted("block backward", input_grad, [&] { ch06::f_backward(tp_, input_grad); });
}

void TpCollectives::g_forward(Tensor& output) {
  counted("block forward", output, [&] { ch06::g_forward(tp_, output); });
}

void TpCollectives::embedding_sum(Tensor& embedded) {
  counted("embedding", embedded, [&] { tp_.all_reduce(embedded, ReduceOp::kSum); });
}

void TpCollectives::loss_max(Tensor& row_max) {
  counted("loss", row_max, [&] { tp_.all_reduce(row_max, ReduceOp::kMax); });
}

void TpCollectives::loss_sum(Tensor& per_row) {
  counted("loss", per_row, [&] { tp_.all_reduce(per_row, ReduceOp::kSum); });
}

void TpCollectives::head_backward(Tensor& input_grad) {
  if (bugs_.skip_f_backward) return;
  counted("head backward", input_grad, [&] { ch06::f_backward(tp_, input_grad); });
}

void TpCollectives::all_gather_rows(const Tensor& part, Tensor& full, const char* region) {
  counted(region, full, [&] { tp_.all_gather(part, full); });
}

void TpCollectives::reduce_scatter_rows(const Tensor& full, Tensor& part, const char* region) {
  counted(region, full, [&] { tp_.reduce_scatter(full, part, ReduceOp::kSum); });
}

void TpCollectives::sum_replicated_grads(Tensor& grads) {
  if (bugs_.unsummed_replicated) return;  // the bug: each replica keeps its rows' share
  counted("replicated gradients", grads, [&] { tp_.all_reduce(grads, ReduceOp::kSum); });
}

double TpCollectives::take_seconds() { return std::exchange(seconds_, 0.0); }

}  // namespace mixpar::ch06
