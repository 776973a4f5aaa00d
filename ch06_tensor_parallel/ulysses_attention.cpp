#include "ch06_tensor_parallel/ulysses_attention.h"

#include <cstring>
#include <stdexcept>
#include <utility>

#include "ch06_tensor_parallel/ring_attention.h"
#include "model/layers.h"
#include "util/errors.h"

namespace mixpar::ch06 {
namespace {

// Channels [part * C + g * Cg, + Cg) of every row of src [B, Tl, parts * C] into
// dst [B, Tl, parts * Cg] (to_group) or back (from a group into the full width).
void copy_group(const Tensor& src, Tensor& dst, int parts, std::int64_t C, std::int64_t Cg, int g,
                bool to_group) {
  const std::size_t es = dtype_size(src.dtype());
  const std::int64_t rows = src.dim(0) * src.dim(1);
  const auto* s = static_cast<const std::byte*>(src.data());
  auto* t = static_cast<std::byte*>(dst.data());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (int p = 0; p < parts; ++p) {
      const std::int64_t full = r * parts * C + p * C + g * Cg, group = r * parts * Cg + p * Cg;
      if (to_group) {
        std::memcpy(t + static_cast<std::size_t>(group) * es,
                    s + static_cast<std::size_t>(full) * es, static_cast<std::size_t>(Cg) * es);
      } else {
        std::memcpy(t + static_cast<std::size_t>(full) * es,
                    s + static_cast<std::size_t>(group) * es, static_cast<std::size_t>(Cg) * es);
      }
    }
  }
}

}  // namespace

UlyssesAttention::UlyssesAttention(Communicator* cp_comm, CpLayout layout, std::int64_t n_head)
    : comm_(cp_comm), layout_(std::move(layout)), n_head_(n_head) {
  const int size = comm_ ? comm_->size() : 1;
  if (size != layout_.cp) {
    throw std::invalid_argument("UlyssesAttention: layout for cp " + std::to_string(layout_.cp) +
                                " on a group of " + std::to_string(size));
  }
  if (n_head % layout_.cp != 0) {
    throw InputError("all-to-all context parallel: cp " + std::to_string(layout_.cp) +
                     " does not divide n_head = " + std::to_string(n_head));
  }
  rank_ = comm_ ? comm_->rank() : 0;
}

void UlyssesAttention::all_to_all(const std::vector<Tensor>& send, std::vector<Tensor>& recv,
                                  int tag) const {
  const int cp = layout_.cp;
  recv[static_cast<std::size_t>(rank_)].copy_from(send[static_cast<std::size_t>(rank_)]);
  // Pairwise exchange: at step s rank r sends to r + s and receives from r - s; sendrecv is
  // safe whether or not the backend buffers sends.
  for (int s = 1; s < cp; ++s) {
    const int dst = (rank_ + s) % cp, src = (rank_ - s + cp) % cp;
    comm_->sendrecv(send[static_cast<std::size_t>(dst)], dst, recv[static_cast<std::size_t>(src)],
                    src, tag);
  }
}

void UlyssesAttention::forward(const Tensor& qkv, Tensor& out, CpAttentionSaved& saved) {
  const int cp = layout_.cp;
  const std::int64_t B = qkv.dim(0), Tl = qkv.dim(1), C = qkv.dim(2) / 3, T = layout_.seq_len;
  const std::int64_t Cg = C / cp, Hg = n_head_ / cp;
  if (Tl != layout_.local_len()) {
    throw std::invalid_argument("UlyssesAttention::forward: qkv " + shape_str(qkv.shape()) +
                                " is not this rank's " + std::to_string(Tl) + " rows");
  }
  const DType dt = qkv.dtype();
  std::vector<Tensor> send, recv;
  for (int g = 0; g < cp; ++g) {  // my rows' q, k, v of head group g, for rank g
    send.push_back(Tensor::empty({B, Tl, 3 * Cg}, dt, MemCategory::kCommBuffers));
    copy_group(qkv, send.back(), 3, C, Cg, g, true);
    recv.push_back(Tensor::empty({B, Tl, 3 * Cg}, dt, MemCategory::kCommBuffers));
  }
  all_to_all(send, recv, kCpTag + 3);
  // The whole sequence of my head group, every rank's rows at their true positions.
  // The caller's buffers when it passes them (the model's activations), else new ones.
  if (!saved.a.defined() || saved.a.shape() != Shape{B, T, 3 * Cg} || saved.a.dtype() != dt) {
    saved.a = Tensor::empty({B, T, 3 * Cg}, dt, MemCategory::kActivations);
  }
  for (int s = 0; s < cp; ++s) {
    put_positions(recv[static_cast<std::size_t>(s)],
                  chunk_positions(layout_.chunks[static_cast<std::size_t>(s)]), saved.a);
  }
  if (!saved.b.defined() || saved.b.shape() != Shape{B, Hg, T, T} || saved.b.dtype() != dt) {
    saved.b = Tensor::empty({B, Hg, T, T}, dt, MemCategory::kActivations);
  }
  Tensor out_g = Tensor::empty({B, T, Cg}, dt);
  layers::attention_forward(saved.a, Hg, out_g, saved.b);
  std::vector<Tensor> back, mine;
  for (int s = 0; s < cp; ++s) {
    back.push_back(
        take_positions(out_g, chunk_positions(layout_.chunks[static_cast<std::size_t>(s)])));
    mine.push_back(Tensor::empty({B, Tl, Cg}, dt, MemCategory::kCommBuffers));
  }
  all_to_all(back, mine, kCpTag + 4);
  Tensor o = Tensor::empty({B, Tl, C}, dt);
  for (int g = 0; g < cp; ++g) copy_group(mine[static_cast<std::size_t>(g)], o, 1, C, Cg, g, false);
  out.copy_from(o);
}

