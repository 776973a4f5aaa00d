// FP8 scales and casts (fp8_scaling.h). The formulas are the implementations' own:
// Transformer Engine pytorch/fp8.py _default_sf_compute (delayed), torchao float8_utils.py
// amax_to_scale (tensorwise), DeepSeek-V3 §3.3.1 (blockwise tiles); docs/SOURCES.md.
#include "fp8_scaling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "numerics/formats.h"
#include "util/errors.h"

namespace mixpar::fp8 {
namespace {

void check_format(DType format) {
  if (format != DType::kE4M3 && format != DType::kE5M2) {
    throw InputError("an FP8 cast needs e4m3 or e5m2, got " + std::string(dtype_name(format)));
  }
}

void check_shape(std::span<const float> x, std::int64_t rows, std::int64_t cols) {
  if (rows <= 0 || cols <= 0 || static_cast<std::int64_t>(x.size()) != rows * cols) {
    throw InputError("FP8 cast: " + std::to_string(x.size()) + " values are not a " +
                     std::to_string(rows) + " x " + std::to_string(cols) + " matrix");
  }
}

std::uint8_t encode(float v, DType format) {
  return format == DType::kE4M3 ? float_to_e4m3_bits(v, Saturation::kSatFinite)
                                : float_to_e5m2_bits(v, Saturation::kSatFinite);
}

float decode(std::uint8_t code, DType format) {
  return format == DType::kE4M3 ? e4m3_bits_to_float(code) : e5m2_bits_to_float(code);
}

// The non-saturating cast: NaN (E4M3) or inf (E5M2) exactly where the saturating one clamps.
std::uint8_t encode_nosat(float v, DType format) {
  return format == DType::kE4M3 ? float_to_e4m3_bits(v, Saturation::kNoSat)
                                : float_to_e5m2_bits(v, Saturation::kNoSat);
}

// Casts tile (tr, tc) of x with m.scale of that tile, counting what the cast did.
void cast_tile(std::span<const float> x, Fp8Matrix& m, std::int64_t tr, std::int64_t tc) {
  const std::int64_t t = tr * m.tiles_per_row() + tc;
  const float s = m.scale[static_cast<std::size_t>(t)];
  const float max = fp8_max(m.format);
  const int man_bits = m.format == DType::kE4M3 ? 3 : 2;
  const std::uint8_t exp_mask = static_cast<std::uint8_t>(0x7F & ~((1u << man_bits) - 1));
  const std::int64_t r_end = std::min(m.rows, (tr + 1) * m.tile_rows);
  const std::int64_t c_end = std::min(m.cols, (tc + 1) * m.tile_cols);
  for (std::int64_t r = tr * m.tile_rows; r < r_end; ++r) {
    for (std::int64_t c = tc * m.tile_cols; c < c_end; ++c) {
      const std::size_t i = static_cast<std::size_t>(r * m.cols + c);
      const float v = x[i] * s;
      const std::uint8_t code = encode(v, m.format);
      m.codes[i] = code;
      ++m.stats.values;
      if (std::fabs(v) > max && !std::isfinite(decode(encode_nosat(v, m.format), m.format))) {
        ++m.stats.saturated;
      }
      const std::uint8_t mag = code & 0x7F;
      if (x[i] != 0 && mag == 0) ++m.stats.flushed;
      if (mag != 0 && (mag & exp_mask) == 0) ++m.stats.subnormal;
    }
  }
}

Fp8Matrix empty_matrix(std::span<const float> x, std::int64_t rows, std::int64_t cols,
                       DType format, std::int64_t tile_rows, std::int64_t tile_cols) {
  check_format(format);
  check_shape(x, rows, cols);
  if (tile_rows <= 0 || tile_cols <= 0) throw InputError("FP8 cast: tiles must be positive");
  Fp8Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.format = format;
  m.tile_rows = std::min(tile_rows, rows);
  m.tile_cols = std::min(tile_cols, cols);
  m.codes.assign(x.size(), 0);
  const std::int64_t tiles = ((rows + m.tile_rows - 1) / m.tile_rows) * m.tiles_per_row();
  m.scale.assign(static_cast<std::size_t>(tiles), 1.0f);
  m.scale_inv.assign(static_cast<std::size_t>(tiles), 1.0f);
  m.stats.amax = amax(x);
  return m;
}

}  // namespace

std::string_view name(Recipe r) {
  switch (r) {
    case Recipe::kDelayed: return "delayed";
    case Recipe::kTensorwise: return "tensorwise";
    case Recipe::kBlockwise: return "blockwise";
  }
  return "?";
}

Recipe parse_recipe(std::string_view text) {
  for (Recipe r : {Recipe::kDelayed, Recipe::kTensorwise, Recipe::kBlockwise}) {
    if (text == name(r)) return r;
  }
  throw InputError("unknown FP8 recipe '" + std::string(text) +
                   "' (choose delayed, tensorwise or blockwise)");
}

float fp8_max(DType format) {
  check_format(format);
  return static_cast<float>(format_info(format).max);
}

CastStats& CastStats::operator+=(const CastStats& o) {
  values += o.values;
  saturated += o.saturated;
  flushed += o.flushed;
  subnormal += o.subnormal;
  amax = std::isnan(o.amax) || std::isnan(amax) ? std::numeric_limits<float>::quiet_NaN()
                                                 : std::max(amax, o.amax);
  return *this;
}

float Fp8Matrix::value(std::int64_t r, std::int64_t c) const {
  return decode(codes[static_cast<std::size_t>(r * cols + c)], format) *
         scale_inv[static_cast<std::size_t>(tile_index(r, c))];
}

float amax(std::span<const float> x) {
  float m = 0;
  for (float v : x) {
    if (std::isnan(v)) return v;
    m = std::max(m, std::fabs(v));
  }
  return m;
}

float delayed_scale(float amax, float previous, DType format, int margin) {
  if (!(amax > 0) || !std::isfinite(amax)) return previous;
  const float sf = (fp8_max(format) / amax) / std::ldexp(1.0f, margin);
  return std::isinf(sf) ? std::numeric_limits<float>::max() : sf;
}

float current_scale(float amax, DType format) {
  return static_cast<float>(double(fp8_max(format)) / std::max(double(amax), 1e-12));
}

Fp8Matrix quantize_with_scale(std::span<const float> x, std::int64_t rows, std::int64_t cols,
                              DType format, float scale) {
  Fp8Matrix m = empty_matrix(x, rows, cols, format, rows, cols);
  m.scale[0] = scale;
  m.scale_inv[0] = 1.0f / scale;
  cast_tile(x, m, 0, 0);
  return m;
}

Fp8Matrix quantize_current(std::span<const float> x, std::int64_t rows, std::int64_t cols,
                           DType format, std::int64_t tile_rows, std::int64_t tile_cols) {
  Fp8Matrix m = empty_matrix(x, rows, cols, format, tile_rows, tile_cols);
  const std::int64_t tile_grid_rows = (rows + m.tile_rows - 1) / m.tile_rows;
  for (std::int64_t tr = 0; tr < tile_grid_rows; ++tr) {
    for (std::int64_t tc = 0; tc < m.tiles_per_row(); ++tc) {
      float a = 0;
      for (std::int64_t r = tr * m.tile_rows; r < std::min(rows, (tr + 1) * m.tile_rows); ++r) {
        const std::int64_t c0 = tc * m.tile_cols;
        const std::int64_t n = std::min(cols, c0 + m.tile_cols) - c0;
        a = std::max(a, amax(x.subspan(static_cast<std::size_t>(r * cols + c0),
                                       static_cast<std::size_t>(n))));
      }
      const std::size_t t = static_cast<std::size_t>(tr * m.tiles_per_row() + tc);
      m.scale[t] = current_scale(a, format);
      m.scale_inv[t] = 1.0f / m.scale[t];
      cast_tile(x, m, tr, tc);
    }
  }
  return m;
}

DelayedScaler::DelayedScaler(DType format, int history_length, int margin)
    : format_(format), margin_(margin) {
  check_format(format);
  if (history_length < 1 || history_length > 1 << 20) {
    throw InputError("the amax history length must be in [1, 1048576], got " +
                     std::to_string(history_length));
  }
  if (margin < 0 || margin > 64) {
    throw InputError("the FP8 margin must be in [0, 64], got " + std::to_string(margin));
  }
  history_.assign(static_cast<std::size_t>(history_length), 0.0f);
}

Fp8Matrix DelayedScaler::quantize(std::span<const float> x, std::int64_t rows,
                                  std::int64_t cols) {
  Fp8Matrix m = quantize_with_scale(x, rows, cols, format_, scale_);
  pending_ = std::isnan(m.stats.amax) || std::isnan(pending_)
                 ? std::numeric_limits<float>::quiet_NaN()
                 : std::max(pending_, m.stats.amax);
  return m;
}

void DelayedScaler::update() {
  std::rotate(history_.begin(), history_.begin() + 1, history_.end());
  history_.back() = pending_;
  pending_ = 0;
  float m = 0;
  for (float a : history_) {
    if (std::isnan(a)) m = a;
    if (!std::isnan(m)) m = std::max(m, a);
  }
  scale_ = delayed_scale(m, scale_, format_, margin_);
}

void DelayedScaler::restore(const State& s) {
  if (s.history.size() != history_.size()) {
    throw InputError("an amax history of " + std::to_string(s.history.size()) +
                     " steps cannot resume one of " + std::to_string(history_.size()));
  }
  history_ = s.history;
  scale_ = s.scale;
  pending_ = s.pending_amax;
}

}  // namespace mixpar::fp8
