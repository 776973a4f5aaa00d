// FP8 scaling: why FP8 needs a scale per tensor (or per tile) where FP16 needed one per loss.
// E4M3 spans 2^-9 .. 448 (about 18 binades), E5M2 2^-16 .. 57344: a tensor is multiplied by a
// scale before the cast so that its largest magnitude lands near the format's max, and the
// GEMM multiplies the result by the inverse scales (docs/SOURCES.md, FP8 training).
//
// Three recipes choose the scale:
//   delayed    (Transformer Engine DelayedScaling): scale = (fp8_max / amax) / 2^margin with
//              amax the max of an amax history of earlier steps; the tensor's own amax is
//              recorded during the cast and enters the history after the step.
//   tensorwise (torchao Float8Linear, dynamic "current" scaling): scale = fp8_max / amax of the
//              tensor itself, computed before the cast (amax clamped to 1e-12, in FP64, then
//              rounded to FP32, as torchao's amax_to_scale does).
//   blockwise  (DeepSeek-V3 §3.3): one scale per 1x128 tile of activations and gradients and
//              per 128x128 block of weights, each from that tile's own amax.
// Every cast saturates (CUDA __NV_SATFINITE, as all three implementations do) and rounds to
// nearest even through common/numerics, bit-exact with the CUDA conversions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "numerics/dtype.h"

namespace mixpar::fp8 {

enum class Recipe { kDelayed, kTensorwise, kBlockwise };
std::string_view name(Recipe r);        // "delayed" | "tensorwise" | "blockwise"
Recipe parse_recipe(std::string_view);  // InputError on an unknown word

// Largest finite value of an FP8 format: 448 (E4M3), 57344 (E5M2), from common/numerics.
float fp8_max(DType format);

// What a cast did to a tensor's values (the JSONL's sat/flush fractions).
struct CastStats {
  std::int64_t values = 0;
  std::int64_t saturated = 0;  // x * scale rounds beyond fp8_max: clamped to +-max
  std::int64_t flushed = 0;    // x != 0 whose code is +-0
  std::int64_t subnormal = 0;  // codes with a zero exponent field, nonzero (fewer digits)
  float amax = 0;              // max |x| over the tensor (what delayed scaling records)
  CastStats& operator+=(const CastStats& o);
  double saturated_fraction() const { return values ? double(saturated) / double(values) : 0; }
  double flushed_fraction() const { return values ? double(flushed) / double(values) : 0; }
};

// A matrix [rows x cols] quantized to FP8 with one scale per tile of tile_rows x tile_cols
// (tile = the whole matrix for per-tensor recipes). cols is the GEMM's reduction dimension K:
// an operand is always given K-major (row r holds the K values that row r contributes).
// Value of element (r, c) = decode(codes[r * cols + c]) * scale_inv[tile of (r, c)].
struct Fp8Matrix {
  std::int64_t rows = 0, cols = 0;
  DType format = DType::kE4M3;
  std::int64_t tile_rows = 0, tile_cols = 0;
  std::vector<std::uint8_t> codes;
  std::vector<float> scale;      // per tile, row-major over tiles: x * scale is cast
  std::vector<float> scale_inv;  // per tile: 1 / scale (FP32), what the GEMM multiplies by
  CastStats stats;
  std::int64_t tiles_per_row() const { return (cols + tile_cols - 1) / tile_cols; }
  std::int64_t tile_index(std::int64_t r, std::int64_t c) const {
    return (r / tile_rows) * tiles_per_row() + c / tile_cols;
  }
  float value(std::int64_t r, std::int64_t c) const;  // the dequantized element
};

// Max |x|; NaN propagates (a NaN amax keeps the previous delayed scale).
float amax(std::span<const float> x);

// Transformer Engine's _default_sf_compute: (fp8_max / amax) / 2^margin, keeping `previous`
// when amax is 0 or not finite; an infinite quotient becomes FP32's max.
float delayed_scale(float amax, float previous, DType format, int margin);
// torchao's amax_to_scale: fp8_max / max(amax, 1e-12) in FP64, rounded to FP32.
float current_scale(float amax, DType format);

// x [rows x cols] cast with the given per-tensor scale (delayed: the scale from the history).
Fp8Matrix quantize_with_scale(std::span<const float> x, std::int64_t rows, std::int64_t cols,
                              DType format, float scale);
// Current scaling with one scale per tile_rows x tile_cols tile, each from its own amax
// (tensorwise: the whole matrix; blockwise: 1 x 128 or 128 x 128). Edge tiles may be smaller.
Fp8Matrix quantize_current(std::span<const float> x, std::int64_t rows, std::int64_t cols,
                           DType format, std::int64_t tile_rows, std::int64_t tile_cols);

// The state delayed scaling keeps for one tensor: its amax history (the last `length` steps'
// amaxes, newest last) and the scale computed from it. Transformer Engine updates it after
// each step: the step's amax enters the history, then scale = delayed_scale(max(history)).
class DelayedScaler {
 public:
  DelayedScaler(DType format, int history_length, int margin);
  float scale() const { return scale_; }
  // Casts with the current scale and records the tensor's amax for the update.
  Fp8Matrix quantize(std::span<const float> x, std::int64_t rows, std::int64_t cols);
  // After the step: pushes the amax recorded this step (max over its casts; 0 if none) into
  // the history, dropping the oldest, and recomputes the scale from the history's max.
  void update();
  const std::vector<float>& history() const { return history_; }  // oldest first
  DType format() const { return format_; }
  int margin() const { return margin_; }
  // Checkpointed state: history, scale and the amax pending for the next update.
  struct State {
    std::vector<float> history;
    float scale = 1, pending_amax = 0;
  };
  State state() const { return {history_, scale_, pending_}; }
  void restore(const State& s);  // InputError on a history of the wrong length

 private:
  DType format_;
  int margin_;
  std::vector<float> history_;
  float scale_ = 1;  // Transformer Engine starts every scale at 1
  float pending_ = 0;
};

}  // namespace mixpar::fp8
