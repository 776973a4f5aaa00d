#include "ch08_piece_runs/piece_runs.h"

#include <algorithm>
#include <cstddef>

namespace mixpar::exercises {

namespace {

void append(std::vector<GlobalRun>& out, GlobalRun r) {
  if (r.count <= 0) return;
  if (!out.empty() && out.back().global + out.back().count == r.global &&
      out.back().local + out.back().count == r.local) {
    out.back().count += r.count;
    return;
  }
  out.push_back(r);
}

}  // namespace

std::vector<GlobalRun> piece_runs(const std::vector<std::int64_t>& global, const StoredPiece& piece) {
  std::vector<GlobalRun> out;
  if (piece.flat_count == 0) return out;
  const std::size_t nd = global.size();
  if (nd == 0) return {{0, 0, 1}};
  // Row-major strides of the global tensor.
  std::vector<std::int64_t> stride(nd, 1);
  for (std::size_t d = nd - 1; d > 0; --d) stride[d - 1] = stride[d] * global[d];
  // The box is rows of piece.shape.back() elements; walk the rows the flat range touches and
  // keep the part of each row inside [flat_begin, flat_end).
  const std::int64_t row = piece.shape.back();
  const std::int64_t flat_end = piece.flat_begin + piece.flat_count;
  for (std::int64_t k = piece.flat_begin / row; k * row < flat_end; ++k) {
    std::int64_t g = piece.offset[nd - 1] * stride[nd - 1], rest = k;
    for (std::size_t d = nd - 1; d-- > 0;) {  // row k's index in each outer dimension
      g += (piece.offset[d] + rest % piece.shape[d]) * stride[d];
      rest /= piece.shape[d];
    }
    const std::int64_t lo = std::max(k * row, piece.flat_begin);
    const std::int64_t hi = std::min((k + 1) * row, flat_end);
    append(out, {g + (lo - k * row), lo - piece.flat_begin, hi - lo});
  }
  return out;
}

}  // namespace mixpar::exercises
