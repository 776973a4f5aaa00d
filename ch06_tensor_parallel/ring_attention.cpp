#include "ch06_tensor_parallel/ring_attention.h"

#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "ops/eigen_gemm.h"

namespace mixpar::ch06 {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap = Eigen::Map<const RowMat, Eigen::Unaligned, Eigen::OuterStride<>>;
using MMap = Eigen::Map<RowMat, Eigen::Unaligned, Eigen::OuterStride<>>;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The merge rule on one row of d values: (o, lse) <- (o, lse) (+) (o2, lse2).
void merge_row(float* o, float& lse, const float* o2, float lse2, std::int64_t d) {
  const float mx = std::max(lse, lse2);
  if (mx == kNegInf) return;  // neither side has a key yet
  const float sum = std::exp(lse - mx) + std::exp(lse2 - mx);
  const float merged = mx + std::log(sum);
  const float w1 = std::exp(lse - merged), w2 = std::exp(lse2 - merged);
  for (std::int64_t i = 0; i < d; ++i) o[i] = w1 * o[i] + w2 * o2[i];
  lse = merged;
}

// One rank's rows, widened to f32 once (a 16-bit model's q, k, v as its kernel does).
Tensor as_f32(const Tensor& t) { return t.dtype() == DType::kF32 ? t : t.to(DType::kF32); }

struct Dims {
  std::int64_t B, Tl, H, hd, C;
};

// Where a chunk's rows start among its rank's rows.
std::vector<std::int64_t> chunk_offsets(const std::vector<SeqChunk>& chunks) {
  std::vector<std::int64_t> off;
  std::int64_t at = 0;
  for (const SeqChunk& c : chunks) {
    off.push_back(at);
    at += c.count;
  }
  return off;
}

// The raw scaled scores of query chunk q against key chunk k of one (b, h), masked per
// position when the block is diagonal (the bug leaves the diagonal unmasked, as a full block).
RowMat block_scores(const CMap& q, const CMap& k, float scale, const SeqChunk& qc,
                    const SeqChunk& kc, bool masked) {
  RowMat s = (q * k.transpose()) * scale;
  if (masked) {
    for (std::int64_t i = 0; i < qc.count; ++i) {
      for (std::int64_t j = 0; j < kc.count; ++j) {
        if (kc.begin + j > qc.begin + i) s(i, j) = kNegInf;
      }
    }
  }
  return s;
}

}  // namespace

void merge_partial_attention(Tensor& out, Tensor& lse, const Tensor& out2, const Tensor& lse2) {
  if (out.dtype() != DType::kF32 || lse.dtype() != DType::kF32 || out2.dtype() != DType::kF32 ||
      lse2.dtype() != DType::kF32 || out.ndim() != 2 || out2.shape() != out.shape() ||
      lse.numel() != out.dim(0) || lse2.numel() != out.dim(0)) {
    throw std::invalid_argument(
        "merge_partial_attention: expected f32 out [N, d], lse [N] on "
        "both sides");
  }
  const std::int64_t n = out.dim(0), d = out.dim(1);
  float *o = out.data_as<float>(), *l = lse.data_as<float>();
  const float *o2 = out2.data_as<float>(), *l2 = lse2.data_as<float>();
  for (std::int64_t i = 0; i < n; ++i) merge_row(o + i * d, l[i], o2 + i * d, l2[i], d);
}

RingAttention::RingAttention(Communicator* cp_comm, CpLayout layout, std::int64_t n_head,
                             CpAttentionBugs bugs)
    : comm_(cp_comm), layout_(std::move(layout)), n_head_(n_head), bugs_(bugs) {
  const int size = comm_ ? comm_->size() : 1;
  if (size != layout_.cp) {
    throw std::invalid_argument("RingAttention: layout for cp " + std::to_string(layout_.cp) +
                                " on a group of " + std::to_string(size));
  }
  rank_ = comm_ ? comm_->rank() : 0;
}

