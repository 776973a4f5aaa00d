// The tied embedding beside a pipeline and data parallelism. With pp > 1 the tied wte lives
// twice: on the first stage (the token embedding) and on the last (the head), each copy holding
// only its own half of the gradient. ZeRO's reduce-scatter leaves each dp rank only its shard
// of the buffer, and the two stages cut wte at different flat offsets, so the halves must meet
// BEFORE it (Megatron-LM's order too: `_allreduce_embedding_grads` runs on the full gradient
// before the optimizer's reduce-scatter of the distributed optimizer). Chapter 4's all-reduce
// takes the same order, though it could sum the halves after the sync: FP32 sums in another
// order differ in the last bits, and DDP and ZeRO give the same bits only in the same order
// (strategy_factory.cpp, tied_copies_meet_in_sync).
//
// TiedEmbeddingFirst is a GradSync decorator (parallel/forwarding_sync.h): it holds back the
// wte's "gradient ready" during the last backward, and in finish() sums the wte gradient over
// the grid's embedding group (this rank's first- and last-stage copies at the same dp and tp
// coordinates), then releases it to the inner sync. The wte's bucket therefore leaves after
// the backward: on the last stage, whose head gradient is final first, the buckets after it
// wait for it. The factory that wraps it tells the pipeline schedule so
// (strategy_factory.cpp, tied_copies_meet_in_sync): the schedule's after_sync then sums nothing.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/gpt_params.h"
#include "parallel/forwarding_sync.h"

namespace mixpar::ch08 {

class TiedEmbeddingFirst final : public ForwardingGradSync {
 public:
  // registry must hold "wte.weight"; embedding: the grid's embedding group (size > 1);
  // trace_rank: the rank its trace spans are drawn on.
  TiedEmbeddingFirst(std::unique_ptr<GradSync> inner, ParamRegistry& registry,
                     Communicator& embedding, int trace_rank);

  // What the inner sync owns is what this one owns (forwarded): it only reorders the wte's
  // reduction.
  std::string describe() const override;
  void grad_ready(std::size_t entry) override;
  double finish() override;
  double take_comm_seconds() override;
  std::vector<TraceSpan> take_spans() override;

 private:
  ParamRegistry& registry_;
  Communicator& embedding_;
  std::size_t wte_;
  int trace_rank_;
  double seconds_ = 0;
  std::vector<TraceSpan> spans_;
};

}  // namespace mixpar::ch08
