// Chapter 6's TensorParallelGroup (common/model/tensor_parallel.h): a tensor-parallel
// GptModel's tp group. It builds the block's four linear layers, this chapter's
// ColumnParallelLinear and RowParallelLinear on the model's shards, each bound to this group
// and held by its block; the conjugate operators they call (f, g, and f-bar, g-bar with
// sequence parallelism: conjugate_ops.h) and the embedding's, the head's and the loss's
// collectives go over the grid's tp communicator, each counted by region apart from the
// others, so the lesson can set each against its formula.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "model/tensor_parallel.h"

namespace mixpar::ch06 {

// The failure modes the demo reproduces (--bug) and the tests pin down.
struct TpBugs {
  bool skip_f_backward = false;  // f without its backward all-reduce (the blocks' and the head's)
  bool unmasked_padding = false;  // padded vocabulary logits left in the softmax
  bool unsummed_replicated = false;  // sequence parallel: LayerNorm gradients not summed
  // One kind of the block's split layers broken alone, the embedding, the LM head and the loss
  // intact: each rank keeps its own partial sums (with sequence parallelism its own rows of
  // them). How TrainGptTp.RunsChapter6sColumnAndRowParallelLinears shows that the trainer's
  // blocks run ColumnParallelLinear and RowParallelLinear.
  bool skip_block_f_backward = false;  // f's (f-bar's) backward sum, in ColumnParallelLinear
  bool skip_g_forward = false;         // g's (g-bar's) forward sum, in RowParallelLinear
};

// What one region of the model sent over the tp group: bytes (from the communicator's own
// traffic record) and the elements all-reduced.
struct TpRegionTraffic {
  std::int64_t calls = 0;
  std::int64_t elements = 0;
  std::size_t bytes_sent = 0;
};

class TpCollectives final : public TensorParallelGroup {
 public:
  // tp: the grid's tp group (outlives this object).
  explicit TpCollectives(Communicator& tp, TpBugs bugs = {}) : tp_(tp), bugs_(bugs) {}
  int rank() const override { return tp_.rank(); }
  int size() const override { return tp_.size(); }

  // The block's linear layers: ColumnParallelLinear and RowParallelLinear on the shard,
  // bound to this group.
  std::unique_ptr<TpColumnLinear> column_parallel(const LinearParams& shard) override;
  std::unique_ptr<TpRowLinear> row_parallel(const LinearParams& shard) override;

  // The conjugate operators (conjugate_ops.h) as the layers call them, counted as "block
  // forward" (g's, f-bar's and g-bar's forward) and "block backward" (f's, f-bar's and g-bar's
  // backward); f-bar's forward in a backward, the rows gathered again, is counted apart
  // (region "block backward re-gather").
  void f_backward(Tensor& input_grad);
  void g_forward(Tensor& output);
  void f_bar_forward(const Tensor& rows, Tensor& full, const char* region = "block forward");
  void f_bar_backward(const Tensor& full_grad, Tensor& rows_grad);
  void g_bar_forward(const Tensor& full, Tensor& rows);
  void g_bar_backward(const Tensor& rows_grad, Tensor& full_grad);

  void embedding_sum(Tensor& embedded) override;
  void loss_max(Tensor& row_max) override;
  void loss_sum(Tensor& per_row) override;
  void head_backward(Tensor& input_grad) override;
  void all_gather_rows(const Tensor& part, Tensor& full, const char* region) override;
  void reduce_scatter_rows(const Tensor& full, Tensor& part, const char* region) override;
  void sum_replicated_grads(Tensor& grads) override;
  bool mask_padded_logits() const override { return !bugs_.unmasked_padding; }

  // Failure modes switched on in a running model (a trainer builds its TpCollectives itself).
  void set_bugs(TpBugs bugs) { bugs_ = bugs; }

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
  // A skipped sum (TpBugs): this rank's rows of its own partial full tensor.
  void keep_own_rows(const Tensor& full, Tensor& rows) const;

  Communicator& tp_;
  TpBugs bugs_;
  std::map<std::string, TpRegionTraffic> traffic_;
  double seconds_ = 0;
};

}  // namespace mixpar::ch06
