// Context parallelism's gradient rule (chapter 6, part 2): the cp ranks of one replica hold the
// same parameters and read the same samples, each its own rows of every sequence, so each
// rank's gradient is only its rows' share. Divided by cp and summed over the cp group, it is
// the replica's gradient; with the dp sync's mean after it, the mean over dp x cp: the
// one-device gradient. cp shards no parameter: every cp rank holds, steps and owns the same
// things as its dp sync says, and a checkpoint is the same at any cp.
//
// The rule is one function (sum_cp_shares), used by the lesson's GPT (cp_gpt_lesson.cpp) and
// by CpGradSync, the decorator chapter 8's trainer wraps around its dp sync
// (ch08_full_3d/strategy_factory.cpp).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/parallel_grid.h"
#include "model/gpt_params.h"
#include "parallel/forwarding_sync.h"

namespace mixpar::ch06 {

// grad: this cp rank's share of a replica's gradient (its rows' mean's); on return, on every
// rank of cp, the replica's gradient. Collective over cp.
void sum_cp_shares(Communicator& cp, Tensor& grad);

// A GradSync decorator: each gradient's cp shares summed (sum_cp_shares) after the last
// backward, before the inner dp sync (DDP, ZeRO or one replica) sees it. Where every gradient
// is a view of the registry's flat buffer, the entries adjacent in it are summed in one call
// (finish(): one all-reduce for a whole model instead of one per tensor, the same bits);
// otherwise (ZeRO-3's released buffers) each is summed as it becomes ready.
class CpGradSync final : public ForwardingGradSync {
 public:
  // inner: the dp sync; params: the registry both are built on. Checks that the cp ranks
  // start from the same weights (collective over cp).
  CpGradSync(std::unique_ptr<GradSync> inner, Communicator& cp, ParamRegistry& params);

  std::string describe() const override;
  void begin_step() override;
  void last_backward_starts(int micro_batches) override;
  void grad_ready(std::size_t entry) override;
  double finish() override;
  double take_comm_seconds() override;
  // Counted once: on cp rank 0 only (a ZeRO shard is held by every cp rank alike).
  std::vector<bool> norm_counted(const ParamRegistry& params, const GridCoord& at) const override;

 private:
  void reduce(std::size_t entry);  // sum_cp_shares, once per entry and step
  // Every gradient a view of the flat buffer at its offset: the entries can be summed in runs.
  bool batches() const;
  // sum_cp_shares over each run of adjacent entries not yet summed this step.
  void reduce_in_runs(const std::vector<std::size_t>& entries);

  Communicator& cp_;
  ParamRegistry& params_;
  bool in_last_backward_ = false;
  std::vector<bool> reduced_;  // by entry, this step
  std::vector<std::size_t> ready_;  // reported by the last backward, not yet handed on
  bool batch_ = false;              // batches(), as the last backward started
  double comm_s_ = 0;
};

}  // namespace mixpar::ch06
