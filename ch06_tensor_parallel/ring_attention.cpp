// Ring attention, read top down: RingAttention::forward and ::backward are the ring (cp steps,
// one K/V block held at each); ForwardPass::attend and BackwardPass::accumulate are what one
// step does with the block it holds; attend_head and head_grads are one head of one block pair.
// Shapes (per rank): B batch rows, Tl = T / cp local rows, C channels, H heads of hd = C / H;
// qkv [B*Tl, 3C] (q | k | v of each row), a K/V block [B*Tl, 2C] (k | v), out and dq [B*Tl, C],
// lse [B, H, Tl]. The --bug switches are settled once per pass, outside every loop.
#include "ch06_tensor_parallel/ring_attention.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
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

// --bug skipped-lse-merge: the block's partial output added as if it were the whole, without
// its log-sum-exp weight (the lse itself is still merged, so later blocks and backward see the
// true one).
void add_row_unweighted(float* o, float& lse, const float* o2, float lse2, std::int64_t d) {
  std::vector<float> sum(o, o + d);
  for (std::int64_t c = 0; c < d; ++c) sum[static_cast<std::size_t>(c)] += o2[c];
  merge_row(o, lse, o2, lse2, d);  // for its lse: the weighted output is what the bug skips
  std::copy(sum.begin(), sum.end(), o);
}

using MergeRow = void (*)(float*, float&, const float*, float, std::int64_t);

// One rank's rows, widened to f32 once (a 16-bit model's q, k, v as its kernel does).
Tensor as_f32(const Tensor& t) { return t.dtype() == DType::kF32 ? t : t.to(DType::kF32); }

struct Dims {
  std::int64_t B, Tl, H, hd, C;
  std::int64_t rows() const { return B * Tl; }
};

Dims dims_of(const Tensor& qkv, std::int64_t n_head) {
  return {qkv.dim(0), qkv.dim(1), n_head, qkv.dim(2) / 3 / n_head, qkv.dim(2) / 3};
}

// One head's hd columns, from column `col`, of `count` rows from `row` of a row-major matrix
// with `stride` floats a row: [count, hd].
CMap head_view(const float* m, std::int64_t row, std::int64_t count, std::int64_t stride,
               std::int64_t col, std::int64_t hd) {
  return CMap(m + row * stride + col, count, hd, Eigen::OuterStride<>(stride));
}
MMap head_view(float* m, std::int64_t row, std::int64_t count, std::int64_t stride,
               std::int64_t col, std::int64_t hd) {
  return MMap(m + row * stride + col, count, hd, Eigen::OuterStride<>(stride));
}

// The travelling block's first contents: k | v of this rank's rows, [B*Tl, 3C] -> [B*Tl, 2C]
// at the start of `dst`.
void copy_kv(const Tensor& qkv, const Dims& d, Tensor& dst) {
  const float* src = qkv.data_as<float>();
  float* out = dst.data_as<float>();
  for (std::int64_t row = 0; row < d.rows(); ++row) {
    std::copy_n(src + row * 3 * d.C + d.C, 2 * d.C, out + row * 2 * d.C);
  }
}

// One query chunk of this rank against one key chunk of the block held: where each chunk's
// rows start among its rank's rows, and what the causal mask asks of the pair.
struct ChunkPair {
  SeqChunk q, k;
  std::int64_t q_off = 0, k_off = 0;
  BlockKind kind = BlockKind::kFull;
  bool masked = false;  // per position: a diagonal block (unless --bug unmasked-diagonal)
};

// The chunk pairs of one ring step, query chunks outer, skipped pairs included.
std::vector<ChunkPair> chunk_pairs(const std::vector<SeqChunk>& mine,
                                   const std::vector<SeqChunk>& theirs, bool unmasked_diagonal) {
  std::vector<ChunkPair> pairs;
  std::int64_t q_off = 0;
  for (const SeqChunk& qc : mine) {
    std::int64_t k_off = 0;
    for (const SeqChunk& kc : theirs) {
      const BlockKind kind = classify_block(qc, kc);
      pairs.push_back({qc, kc, q_off, k_off, kind,
                       kind == BlockKind::kDiagonal && !unmasked_diagonal});
      k_off += kc.count;
    }
    q_off += qc.count;
  }
  return pairs;
}

// The raw scaled scores q k^T / sqrt(hd) of one head of a pair, [q.count, k.count], -inf where
// a masked pair's key lies after its query.
RowMat block_scores(const CMap& q, const CMap& k, float scale, const ChunkPair& p) {
  RowMat s = (q * k.transpose()) * scale;
  if (p.masked) {
    for (std::int64_t i = 0; i < p.q.count; ++i) {
      for (std::int64_t j = 0; j < p.k.count; ++j) {
        if (p.k.begin + j > p.q.begin + i) s(i, j) = kNegInf;
      }
    }
  }
  return s;
}

