#include "ch06_tensor_parallel/tp_collectives.h"

#include <chrono>
#include <memory>
#include <utility>

#include "ch06_tensor_parallel/column_parallel_linear.h"
#include "ch06_tensor_parallel/conjugate_ops.h"
#include "ch06_tensor_parallel/row_parallel_linear.h"

namespace mixpar::ch06 {

std::unique_ptr<TpColumnLinear> TpCollectives::column_parallel(const LinearParams& shard) {
  return std::make_unique<ColumnParallelLinear>(*this, shard.w, shard.b, shard.dw, shard.db,
                                                shard.site);
}

std::unique_ptr<TpRowLinear> TpCollectives::row_parallel(const LinearParams& shard) {
  return std::make_unique<RowParallelLinear>(*this, shard.w, shard.b, shard.dw, shard.db,
                                             shard.site);
}

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

void TpCollectives::keep_own_rows(const Tensor& full, Tensor& rows) const {
  rows.copy_from(full.flat_slice(rank() * rows.numel(), rows.numel()));
}

void TpCollectives::f_backward(Tensor& input_grad) {
  // The bug and the probe: each rank keeps its partial gradient.
  if (bugs_.skip_f_backward || bugs_.skip_block_f_backward) return;
  counted("block backward", input_grad, [&] { ch06::f_backward(tp_, input_grad); });
}

void TpCollectives::g_forward(Tensor& output) {
  if (bugs_.skip_g_forward) return;  // the probe: each rank keeps its partial product
  counted("block forward", output, [&] { ch06::g_forward(tp_, output); });
}

void TpCollectives::f_bar_forward(const Tensor& rows, Tensor& full, const char* region) {
  counted(region, full, [&] { ch06::f_bar_forward(tp_, rows, full); });
}

void TpCollectives::f_bar_backward(const Tensor& full_grad, Tensor& rows_grad) {
  if (bugs_.skip_block_f_backward) {
    keep_own_rows(full_grad, rows_grad);
    return;
  }
  counted("block backward", full_grad, [&] { ch06::f_bar_backward(tp_, full_grad, rows_grad); });
}

void TpCollectives::g_bar_forward(const Tensor& full, Tensor& rows) {
  if (bugs_.skip_g_forward) {
    keep_own_rows(full, rows);
    return;
  }
  counted("block forward", full, [&] { ch06::g_bar_forward(tp_, full, rows); });
}

void TpCollectives::g_bar_backward(const Tensor& rows_grad, Tensor& full_grad) {
  counted("block backward", full_grad, [&] { ch06::g_bar_backward(tp_, rows_grad, full_grad); });
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
