// All-to-all context parallelism (DeepSpeed-Ulysses, Jacobs et al. 2023): around attention the
// sequence split is swapped for a head split. An all-to-all gives every cp rank the whole
// sequence's q, k, v of n_head / cp heads; it runs the unsplit model's causal attention on them
// (layers::attention_forward: heads are independent, so each head's arithmetic is exactly the
// one device's); a second all-to-all takes each output row back to the rank that holds it.
// Backward mirrors it. cp must divide n_head; each rank moves (cp - 1)/cp of 4 B T/cp C per
// pass, against the ring's (cp - 1) 2 B T/cp C: less traffic, but the whole T x T scores of
// its heads are held, and cp is capped by the heads.
#pragma once

#include "ch06_tensor_parallel/cp_attention.h"

namespace mixpar::ch06 {

class UlyssesAttention final : public CpAttention {
 public:
  // Throws InputError when cp does not divide n_head.
  UlyssesAttention(Communicator* cp_comm, CpLayout layout, std::int64_t n_head);
  void forward(const Tensor& qkv, Tensor& out, CpAttentionSaved& saved) override;
  void backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                const CpAttentionSaved& saved, Tensor& dqkv) override;
  CpAlgo algo() const override { return CpAlgo::kAllToAll; }

 private:
  // send[r] goes to cp rank r, recv[r] comes from it (recv[rank] = send[rank]).
  void all_to_all(const std::vector<Tensor>& send, std::vector<Tensor>& recv, int tag) const;

  Communicator* comm_;
  CpLayout layout_;
  std::int64_t n_head_;
  int rank_ = 0;
};

}  // namespace mixpar::ch06