// In place: each row of s -> its softmax; returns each row's log-sum-exp.
std::vector<float> softmax_rows(RowMat& s) {
  std::vector<float> lse(static_cast<std::size_t>(s.rows()));
  for (std::int64_t i = 0; i < s.rows(); ++i) {
    const float mx = s.row(i).maxCoeff();
    float sum = 0;
    for (std::int64_t j = 0; j < s.cols(); ++j) {
      s(i, j) = std::exp(s(i, j) - mx);
      sum += s(i, j);
    }
    s.row(i) /= sum;
    lse[static_cast<std::size_t>(i)] = mx + std::log(sum);
  }
  return lse;
}

// Forward's state across the ring: the running output acc [B*Tl, C] and log-sum-exp lse
// [B, H, Tl] of this rank's rows, into which every block's partial attention merges.
class ForwardPass {
 public:
  ForwardPass(const Tensor& qkv, const Dims& d, float* lse, const std::vector<SeqChunk>& mine,
              const CpAttentionBugs& bugs, CpWork& work)
      : d_(d), scale_(1.0f / std::sqrt(float(d.hd))), q_(qkv.data_as<float>()), lse_(lse),
        mine_(mine), unmasked_diagonal_(bugs.unmasked_diagonal),
        merge_(bugs.skip_lse_merge ? add_row_unweighted : merge_row), work_(work),
        acc_(RowMat::Zero(d.rows(), d.C)) {
    std::fill_n(lse_, d.B * d.H * d.Tl, kNegInf);  // no key seen yet
  }

  // One ring step: this rank's queries against the K/V block [B*Tl, 2C] of the rank whose
  // chunks are `theirs`, merged into (acc, lse).
  void attend(const Tensor& kv, const std::vector<SeqChunk>& theirs) {
    for (const ChunkPair& p : chunk_pairs(mine_, theirs, unmasked_diagonal_)) {
      if (p.kind == BlockKind::kSkipped) {
        ++work_.skipped;
        continue;
      }
      (p.kind == BlockKind::kFull ? work_.full : work_.diagonal) += 1;
      work_.scores += p.q.count * p.k.count;
      for (std::int64_t b = 0; b < d_.B; ++b) {
        for (std::int64_t h = 0; h < d_.H; ++h) attend_head(kv.data_as<float>(), p, b, h);
      }
    }
  }

  // out [B, Tl, C] <- acc, rounded to out's dtype.
  void write(Tensor& out) const {
    Tensor o32 = Tensor::empty({d_.B, d_.Tl, d_.C}, DType::kF32);
    std::copy_n(acc_.data(), acc_.size(), o32.data_as<float>());
    out.copy_from(o32);
  }

 private:
  // Head h of batch row b of pair p: P = softmax(q k^T / sqrt(hd)) over this block's keys
  // [q.count, k.count], O = P v [q.count, hd], merged row by row into acc and lse.
  void attend_head(const float* kv, const ChunkPair& p, std::int64_t b, std::int64_t h) {
    const std::int64_t qrow = b * d_.Tl + p.q_off, krow = b * d_.Tl + p.k_off;
    const CMap q = head_view(q_, qrow, p.q.count, 3 * d_.C, h * d_.hd, d_.hd);
    const CMap k = head_view(kv, krow, p.k.count, 2 * d_.C, h * d_.hd, d_.hd);
    const CMap v = head_view(kv, krow, p.k.count, 2 * d_.C, d_.C + h * d_.hd, d_.hd);
    RowMat s = block_scores(q, k, scale_, p);
    const std::vector<float> block_lse = softmax_rows(s);
    const RowMat o = s * v;  // this block's partial output, normalised over its keys
    for (std::int64_t i = 0; i < p.q.count; ++i) {
      float* acc_row = acc_.data() + (qrow + i) * d_.C + h * d_.hd;
      float& l = lse_[(b * d_.H + h) * d_.Tl + p.q_off + i];
      merge_(acc_row, l, o.row(i).data(), block_lse[static_cast<std::size_t>(i)], d_.hd);
    }
  }

  Dims d_;
  float scale_;
  const float* q_;
  float* lse_;
  const std::vector<SeqChunk>& mine_;
  bool unmasked_diagonal_;
  MergeRow merge_;
  CpWork& work_;
  RowMat acc_;
};

