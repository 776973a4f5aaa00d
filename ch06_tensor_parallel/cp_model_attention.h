// Context parallelism inside a GptModel: the model's attention seam (common/model/
// attention_seam.h) run by this chapter's ring or all-to-all attention over the cp group, and
// the positions of this rank's rows (zigzag or contiguous). The rest of the model runs its
// T / cp rows as it would any T rows; the trainer sums the replicated parameters' gradients
// over dp x cp (comm/parallel_grid.h) and reads each rank's rows of the same samples.
#pragma once

#include <map>
#include <memory>

#include "ch06_tensor_parallel/cp_attention.h"
#include "model/attention_seam.h"

namespace mixpar::ch06 {

class CpModelAttention final : public AttentionSeam {
 public:
  // cp_comm: the cp group (nullptr for cp 1); layout: cp_layout(T, cp, split) of the full
  // sequence length T the model's T / cp rows belong to.
  CpModelAttention(Communicator* cp_comm, CpLayout layout, CpAlgo algo, CpAttentionBugs bugs = {});

  Shape saved_shape(std::int64_t B, std::int64_t T, std::int64_t heads,
                    std::int64_t channels) const override;
  DType saved_dtype(DType working) const override;
  void forward(const Tensor& qkv, std::int64_t heads, Tensor& out, Tensor& saved) override;
  void backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& saved,
                std::int64_t heads, Tensor& dqkv) override;
  std::vector<std::int64_t> positions(std::int64_t T) const override;

  const CpLayout& layout() const { return layout_; }
  CpAlgo algo() const { return algo_; }

 private:
  CpAttention& for_heads(std::int64_t heads);
  // The all-to-all's two saved tensors as views of the model's one buffer.
  CpAttentionSaved views(const Tensor& saved, std::int64_t B, std::int64_t heads,
                         std::int64_t channels) const;

  Communicator* comm_;
  CpLayout layout_;
  CpAlgo algo_;
  CpAttentionBugs bugs_;
  int rank_ = 0;
  std::map<std::int64_t, std::unique_ptr<CpAttention>> by_heads_;
};

}  // namespace mixpar::ch06
