// Ring attention (Liu, Zaharia, Abbeel 2023; Megatron-LM's context parallelism): each cp rank
// keeps its own queries; the K/V blocks travel round the ring of cp ranks, one hop per step,
// cp - 1 hops, and every rank merges the partial attention output of each block into its
// running output by the online-softmax rule (Milakov & Gimelshein 2018; FlashAttention, Dao et
// al. 2022):
//   lse = log(e^lse1 + e^lse2),   O = e^(lse1 - lse) O1 + e^(lse2 - lse) O2
// where O_k is the softmax-weighted output over block k's keys alone and lse_k the log of that
// block's softmax denominator. Backward sends K and V round again with their gradients
// accumulating beside them, and one last hop takes dK, dV home.
// Causal masking is per block pair (context_split.h): full blocks unmasked, diagonal ones
// masked, skipped ones never computed.
#pragma once

#include <vector>

#include "ch06_tensor_parallel/cp_attention.h"

namespace mixpar::ch06 {

// The merge rule on rows x d partial outputs (row-major, f32), in place into (out, lse):
// lse_i = log(e^lse_i + e^lse2_i), out_i = e^(lse_i - lse_new) out_i + e^(lse2_i - lse_new)
// out2_i. A row with lse = -inf (no key yet) takes the other side whole.
void merge_partial_attention(Tensor& out, Tensor& lse, const Tensor& out2, const Tensor& lse2);

class RingAttention final : public CpAttention {
 public:
  RingAttention(Communicator* cp_comm, CpLayout layout, std::int64_t n_head,
                CpAttentionBugs bugs = {});
  void forward(const Tensor& qkv, Tensor& out, CpAttentionSaved& saved) override;
  void backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                const CpAttentionSaved& saved, Tensor& dqkv) override;
  CpAlgo algo() const override { return CpAlgo::kRing; }

  // The block pairs and scores the last forward computed on this rank (per batch and head).
  const CpWork& last_work() const { return work_; }

 private:
  const std::vector<SeqChunk>& chunks(int rank) const {
    return layout_.chunks[static_cast<std::size_t>(rank)];
  }
  Communicator* comm_;
  CpLayout layout_;
  std::int64_t n_head_;
  CpAttentionBugs bugs_;
  int rank_ = 0;
  CpWork work_;
};

}  // namespace mixpar::ch06