void RingAttention::forward(const Tensor& qkv_in, Tensor& out, CpAttentionSaved& saved) {
  ops::detail::fix_eigen_blocking();
  const Tensor qkv = as_f32(qkv_in);
  const Dims d{qkv.dim(0), qkv.dim(1), n_head_, qkv.dim(2) / 3 / n_head_, qkv.dim(2) / 3};
  if (d.Tl != layout_.local_len() || d.C % n_head_ != 0) {
    throw std::invalid_argument("RingAttention::forward: qkv " + shape_str(qkv.shape()) +
                                " is not this rank's " + std::to_string(layout_.local_len()) +
                                " rows of " + std::to_string(n_head_) + " heads");
  }
  const int cp = layout_.cp;
  const float scale = 1.0f / std::sqrt(float(d.hd));
  // The travelling K/V block: [B, Tl, 2C], k then v of each row.
  Tensor kv = Tensor::empty({d.B, d.Tl, 2 * d.C}, DType::kF32, MemCategory::kCommBuffers);
  Tensor next = Tensor::empty({d.B, d.Tl, 2 * d.C}, DType::kF32, MemCategory::kCommBuffers);
  {
    const float* src = qkv.data_as<float>();
    float* dst = kv.data_as<float>();
    for (std::int64_t row = 0; row < d.B * d.Tl; ++row) {
      std::copy_n(src + row * 3 * d.C + d.C, 2 * d.C, dst + row * 2 * d.C);
    }
  }
  // The running output and log-sum-exp of this rank's rows.
  RowMat acc = RowMat::Zero(d.B * d.Tl, d.C);
  if (!saved.a.defined() || saved.a.shape() != Shape{d.B, d.H, d.Tl} ||
      saved.a.dtype() != DType::kF32) {  // else the caller's buffer (the model's activation)
    saved.a = Tensor::empty({d.B, d.H, d.Tl}, DType::kF32, MemCategory::kActivations);
  }
  float* lse = saved.a.data_as<float>();
  std::fill_n(lse, d.B * d.H * d.Tl, kNegInf);
  work_ = CpWork{};
  const std::vector<SeqChunk>& mine = layout_.chunks[static_cast<std::size_t>(rank_)];
  const std::vector<std::int64_t> my_off = chunk_offsets(mine);
  const float* q_all = qkv.data_as<float>();

  auto compute = [&](const Tensor& block, int src) {
    const std::vector<SeqChunk>& theirs = layout_.chunks[static_cast<std::size_t>(src)];
    const std::vector<std::int64_t> their_off = chunk_offsets(theirs);
    const float* kvp = block.data_as<float>();
    for (std::size_t qi = 0; qi < mine.size(); ++qi) {
      for (std::size_t ki = 0; ki < theirs.size(); ++ki) {
        const SeqChunk &qc = mine[qi], &kc = theirs[ki];
        const BlockKind kind = classify_block(qc, kc);
        if (kind == BlockKind::kSkipped) {
          ++work_.skipped;
          continue;
        }
        (kind == BlockKind::kFull ? work_.full : work_.diagonal) += 1;
        work_.scores += qc.count * kc.count;
        const bool masked = kind == BlockKind::kDiagonal && !bugs_.unmasked_diagonal;
        for (std::int64_t b = 0; b < d.B; ++b) {
          for (std::int64_t h = 0; h < d.H; ++h) {
            const std::int64_t qrow = b * d.Tl + my_off[qi], krow = b * d.Tl + their_off[ki];
            const CMap q(q_all + qrow * 3 * d.C + h * d.hd, qc.count, d.hd,
                         Eigen::OuterStride<>(3 * d.C));
            const CMap k(kvp + krow * 2 * d.C + h * d.hd, kc.count, d.hd,
                         Eigen::OuterStride<>(2 * d.C));
            const CMap v(kvp + krow * 2 * d.C + d.C + h * d.hd, kc.count, d.hd,
                         Eigen::OuterStride<>(2 * d.C));
            RowMat p = block_scores(q, k, scale, qc, kc, masked);
            std::vector<float> block_lse(static_cast<std::size_t>(qc.count));
            for (std::int64_t i = 0; i < qc.count; ++i) {
              const float mx = p.row(i).maxCoeff();
              float sum = 0;
              for (std::int64_t j = 0; j < kc.count; ++j) {
                p(i, j) = std::exp(p(i, j) - mx);
                sum += p(i, j);
              }
              p.row(i) /= sum;
              block_lse[static_cast<std::size_t>(i)] = mx + std::log(sum);
            }
            const RowMat o = p * v;  // this block's partial output, normalised over its keys
            for (std::int64_t i = 0; i < qc.count; ++i) {
              float* orow = acc.data() + (qrow + i) * d.C + h * d.hd;
              float& l = lse[(b * d.H + h) * d.Tl + my_off[qi] + i];
              const float l2 = block_lse[static_cast<std::size_t>(i)];
              if (bugs_.skip_lse_merge) {  // the partials added as if each were the whole
                std::vector<float> before(orow, orow + d.hd);
                merge_row(orow, l, o.row(i).data(), l2, d.hd);  // lse still merged
                for (std::int64_t c = 0; c < d.hd; ++c) {
                  orow[c] = before[static_cast<std::size_t>(c)] + o(i, c);
                }
              } else {
                merge_row(orow, l, o.row(i).data(), l2, d.hd);
              }
            }
          }
        }
      }
    }
  };

  const int next_rank = (rank_ + 1) % cp, prev_rank = (rank_ + cp - 1) % cp;
  for (int s = 0; s < cp; ++s) {
    const int src = (rank_ - s + cp) % cp;  // whose block this rank holds at step s
    if (s == cp - 1) {
      compute(kv, src);
    } else if (!comm_->sends_wait_for_receiver()) {
      // The next block's send overlaps this block's compute: the send is buffered.
      comm_->send(kv, next_rank, kCpTag);
      compute(kv, src);
      comm_->recv(next, prev_rank, kCpTag);
      std::swap(kv, next);
    } else {  // sends that wait for their receiver: exchange first, then compute
      comm_->sendrecv(kv, next_rank, next, prev_rank, kCpTag);
      compute(kv, src);
      std::swap(kv, next);
    }
  }
  Tensor o32 = Tensor::empty({d.B, d.Tl, d.C}, DType::kF32);
  std::copy_n(acc.data(), acc.size(), o32.data_as<float>());
  out.copy_from(o32);
}