// Backward's state across the ring: dq [B*Tl, C] of this rank's rows, and what every block's
// gradients need of them: q, dO, the final lse and D_i = sum_c dO_ic O_ic per head [B, H, Tl].
class BackwardPass {
 public:
  BackwardPass(const Tensor& qkv, const Tensor& dout, const Tensor& out, const float* lse,
               const Dims& d, const std::vector<SeqChunk>& mine, const CpAttentionBugs& bugs)
      : d_(d), scale_(1.0f / std::sqrt(float(d.hd))), q_(qkv.data_as<float>()),
        go_(dout.data_as<float>()), lse_(lse), delta_(row_deltas(dout, out, d)), mine_(mine),
        unmasked_diagonal_(bugs.unmasked_diagonal), dq_(RowMat::Zero(d.rows(), d.C)) {}

  // One ring step: the travelling buffer holds a block's K|V [B*Tl, 2C] then its dK|dV so far
  // (at element `grad_at`); adds this rank's share to dK, dV and dq.
  void accumulate(Tensor& block, std::int64_t grad_at, const std::vector<SeqChunk>& theirs) {
    for (const ChunkPair& p : chunk_pairs(mine_, theirs, unmasked_diagonal_)) {
      if (p.kind == BlockKind::kSkipped) continue;
      for (std::int64_t b = 0; b < d_.B; ++b) {
        for (std::int64_t h = 0; h < d_.H; ++h) {
          head_grads(block.data_as<float>(), block.data_as<float>() + grad_at, p, b, h);
        }
      }
    }
  }

  // dqkv [B, Tl, 3C] <- dq | this rank's own dK|dV [B*Tl, 2C], rounded to dqkv's dtype.
  void write(const Tensor& dkv, Tensor& dqkv) const {
    Tensor g = Tensor::empty({d_.B, d_.Tl, 3 * d_.C}, DType::kF32);
    float* gp = g.data_as<float>();
    const float* dkvp = dkv.data_as<float>();
    for (std::int64_t row = 0; row < d_.rows(); ++row) {
      std::copy_n(dq_.data() + row * d_.C, d_.C, gp + row * 3 * d_.C);
      std::copy_n(dkvp + row * 2 * d_.C, 2 * d_.C, gp + row * 3 * d_.C + d_.C);
    }
    dqkv.copy_from(g);
  }

 private:
  // D_i = sum_c dO_ic O_ic per head: the softmax backward's row term, [B, H, Tl].
  static std::vector<float> row_deltas(const Tensor& dout, const Tensor& out, const Dims& d) {
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
    return delta;
  }

  // Head h of batch row b of pair p, with P [q.count, k.count] recomputed from the final lse
  // (the true softmax restricted to this block): dV += P^T dO, dS = P (dO V^T - D) / sqrt(hd),
  // dQ += dS K, dK += dS^T Q.
  void head_grads(const float* kv, float* dkv, const ChunkPair& p, std::int64_t b,
                  std::int64_t h) {
    const std::int64_t qrow = b * d_.Tl + p.q_off, krow = b * d_.Tl + p.k_off;
    const std::int64_t row0 = (b * d_.H + h) * d_.Tl + p.q_off;  // into lse and D
    const CMap q = head_view(q_, qrow, p.q.count, 3 * d_.C, h * d_.hd, d_.hd);
    const CMap go = head_view(go_, qrow, p.q.count, d_.C, h * d_.hd, d_.hd);
    const CMap k = head_view(kv, krow, p.k.count, 2 * d_.C, h * d_.hd, d_.hd);
    const CMap v = head_view(kv, krow, p.k.count, 2 * d_.C, d_.C + h * d_.hd, d_.hd);
    MMap dk = head_view(dkv, krow, p.k.count, 2 * d_.C, h * d_.hd, d_.hd);
    MMap dv = head_view(dkv, krow, p.k.count, 2 * d_.C, d_.C + h * d_.hd, d_.hd);
    MMap dq = head_view(dq_.data(), qrow, p.q.count, d_.C, h * d_.hd, d_.hd);
    RowMat s = block_scores(q, k, scale_, p);
    for (std::int64_t i = 0; i < p.q.count; ++i) {
      const float l = lse_[row0 + i];
      for (std::int64_t j = 0; j < p.k.count; ++j) s(i, j) = std::exp(s(i, j) - l);
    }
    dv.noalias() += s.transpose() * go;  // dV += P^T dO
    RowMat ds = go * v.transpose();      // dP = dO V^T
    for (std::int64_t i = 0; i < p.q.count; ++i) {
      const float di = delta_[static_cast<std::size_t>(row0 + i)];
      for (std::int64_t j = 0; j < p.k.count; ++j) ds(i, j) = scale_ * s(i, j) * (ds(i, j) - di);
    }
    dq.noalias() += ds * k;             // dQ += dS K
    dk.noalias() += ds.transpose() * q;  // dK += dS^T Q
  }

