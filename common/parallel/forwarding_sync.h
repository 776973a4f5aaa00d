// ForwardingGradSync: the one base of every GradSync decorator (a strategy wrapped around
// another: chapter 6's CpGradSync sums the cp shares before the dp sync, chapter 8's
// TiedEmbeddingFirst sums the tied wte's stage copies before it). It forwards every method of
// StepSync, ShardOwnership and SyncTelemetry to the inner sync; a decorator overrides only
// what it changes. The interfaces' methods are all pure, so a method added to one later does
// not compile here until it is forwarded, and no decorator can leave it unforwarded
// (ForwardingGradSync.ForwardsEveryMethodToTheInnerSync,
// tests/ch08/grad_sync_decorators_test.cpp).
#pragma once

#include <memory>
#include <utility>

#include "parallel/grad_sync.h"

namespace mixpar {

class ForwardingGradSync : public GradSync {
 public:
  explicit ForwardingGradSync(std::unique_ptr<GradSync> inner) : inner_(std::move(inner)) {}

  // StepSync
  bool averages() const override { return inner_->averages(); }
  void begin_step() override { inner_->begin_step(); }
  void last_backward_starts(int micro_batches) override {
    inner_->last_backward_starts(micro_batches);
  }
  void grad_ready(std::size_t entry) override { inner_->grad_ready(entry); }
  double finish() override { return inner_->finish(); }

  // ShardOwnership
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
  std::vector<bool> norm_counted(const ParamRegistry& params, const GridCoord& at) const override {
    return inner_->norm_counted(params, at);
  }
  double counted_sum_of_squares(std::span<const Tensor> grads32,
                                const std::vector<bool>& counted) const override {
    return inner_->counted_sum_of_squares(grads32, counted);
  }
  void gather_params() override { inner_->gather_params(); }
  std::vector<Tensor> whole_params(const ParamRegistry& params,
                                   std::span<const Tensor> owned) const override {
    return inner_->whole_params(params, owned);
  }

  // SyncTelemetry
  std::string describe() const override { return inner_->describe(); }
  double take_comm_seconds() override { return inner_->take_comm_seconds(); }
  std::vector<TraceSpan> take_spans() override { return inner_->take_spans(); }
  std::uint64_t own_bytes_sent() const override { return inner_->own_bytes_sent(); }

 protected:
  GradSync& inner() { return *inner_; }
  const GradSync& inner() const { return *inner_; }

 private:
  std::unique_ptr<GradSync> inner_;
};

}  // namespace mixpar
