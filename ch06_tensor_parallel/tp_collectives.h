// Chapter 6's TensorParallelOps (common/model/tensor_parallel.h): the collectives a
// tensor-parallel GptModel calls, over the tp communicator of the rank grid. f's backward and
// g's forward are conjugate_ops.h's; the embedding's and the loss's all-reduces are counted
// apart from the blocks', so the lesson can set each against its formula.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "comm/communicator.h"
#include "model/tensor_parallel.h"

namespace mixpar::ch06 {

// The failure modes the demo reproduces (--bug) and the tests pin down.
struct TpBugs {
  bool skip_f_backward = false;  // f without its backward all-reduce
  bool unmasked_padding = false;  // padded vocabulary logits left in the softmax
  bool unsummed_replicated = false;  // sequence parallel: LayerNorm gradients not summed
};

// What one region of the model sent over the tp group: bytes (from the communicator's own
// traffic record) and the elements all-reduced.
struct TpRegionTraffic {
  std::int64_t calls = 0;
  std::int64_t elements = 0;
  std::size_t bytes_sent = 0;
};

class TpCollectives final : public TensorParallelOps {
 public:
  // tp: the grid's tp group (outlives this object).
  explicit TpCollectives(Communicator& tp, TpBugs bugs = {}) : tp_(tp), bugs_(bugs) {}
  int rank() const override { return tp_.rank(); }
  int size() const override { return tp_.size(); }
  void f_backward(Tensor& input_grad) override;
  void g_forward(Tensor& output) override;
  void embedding_sum(Tensor& embedded) override;
  void loss_max(Tensor& row_max) override;
  void loss_sum(Tensor& per_row) override;
  void head_backward(Tensor& input_grad) override;
  void all_gather_rows(const Tensor& part, Tensor& full, const char* region) override;
  void reduce_scatter_rows(const Tensor& full, Tensor& part, const char* region) override;
  void sum_replicated_grads(Tensor& grads) override;
  bool mask_padded_logits() const override { return !bugs_.unmasked_padding; }

  // By region: "block forward" (g), "block backward" (f), "embedding", "loss" (max, sums),
  // "head backward" (the LM head's f); with sequence parallelism also "block backward
  // re-gather", "head forward", "head backward re-gather", "embedding backward" and
  // "replicated gradients".
  const std::map<std::string, TpRegionTraffic>& traffic() const { return traffic_; }
  void reset_traffic() { traffic_.clear(); }
  // Seconds spent inside the collectives since the last take.
  double take_seconds();

 private:
  template <class Call> void counted(const char* region, const Tensor& t, Call call);

  Communicator& tp_;
  TpBugs bugs_;
  std::map<std::string, TpRegionTraffic> traffic_;
  double seconds_ = 0;
};

}  // namespace mixpar::ch06