void RingAttention::backward(const Tensor& dout_in, const Tensor& qkv_in, const Tensor& out_in,
                             const CpAttentionSaved& saved, Tensor& dqkv) {
  ops::detail::fix_eigen_blocking();
  const Tensor qkv = as_f32(qkv_in), dout = as_f32(dout_in), out = as_f32(out_in);
  const Dims d{qkv.dim(0), qkv.dim(1), n_head_, qkv.dim(2) / 3 / n_head_, qkv.dim(2) / 3};
  const int cp = layout_.cp;
  const float scale = 1.0f / std::sqrt(float(d.hd));
  const std::int64_t n = d.B * d.Tl * 2 * d.C;
  // The travelling buffer: K|V of a block, then its gradient dK|dV ([B, Tl, 2C] each).
  Tensor buf = Tensor::zeros({2 * n}, DType::kF32, MemCategory::kCommBuffers);
  Tensor next = Tensor::empty({2 * n}, DType::kF32, MemCategory::kCommBuffers);
  {
    const float* src = qkv.data_as<float>();
    float* dst = buf.data_as<float>();
    for (std::int64_t row = 0; row < d.B * d.Tl; ++row) {
      std::copy_n(src + row * 3 * d.C + d.C, 2 * d.C, dst + row * 2 * d.C);
    }
  }
  const float* lse = saved.a.data_as<float>();
  // D_i = sum_c dO_ic O_ic per head: the softmax backward's row term.
  std::vector<float> delta(static_cast<std::size_t>(d.B * d.H * d.Tl));
  for (std::int64_t b = 0; b < d.B; ++b) {
    for (std::int64_t h = 0; h < d.H; ++h) {
      for (std::int64_t i = 0; i < d.Tl; ++i) {
        const float* go = dout.data_as<float>() + (b * d.Tl + i) * d.C + h * d.hd;
        const float* o = out.data_as<float>() + (b * d.Tl + i) * d.C + h * d.hd;
        float s = 0;
        for (std::int64_t c = 0; c < d.hd; ++c) s += go[c] * o[c];
        delta[static_cast<std::size_t>((b * d.H + h) * d.Tl + i)] = s;
      }
    }
  }
  RowMat dq = RowMat::Zero(d.B * d.Tl, d.C);
  const std::vector<SeqChunk>& mine = layout_.chunks[static_cast<std::size_t>(rank_)];
  const std::vector<std::int64_t> my_off = chunk_offsets(mine);
  const float* q_all = qkv.data_as<float>();
  const float* go_all = dout.data_as<float>();

  auto compute = [&](Tensor& block, int src) {
    const std::vector<SeqChunk>& theirs = layout_.chunks[static_cast<std::size_t>(src)];
    const std::vector<std::int64_t> their_off = chunk_offsets(theirs);
    const float* kvp = block.data_as<float>();
    float* dkvp = block.data_as<float>() + n;
    for (std::size_t qi = 0; qi < mine.size(); ++qi) {
      for (std::size_t ki = 0; ki < theirs.size(); ++ki) {
        const SeqChunk &qc = mine[qi], &kc = theirs[ki];
        const BlockKind kind = classify_block(qc, kc);
        if (kind == BlockKind::kSkipped) continue;
        const bool masked = kind == BlockKind::kDiagonal && !bugs_.unmasked_diagonal;
        for (std::int64_t b = 0; b < d.B; ++b) {
          for (std::int64_t h = 0; h < d.H; ++h) {
            const std::int64_t qrow = b * d.Tl + my_off[qi], krow = b * d.Tl + their_off[ki];
            const CMap q(q_all + qrow * 3 * d.C + h * d.hd, qc.count, d.hd,
                         Eigen::OuterStride<>(3 * d.C));
            const CMap go(go_all + qrow * d.C + h * d.hd, qc.count, d.hd,
                          Eigen::OuterStride<>(d.C));
            const CMap k(kvp + krow * 2 * d.C + h * d.hd, kc.count, d.hd,
                         Eigen::OuterStride<>(2 * d.C));
            const CMap v(kvp + krow * 2 * d.C + d.C + h * d.hd, kc.count, d.hd,
                         Eigen::OuterStride<>(2 * d.C));
            MMap dk(dkvp + krow * 2 * d.C + h * d.hd, kc.count, d.hd,
                    Eigen::OuterStride<>(2 * d.C));
            MMap dv(dkvp + krow * 2 * d.C + d.C + h * d.hd, kc.count, d.hd,
                    Eigen::OuterStride<>(2 * d.C));
            MMap dqh(dq.data() + qrow * d.C + h * d.hd, qc.count, d.hd, Eigen::OuterStride<>(d.C));
            // P from the final log-sum-exp: the true softmax restricted to this block.
            RowMat p = block_scores(q, k, scale, qc, kc, masked);
            const std::int64_t row0 = (b * d.H + h) * d.Tl + my_off[qi];
            for (std::int64_t i = 0; i < qc.count; ++i) {
              const float l = lse[row0 + i];
              for (std::int64_t j = 0; j < kc.count; ++j) p(i, j) = std::exp(p(i, j) - l);
            }
            dv.noalias() += p.transpose() * go;            // dV += P^T dO
            RowMat ds = go * v.transpose();                // dP = dO V^T
            for (std::int64_t i = 0; i < qc.count; ++i) {  // dS = P (dP - D) / sqrt(hd)
              const float di = delta[static_cast<std::size_t>(row0 + i)];
              for (std::int64_t j = 0; j < kc.count; ++j) {
                ds(i, j) = scale * p(i, j) * (ds(i, j) - di);
              }
            }
            dqh.noalias() += ds * k;             // dQ += dS K
            dk.noalias() += ds.transpose() * q;  // dK += dS^T Q
          }
        }
      }
    }
  };

  const int next_rank = (rank_ + 1) % cp, prev_rank = (rank_ + cp - 1) % cp;
  for (int s = 0; s < cp; ++s) {
    compute(buf, (rank_ - s + cp) % cp);
    if (s < cp - 1) {  // K, V and their gradients so far travel on together
      comm_->sendrecv(buf, next_rank, next, prev_rank, kCpTag + 1);
      std::swap(buf, next);
    }
  }
  // The block held last is rank + 1's: one more hop takes every dK, dV home.
  Tensor dkv = buf.flat_slice(n, n);
  Tensor mine_dkv = dkv;
  if (cp > 1) {
    mine_dkv = Tensor::empty({n}, DType::kF32, MemCategory::kCommBuffers);
    comm_->sendrecv(dkv, next_rank, mine_dkv, prev_rank, kCpTag + 2);
  }
  Tensor g = Tensor::empty({d.B, d.Tl, 3 * d.C}, DType::kF32);
  float* gp = g.data_as<float>();
  const float* dkvp = mine_dkv.data_as<float>();
  for (std::int64_t row = 0; row < d.B * d.Tl; ++row) {
    std::copy_n(dq.data() + row * d.C, d.C, gp + row * 3 * d.C);
    std::copy_n(dkvp + row * 2 * d.C, 2 * d.C, gp + row * 3 * d.C + d.C);
  }
  dqkv.copy_from(g);
}

}  // namespace mixpar::ch06
