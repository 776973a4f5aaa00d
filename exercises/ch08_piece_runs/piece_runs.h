// Exercise (chapter 8): where a checkpoint piece's elements lie in the global tensor: what a
// rank resuming on another layout must compute to know which stored pieces to read, and where
// each of their elements goes.
//
// Chapter 8's checkpoints store each tensor of the training state in pieces named by global
// coordinates (torch.distributed.checkpoint's chunks, Megatron-LM's ShardedTensor): a piece is a
// box of the global tensor (an offset and a shape per dimension: a tp rank's rows, or its
// columns) and a range [flat_begin, flat_begin + flat_count) of the box's elements in row-major
// order (a ZeRO rank's flat shard, which may start and end mid-row). piece_runs turns it into
// runs of the global tensor's row-major elements: "elements [global, global + count) of the
// tensor are elements [local, local + count) of the piece's data". The result must be:
//   - exact: the runs hold the piece's elements and nothing else, local positions 0, 1, ...,
//     flat_count - 1 in the box's row-major order;
//   - ascending and as few as possible: no two runs that could be one (consecutive in both
//     the global tensor and the piece's data), none of count 0;
//   - a 0-dimensional tensor is one element (global 0); a piece of 0 elements has no run.
// The box is inside the tensor and the flat range inside the box (no need to check). See
// ch08_full_3d/README.md (checkpoints) and ch08_full_3d/checkpoint_pieces.h (box_runs), which
// the tests compare with; docs/REFERENCE.md, "Distributed checkpoints".
#pragma once

#include <cstdint>
#include <vector>

namespace mixpar::exercises {

struct GlobalRun {
  std::int64_t global = 0, local = 0, count = 0;
  bool operator==(const GlobalRun&) const = default;
};

struct StoredPiece {
  std::vector<std::int64_t> offset, shape;     // the box, one entry per dimension
  std::int64_t flat_begin = 0, flat_count = 0;  // the range of the box's elements
};

std::vector<GlobalRun> piece_runs(const std::vector<std::int64_t>& global, const StoredPiece& piece);

}  // namespace mixpar::exercises
