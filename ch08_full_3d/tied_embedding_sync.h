// The tied embedding under ZeRO and pipelines. With pp > 1 the tied wte lives twice: on the
// first stage (the token embedding) and on the last (the head), each copy holding only its own
// half of the gradient. Under chapter 4's all-reduce the two halves can be summed after the
// sync (ch07's PipelineSchedule::after_sync): every replica then holds the whole averaged
// gradient. ZeRO's reduce-scatter leaves each dp rank only its shard of the buffer, and the two
// stages cut wte at different flat offsets, so the halves must meet BEFORE it (Megatron-LM's
// order too: `_allreduce_embedding_grads` runs on the full gradient before the optimizer's
// reduce-scatter of the distributed optimizer).
//
// TiedEmbeddingFirst is a GradSync decorator: it holds back the wte's "gradient ready" during
// the last backward, and in finish() sums the wte gradient over the grid's embedding group
// (this rank's first- and last-stage copies at the same dp and tp coordinates), then releases
// it to the inner sync. The wte's bucket therefore leaves after the backward: on the last
// stage, whose head gradient is final first, the buckets after it wait for it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/gpt_params.h"
#include "parallel/grad_sync.h"

namespace mixpar::ch08 {

class TiedEmbeddingFirst final : public GradSync {
 public:
  // registry must hold "wte.weight"; embedding: the grid's embedding group (size > 1);
  // trace_rank: the rank its trace spans are drawn on.
  TiedEmbeddingFirst(std::unique_ptr<GradSync> inner, ParamRegistry& registry,
                     Communicator& embedding, int trace_rank);

  std::string describe() const override;
  bool averages() const override { return inner_->averages(); }
  void begin_step() override { inner_->begin_step(); }
  void last_backward_starts(int micro_batches) override;
  void grad_ready(std::size_t entry) override;
  double finish() override;
  double take_comm_seconds() override;
  std::vector<TraceSpan> take_spans() override;
  std::uint64_t own_bytes_sent() const override { return inner_->own_bytes_sent(); }

  // What the inner sync owns is what this one owns; it only reorders the wte's reduction.
  int sharding_stage() const override { return inner_->sharding_stage(); }
  std::vector<OwnedPiece> owned_pieces(const ParamRegistry& p) const override {
    return inner_->owned_pieces(p);
  }
  std::vector<Tensor> owned_params(ParamRegistry& p) const override { return inner_->owned_params(p); }
  std::vector<Tensor> owned_grads(ParamRegistry& p) const override { return inner_->owned_grads(p); }
  std::vector<bool> owned_weight_decay(const ParamRegistry& p) const override {
    return inner_->owned_weight_decay(p);
  }
  std::vector<bool> norm_counted(const ParamRegistry& p, const GridCoord& at) const override {
    return inner_->norm_counted(p, at);
  }
  double counted_sum_of_squares(std::span<const Tensor> grads32,
                                const std::vector<bool>& counted) const override {
    return inner_->counted_sum_of_squares(grads32, counted);
  }
  void gather_params() override { inner_->gather_params(); }
  std::vector<Tensor> whole_params(const ParamRegistry& p,
                                   std::span<const Tensor> owned) const override {
    return inner_->whole_params(p, owned);
  }
  bool sums_tied_copies() const override { return true; }

 private:
  std::unique_ptr<GradSync> inner_;
  ParamRegistry& registry_;
  Communicator& embedding_;
  std::size_t wte_;
  int trace_rank_;
  double seconds_ = 0;
  std::vector<TraceSpan> spans_;
};

}  // namespace mixpar::ch08
