// Launch configurations of the GPU kernels, as plain constexpr arithmetic: how many blocks of
// how many threads cover n elements or n rows. No CUDA header is needed, so the rules are unit
// tested on any machine. A grid of 0 blocks means "nothing to launch" (CUDA rejects 0 blocks).
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>

namespace mixpar::cuda {

inline constexpr int kWarpSize = 32;
// gridDim.x may be up to 2^31 - 1; grid-stride loops let us stop far below that, at a count
// that already fills any GPU many times over (132 SMs x 16 resident blocks on an H200).
inline constexpr std::int64_t kMaxGridX = 2147483647;
inline constexpr std::int64_t kDefaultMaxBlocks = 65536;

constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  if (b <= 0) throw std::invalid_argument("ceil_div: divisor must be positive");
  return a <= 0 ? 0 : (a + b - 1) / b;
}

struct LaunchConfig {
  unsigned grid = 0;   // blocks; 0: skip the launch
  unsigned block = 0;  // threads per block
};

// n elements, per_thread consecutive ones per thread (vectorised loads), `block` threads per
// block, at most max_blocks blocks: kernels loop with a grid stride over what is left.
constexpr LaunchConfig launch_1d(std::int64_t n, int block = 256, std::int64_t per_thread = 1,
                                 std::int64_t max_blocks = kDefaultMaxBlocks) {
  if (block <= 0 || block > 1024 || block % kWarpSize != 0) {
    throw std::invalid_argument("launch_1d: block must be a positive multiple of 32, <= 1024");
  }
  if (per_thread <= 0 || max_blocks <= 0 || max_blocks > kMaxGridX) {
    throw std::invalid_argument("launch_1d: per_thread and max_blocks must be positive");
  }
  const std::int64_t threads = ceil_div(n, per_thread);
  const std::int64_t blocks = std::min(ceil_div(threads, block), max_blocks);
  return {static_cast<unsigned>(blocks), static_cast<unsigned>(block)};
}

// One warp per row, warps_per_block warps per block; every row gets its own warp (no stride:
// row kernels keep per-row state in registers).
constexpr LaunchConfig launch_rows(std::int64_t rows, int warps_per_block = 8) {
  if (warps_per_block <= 0 || warps_per_block > 32) {
    throw std::invalid_argument("launch_rows: warps_per_block must be in [1, 32]");
  }
  const std::int64_t blocks = ceil_div(rows, warps_per_block);
  if (blocks > kMaxGridX) throw std::invalid_argument("launch_rows: too many rows for one grid");
  return {static_cast<unsigned>(blocks), static_cast<unsigned>(warps_per_block * kWarpSize)};
}

// Column reductions (bias and LayerNorm weight gradients) split the rows into this many
// chunks, each summed in order by one thread per column, then the chunks in order: the result
// depends on (rows, chunk count) only, never on scheduling, so it is bit-reproducible.
constexpr std::int64_t column_chunks(std::int64_t rows, std::int64_t rows_per_chunk = 256) {
  if (rows_per_chunk <= 0) throw std::invalid_argument("column_chunks: rows_per_chunk <= 0");
  return std::max<std::int64_t>(1, ceil_div(rows, rows_per_chunk));
}

}  // namespace mixpar::cuda
