#include "ch06_tensor_parallel/context_split.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "util/errors.h"

namespace mixpar::ch06 {

std::string_view cp_split_name(CpSplit split) {
  return split == CpSplit::kZigzag ? "zigzag" : "contiguous";
}

std::vector<SeqChunk> cp_chunks(std::int64_t seq_len, int cp, int rank, CpSplit split) {
  if (cp < 1 || rank < 0 || rank >= cp) {
    throw std::invalid_argument("cp_chunks: rank " + std::to_string(rank) + " of cp " +
                                std::to_string(cp));
  }
  const std::int64_t parts = split == CpSplit::kZigzag ? 2 * std::int64_t{cp} : cp;
  if (seq_len <= 0 || seq_len % parts != 0) {
    throw InputError("context parallel: sequence length " + std::to_string(seq_len) +
                     " is not divisible by " + (split == CpSplit::kZigzag ? "2 x cp = " : "cp = ") +
                     std::to_string(parts));
  }
  const std::int64_t c = seq_len / parts;
  if (split == CpSplit::kContiguous) return {{rank * c, c}};
  return {{rank * c, c}, {(parts - 1 - rank) * c, c}};
}

CpLayout cp_layout(std::int64_t seq_len, int cp, CpSplit split) {
  CpLayout l;
  l.seq_len = seq_len;
  l.cp = cp;
  l.split = split;
  for (int r = 0; r < cp; ++r) l.chunks.push_back(cp_chunks(seq_len, cp, r, split));
  return l;
}

std::vector<std::int64_t> chunk_positions(const std::vector<SeqChunk>& chunks) {
  std::vector<std::int64_t> p;
  for (const SeqChunk& c : chunks) {
    for (std::int64_t i = 0; i < c.count; ++i) p.push_back(c.begin + i);
  }
  return p;
}

namespace {

// Bytes of one position's row of a [B, T, ...] tensor.
std::size_t row_bytes(const Tensor& t) {
  if (t.ndim() < 2) throw std::invalid_argument("take_positions: expected [B, T, ...]");
  return t.nbytes() / static_cast<std::size_t>(t.dim(0) * t.dim(1));
}

}  // namespace

Tensor take_positions(const Tensor& full, const std::vector<std::int64_t>& positions) {
  Shape s = full.shape();
  const std::int64_t B = full.dim(0), T = full.dim(1);
  s[1] = static_cast<std::int64_t>(positions.size());
  Tensor out = Tensor::empty(s, full.dtype(), full.category());
  const std::size_t rb = row_bytes(full);
  const auto* src = static_cast<const std::byte*>(full.data());
  auto* dst = static_cast<std::byte*>(out.data());
  const std::int64_t n = s[1];
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t p = positions[static_cast<std::size_t>(i)];
      if (p < 0 || p >= T) throw std::invalid_argument("take_positions: position out of range");
      std::memcpy(dst + static_cast<std::size_t>(b * n + i) * rb,
                  src + static_cast<std::size_t>(b * T + p) * rb, rb);
    }
  }
  return out;
}

void put_positions(const Tensor& shard, const std::vector<std::int64_t>& positions, Tensor& full) {
  const std::int64_t B = full.dim(0), T = full.dim(1);
  const auto n = static_cast<std::int64_t>(positions.size());
  if (shard.dim(0) != B || shard.dim(1) != n || row_bytes(shard) != row_bytes(full) ||
      shard.dtype() != full.dtype()) {
    throw std::invalid_argument("put_positions: shard " + shape_str(shard.shape()) +
                                " does not fit " + shape_str(full.shape()));
  }
  const std::size_t rb = row_bytes(full);
  const auto* src = static_cast<const std::byte*>(shard.data());
  auto* dst = static_cast<std::byte*>(full.data());
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t p = positions[static_cast<std::size_t>(i)];
      if (p < 0 || p >= T) throw std::invalid_argument("put_positions: position out of range");
      std::memcpy(dst + static_cast<std::size_t>(b * T + p) * rb,
                  src + static_cast<std::size_t>(b * n + i) * rb, rb);
    }
  }
}

BlockKind classify_block(const SeqChunk& q, const SeqChunk& k) {
  if (k.begin + k.count - 1 <= q.begin) return BlockKind::kFull;  // every key at or before
  if (k.begin > q.begin + q.count - 1) return BlockKind::kSkipped;
  return BlockKind::kDiagonal;
}

const char* block_kind_name(BlockKind kind) {
  switch (kind) {
    case BlockKind::kFull:
      return "full";
    case BlockKind::kDiagonal:
      return "diagonal";
    case BlockKind::kSkipped:
      return "skipped";
  }
  return "?";
}

CpWork expected_work(const CpLayout& layout, int rank) {
  CpWork w;
  for (const SeqChunk& q : layout.chunks[static_cast<std::size_t>(rank)]) {
    for (const auto& theirs : layout.chunks) {
      for (const SeqChunk& k : theirs) {
        switch (classify_block(q, k)) {
          case BlockKind::kFull:
            ++w.full;
            w.scores += q.count * k.count;
            break;
          case BlockKind::kDiagonal:
            ++w.diagonal;
            w.scores += q.count * k.count;
            break;
          case BlockKind::kSkipped:
            ++w.skipped;
            break;
        }
      }
    }
  }
  return w;
}

double work_imbalance(const std::vector<CpWork>& per_rank) {
  double mx = 0, sum = 0;
  for (const CpWork& w : per_rank) {
    mx = std::max(mx, double(w.scores));
    sum += double(w.scores);
  }
  return sum > 0 ? mx / (sum / double(per_rank.size())) : 1.0;
}

}  // namespace mixpar::ch06
