#include "ch06_tensor_parallel/cp_model_attention.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace mixpar::ch06 {

CpModelAttention::CpModelAttention(Communicator* cp_comm, CpLayout layout, CpAlgo algo,
                                   CpAttentionBugs bugs)
    : comm_(cp_comm), layout_(std::move(layout)), algo_(algo), bugs_(bugs) {
  rank_ = comm_ ? comm_->rank() : 0;
}

Shape CpModelAttention::saved_shape(std::int64_t B, std::int64_t T, std::int64_t heads,
                                    std::int64_t channels) const {
  if (T != layout_.local_len()) {
    throw std::invalid_argument("context parallel: the model runs " + std::to_string(T) +
                                " rows, the layout gives this rank " +
                                std::to_string(layout_.local_len()));
  }
  if (algo_ == CpAlgo::kRing) return {B, heads, T};  // one log-sum-exp per row and head
  // All-to-all: the head group's q|k|v over the whole sequence, then its probabilities.
  const std::int64_t S = layout_.seq_len, cp = layout_.cp;
  return {B * S * 3 * (channels / cp) + B * (heads / cp) * S * S};
}

DType CpModelAttention::saved_dtype(DType working) const {
  return algo_ == CpAlgo::kRing ? DType::kF32 : working;
}

CpAttention& CpModelAttention::for_heads(std::int64_t heads) {
  std::unique_ptr<CpAttention>& a = by_heads_[heads];
  if (!a) a = make_cp_attention(algo_, comm_, layout_, heads, bugs_);
  return *a;
}

CpAttentionSaved CpModelAttention::views(const Tensor& saved, std::int64_t B, std::int64_t heads,
                                         std::int64_t channels) const {
  CpAttentionSaved s;
  if (algo_ == CpAlgo::kRing) {
    s.a = saved;
    return s;
  }
  const std::int64_t S = layout_.seq_len, cp = layout_.cp;
  const std::int64_t n1 = B * S * 3 * (channels / cp), n2 = B * (heads / cp) * S * S;
  s.a = saved.flat_slice(0, n1).view({B, S, 3 * (channels / cp)});
  s.b = saved.flat_slice(n1, n2).view({B, heads / cp, S, S});
  return s;
}

void CpModelAttention::forward(const Tensor& qkv, std::int64_t heads, Tensor& out, Tensor& saved) {
  CpAttentionSaved s = views(saved, qkv.dim(0), heads, qkv.dim(2) / 3);
  for_heads(heads).forward(qkv, out, s);
}

void CpModelAttention::backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                const Tensor& saved, std::int64_t heads, Tensor& dqkv) {
  const CpAttentionSaved s = views(saved, qkv.dim(0), heads, qkv.dim(2) / 3);
  for_heads(heads).backward(dout, qkv, out, s, dqkv);
}

std::vector<std::int64_t> CpModelAttention::positions(std::int64_t T) const {
  if (T != layout_.local_len()) {
    throw std::invalid_argument("context parallel: positions of " + std::to_string(T) +
                                " rows, the layout gives this rank " +
                                std::to_string(layout_.local_len()));
  }
  return chunk_positions(layout_.chunks[static_cast<std::size_t>(rank_)]);
}

}  // namespace mixpar::ch06