  Dims d_;
  float scale_;
  const float* q_;
  const float* go_;
  const float* lse_;
  std::vector<float> delta_;
  const std::vector<SeqChunk>& mine_;
  bool unmasked_diagonal_;
  RowMat dq_;
};

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

// Step s of cp: this rank holds rank (r - s)'s K/V block and attends to it while the block
// moves on to rank r + 1 (and r - s - 1's arrives from r - 1); cp - 1 hops in all.
void RingAttention::forward(const Tensor& qkv_in, Tensor& out, CpAttentionSaved& saved) {
  ops::detail::fix_eigen_blocking();
  const Tensor qkv = as_f32(qkv_in);
  const Dims d = dims_of(qkv, n_head_);
  if (d.Tl != layout_.local_len() || d.C % n_head_ != 0) {
    throw std::invalid_argument("RingAttention::forward: qkv " + shape_str(qkv.shape()) +
                                " is not this rank's " + std::to_string(layout_.local_len()) +
                                " rows of " + std::to_string(n_head_) + " heads");
  }
  Tensor kv = Tensor::empty({d.B, d.Tl, 2 * d.C}, DType::kF32, MemCategory::kCommBuffers);
  Tensor next = Tensor::empty({d.B, d.Tl, 2 * d.C}, DType::kF32, MemCategory::kCommBuffers);
  copy_kv(qkv, d, kv);
  if (!saved.a.defined() || saved.a.shape() != Shape{d.B, d.H, d.Tl} ||
      saved.a.dtype() != DType::kF32) {  // else the caller's buffer (the model's activation)
    saved.a = Tensor::empty({d.B, d.H, d.Tl}, DType::kF32, MemCategory::kActivations);
  }
  work_ = CpWork{};
  ForwardPass pass(qkv, d, saved.a.data_as<float>(), chunks(rank_), bugs_, work_);
  const int cp = layout_.cp, next_rank = (rank_ + 1) % cp, prev_rank = (rank_ + cp - 1) % cp;
  for (int s = 0; s < cp; ++s) {
    const std::vector<SeqChunk>& held = chunks((rank_ - s + cp) % cp);  // whose block is here
    if (s == cp - 1) {
      pass.attend(kv, held);  // the last block: nothing left to pass on
    } else if (!comm_->sends_wait_for_receiver()) {
      comm_->send(kv, next_rank, kCpTag);  // buffered: the send overlaps this block's compute
      pass.attend(kv, held);
      comm_->recv(next, prev_rank, kCpTag);
      std::swap(kv, next);
    } else {  // sends that wait for their receiver: exchange first, then compute
      comm_->sendrecv(kv, next_rank, next, prev_rank, kCpTag);
      pass.attend(kv, held);
      std::swap(kv, next);
    }
  }
  pass.write(out);
}

// The same ring with the gradients: the buffer [K|V, dK|dV] travels, each rank adding its
// queries' share to the dK, dV of the block it holds; after cp - 1 hops each rank holds rank
// r + 1's block, and one more hop takes every dK, dV home.
void RingAttention::backward(const Tensor& dout_in, const Tensor& qkv_in, const Tensor& out_in,
                             const CpAttentionSaved& saved, Tensor& dqkv) {
  ops::detail::fix_eigen_blocking();
  const Tensor qkv = as_f32(qkv_in), dout = as_f32(dout_in), out = as_f32(out_in);
  const Dims d = dims_of(qkv, n_head_);
  BackwardPass pass(qkv, dout, out, saved.a.data_as<float>(), d, chunks(rank_), bugs_);
  const std::int64_t n = d.rows() * 2 * d.C;  // one K|V block; its dK|dV follows it
  Tensor buf = Tensor::zeros({2 * n}, DType::kF32, MemCategory::kCommBuffers);
  Tensor next = Tensor::empty({2 * n}, DType::kF32, MemCategory::kCommBuffers);
  copy_kv(qkv, d, buf);
  const int cp = layout_.cp, next_rank = (rank_ + 1) % cp, prev_rank = (rank_ + cp - 1) % cp;
  for (int s = 0; s < cp; ++s) {
    pass.accumulate(buf, n, chunks((rank_ - s + cp) % cp));
    if (s < cp - 1) {  // K, V and their gradients so far travel on together
      comm_->sendrecv(buf, next_rank, next, prev_rank, kCpTag + 1);
      std::swap(buf, next);
    }
  }
  Tensor dkv = buf.flat_slice(n, n);
  if (cp > 1) {  // home: the dK, dV of this rank's own rows arrive from rank r - 1
    Tensor home = Tensor::empty({n}, DType::kF32, MemCategory::kCommBuffers);
    comm_->sendrecv(dkv, next_rank, home, prev_rank, kCpTag + 2);
    dkv = home;
  }
  pass.write(dkv, dqkv);
}

}  // namespace mixpar::ch06