void UlyssesAttention::backward(const Tensor& dout, const Tensor& /*qkv*/, const Tensor& /*out*/,
                                const CpAttentionSaved& saved, Tensor& dqkv) {
  const int cp = layout_.cp;
  const std::int64_t B = dout.dim(0), Tl = dout.dim(1), C = dout.dim(2), T = layout_.seq_len;
  const std::int64_t Cg = C / cp, Hg = n_head_ / cp;
  const DType dt = saved.a.dtype();
  const Tensor g_in = dout.dtype() == dt ? dout : dout.to(dt);
  std::vector<Tensor> send, recv;
  for (int g = 0; g < cp; ++g) {
    send.push_back(Tensor::empty({B, Tl, Cg}, dt, MemCategory::kCommBuffers));
    copy_group(g_in, send.back(), 1, C, Cg, g, true);
    recv.push_back(Tensor::empty({B, Tl, Cg}, dt, MemCategory::kCommBuffers));
  }
  all_to_all(send, recv, kCpTag + 5);
  Tensor dout_g = Tensor::empty({B, T, Cg}, dt);
  for (int s = 0; s < cp; ++s) {
    put_positions(recv[static_cast<std::size_t>(s)],
                  chunk_positions(layout_.chunks[static_cast<std::size_t>(s)]), dout_g);
  }
  Tensor dqkv_g = Tensor::empty({B, T, 3 * Cg}, dt);
  Tensor datt = Tensor::empty({B, Hg, T, T}, dt);
  layers::attention_backward(dout_g, saved.a, saved.b, Hg, dqkv_g, datt);
  std::vector<Tensor> back, mine;
  for (int s = 0; s < cp; ++s) {
    back.push_back(
        take_positions(dqkv_g, chunk_positions(layout_.chunks[static_cast<std::size_t>(s)])));
    mine.push_back(Tensor::empty({B, Tl, 3 * Cg}, dt, MemCategory::kCommBuffers));
  }
  all_to_all(back, mine, kCpTag + 6);
  Tensor g = Tensor::empty({B, Tl, 3 * C}, dt);
  for (int k = 0; k < cp; ++k) copy_group(mine[static_cast<std::size_t>(k)], g, 3, C, Cg, k, false);
  dqkv.copy_from(g);
}

std::string_view cp_algo_name(CpAlgo algo) { return algo == CpAlgo::kRing ? "ring" : "all-to-all"; }

std::unique_ptr<CpAttention> make_cp_attention(CpAlgo algo, Communicator* cp_comm,
                                               const CpLayout& layout, std::int64_t n_head,
                                               const CpAttentionBugs& bugs) {
  if (algo == CpAlgo::kAllToAll) return std::make_unique<UlyssesAttention>(cp_comm, layout, n_head);
  return std::make_unique<RingAttention>(cp_comm, layout, n_head, bugs);
}

CpTraffic cp_traffic_formula(CpAlgo algo, int cp, std::int64_t B, std::int64_t local_len,
                             std::int64_t C, std::size_t elem_bytes) {
  const double unit = double(B) * double(local_len) * double(C) * double(elem_bytes);
  if (algo == CpAlgo::kRing) {
    return {double(cp - 1) * 2 * unit, (double(cp - 1) * 4 + (cp > 1 ? 2 : 0)) * unit};
  }
  const double f = double(cp - 1) / cp;
  return {f * 4 * unit, f * 4 * unit};
}

}  // namespace mixpar::ch06
