// Context parallelism in the trainer (chapter 6, part 2): the cp ranks of one replica hold the
// same parameters and read the same samples, each its own rows of every sequence. So
//   - each rank's micro-batch is its rows (cp_rows: the zigzag positions of the batch), and
//   - each gradient is only its rows' share: before the data-parallel sync sees it, it is
//     divided by cp and summed over the cp group (CpGradSync), which with the dp sync's mean
//     is the mean over dp x cp -- the one-device gradient. ZeRO then shards over dp as
//     before (every cp rank holds the same shards), so checkpoints are unchanged: cp shards no
//     parameter, and a run resumes on any cp.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "io/token_loader.h"
#include "model/gpt_params.h"
#include "parallel/grad_sync.h"

namespace mixpar::ch08 {

// Rows `positions` of every sequence of b ([B, T] -> [B, positions.size()]).
TokenBatch cp_rows(const TokenBatch& b, const std::vector<std::int64_t>& positions);

class CpGradSync final : public GradSync {
 public:
  // inner: the dp sync (DDP, ZeRO or one replica); params: the registry both are built on.
  // Checks that the cp ranks start from the same weights (collective over cp).
  CpGradSync(std::unique_ptr<GradSync> inner, Communicator& cp, ParamRegistry& params);

  std::string describe() const override;
  bool averages() const override { return inner_->averages(); }
  void begin_step() override;
  void last_backward_starts(int micro_batches) override;
  void grad_ready(std::size_t entry) override;
  double finish() override;
  double take_comm_seconds() override;
  std::vector<TraceSpan> take_spans() override { return inner_->take_spans(); }
  std::uint64_t own_bytes_sent() const override;

  int sharding_stage() const override { return inner_->sharding_stage(); }
  std::vector<OwnedPiece> owned_pieces(const ParamRegistry& params) const override {
    return inner_->owned_pieces(params);
  }
  std::vector<Tensor> owned_params(ParamRegistry& params) const override {
    return inner_->owned_params(params);
  }
  std::vector<Tensor> owned_grads(ParamRegistry& params) const override {
    return inner_->owned_grads(params);
  }
  std::vector<bool> owned_weight_decay(const ParamRegistry& params) const override {
    return inner_->owned_weight_decay(params);
  }
  // Counted once: on cp rank 0 only (a ZeRO shard is held by every cp rank alike).
  std::vector<bool> norm_counted(const ParamRegistry& params, const GridCoord& at) const override;
  double counted_sum_of_squares(std::span<const Tensor> grads32,
                                const std::vector<bool>& counted) const override {
    return inner_->counted_sum_of_squares(grads32, counted);
  }
  void gather_params() override { inner_->gather_params(); }
  std::vector<Tensor> whole_params(const ParamRegistry& params,
                                   std::span<const Tensor> owned) const override {
    return inner_->whole_params(params, owned);
  }
  bool sums_tied_copies() const override { return inner_->sums_tied_copies(); }

 private:
  void reduce(std::size_t entry);  // / cp, then summed over cp

  std::unique_ptr<GradSync> inner_;
  Communicator& cp_;
  ParamRegistry& params_;
  bool in_last_backward_ = false;
  std::vector<bool> reduced_;  // by entry, this step
  double comm_s_ = 0;
};

}  // namespace mixpar::ch08
