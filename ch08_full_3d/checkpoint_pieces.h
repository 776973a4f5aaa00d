// Layout-independent checkpoints: every tensor of the training state is stored under its global
// (whole-model) name and shape, in pieces, each piece with its place in the global tensor, so
// that a checkpoint written on any dp x tp x pp grid, with or without ZeRO, resumes on any
// other. The form is torch.distributed.checkpoint's (each rank writes the chunks it owns, each
// chunk named by global offsets; on load each rank reads the chunks that overlap what it now
// holds) and Megatron-LM's distributed checkpoints' ShardedTensor, whose flattened_range takes
// ZeRO's flat shards (which straddle parameters, zero_partition.h) into the same picture:
//
//   a piece = (key, global shape, a box of the global tensor: offset and shape per dimension,
//              a range [flat_begin, flat_begin + flat_count) of the box's row-major elements)
//
// A Megatron tp shard is one box (rows, or vocabulary rows) or three (c_attn's q | k | v
// columns of the rank's heads); a pipeline stage holds whole tensors of its own blocks; a ZeRO
// rank's piece of a parameter is a flat range of its tp shard, which inside each box is again
// one flat range. Replicas are written once (writes = false on the others). docs/REFERENCE.md,
// "Distributed checkpoints".
//
// ZeRO stage 3 (a rank keeps only its flat shard of the working parameters) maps the same way:
// its pieces are the partition's ShardPiece ranges (GradSync::owned_pieces), flat_runs() of each.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/gpt_params.h"
#include "tensor/tensor.h"

namespace mixpar::ch08 {

// Elements [global, global + count) of the full tensor (row-major) are elements
// [local, local + count) of a piece's data.
struct PieceRun {
  std::int64_t global = 0, local = 0, count = 0;
  bool operator==(const PieceRun&) const = default;
};

// A box of a global tensor and a flat range of its row-major elements (Megatron's
// ShardedTensor global_offset, local_shape and flattened_range).
struct PieceBox {
  Shape offset, shape;
  std::int64_t flat_begin = 0, flat_count = 0;  // flat_count = numel(shape): the whole box
  bool operator==(const PieceBox&) const = default;
};

// The box's elements [flat_begin, flat_begin + flat_count) as runs of the global tensor, in
// ascending order, local positions 0, 1, ... std::invalid_argument when the box is not inside
// `global` or the flat range not inside the box.
std::vector<PieceRun> box_runs(const Shape& global, const PieceBox& box);

// The shape a parameter is saved under: its full shape, but for a tensor-parallel wte without
// its padding rows (init_rows: the vocabulary), which are zeros and never stored.
Shape global_shape(const ParamEntry& e);
// The boxes of the global tensor a rank holding `e` holds (padding rows left out), whole
// (flat_count the box's size), in ascending order: one for a replicated tensor, rows or
// vocabulary rows, column_groups for a column split.
std::vector<PieceBox> held_boxes(const ParamEntry& e);
// Where the elements of e's held tensor (held_shape, row-major) lie in the global tensor;
// padding rows have no run.
std::vector<PieceRun> held_runs(const ParamEntry& e);
// The same for a flat range of the held tensor: an owned piece of a parameter (OwnedPiece's
// entry_offset and count, parallel/grad_sync.h), local positions from 0.
std::vector<PieceRun> flat_runs(const ParamEntry& e, std::int64_t entry_offset,
                                std::int64_t count);

// Whether a holding is one tp rank's part of the tensor (the other tp ranks hold other parts)
// rather than the whole tensor every tp rank holds alike.
inline bool is_tp_part(const ParamHolding& h) {
  return h.split != ParamSplit::kReplicated && h.num_shards > 1;
}

// A tensor this rank holds of the training state, by its global name: "h.0.attn.c_attn.weight"
// for the FP32 masters, "exp_avg." and "exp_avg_sq." before it for AdamW's moments.
struct HeldTensor {
  std::string key;
  Shape global;                // the global shape
  std::vector<PieceBox> boxes;  // the boxes it is drawn from (held_boxes)
  std::vector<PieceRun> runs;  // ascending by global
  Tensor data;                 // contiguous FP32; handle on the trainer's own storage
  bool writes = true;          // false: another rank writes these elements (a replica)
};

// Writes the pieces of the tensors with `writes` into one safetensors file, atomically: per
// tensor and box, the elements it holds of that box (one flat range of it; a whole box keeps
// the box's shape, a part is 1-D), and the index of them all as the file's "mixpar.pieces"
// metadata (JSON: tensor name, key, global shape, box offset and shape, flat range).
void write_pieces(const std::string& path, std::span<const HeldTensor> held);

// Fills every held tensor's elements from the pieces of `files` that overlap them (files
// without "mixpar.pieces" hold whole tensors under their names, as a Hugging Face
// model.safetensors: "transformer." is dropped, tensors no one holds are skipped). InputError
// naming the file when a stored key's global shape differs from a held one, and naming the
// key unless each held element was found exactly once. Only the pieces that overlap are read;
// each is converted to FP32.
void read_pieces(std::span<const std::string> files, std::span<HeldTensor> held);

}  // namespace mixpar::ch08
