// The FP8 lessons (fp8_lesson.h). Data are drawn from fixed seeds; every number the demo
// prints is measured here. Sources: DeepSeek-V3 §3.3 (promotion, tiles, E4M3 everywhere),
// Micikevicius et al. 2022 (E4M3 forward, E5M2 gradients), Transformer Engine's delayed
// scaling (docs/SOURCES.md, FP8 training).
#include "fp8_lesson.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "fp8_gemm.h"
#include "report/format.h"

namespace mixpar::ch03 {
namespace {

using fp8::CastStats;
using fp8::Fp8Matrix;

std::vector<float> normal(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> x(n);
  for (float& v : x) v = d(g);
  return x;
}

double max_relative_error(const std::vector<float>& got, const std::vector<double>& exact) {
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::fabs(double(got[i]) - exact[i]));
    norm = std::max(norm, std::fabs(exact[i]));
  }
  return err / norm;
}

std::string percent(std::int64_t part, std::int64_t whole) {
  return fmt("%.3g%% (%lld of %lld)", 100.0 * double(part) / double(whole), (long long)part,
             (long long)whole);
}

Claim fraction_claim(const std::string& claim, std::int64_t part, std::int64_t whole,
                     double max_fraction) {
  return {claim, fmt("<= %g%%", 100 * max_fraction), percent(part, whole),
          double(part) <= max_fraction * double(whole)};
}

// Subnormal or flushed to zero: an element that kept fewer than the format's mantissa bits.
bool underflowed(const Fp8Matrix& m, std::size_t i, float x) {
  const std::uint8_t mag = m.codes[i] & 0x7F;
  const std::uint8_t exp_mask = m.format == DType::kE4M3 ? 0x78 : 0x7C;
  return x != 0 && (mag & exp_mask) == 0;
}

// The correct configuration's claim measured on the mistake, named after the run that breaks it.
Claim broken_by(const std::string& bug, const std::string& run, Claim c) {
  c.claim = bug + " run (" + run + "): " + c.claim;
  return claim_broken_by(bug, std::move(c));
}

constexpr int kSpikeRow = 3;
constexpr float kSpikeFactor = 100;

}  // namespace

const std::vector<std::string>& fp8_bug_names() {
  static const std::vector<std::string> names = {"no-promotion", "stale-amax", "grads-e4m3",
                                                 "per-tensor-outlier"};
  return names;
}

AccumulationResult accumulation_lesson(std::int64_t k) {
  // Activations N(0,1) and positive weights U(0,1): outputs of one sign, whose sum grows with
  // K, the setting where a short accumulator loses the most (each truncation shrinks it).
  constexpr std::int64_t kRows = 8, kCols = 8;
  std::vector<float> x = normal(std::size_t(kRows * k), 41);
  std::vector<float> w(std::size_t(kCols * k));
  std::mt19937 g(42);
  std::uniform_real_distribution<float> u(0, 1);
  for (float& v : w) v = u(g);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::fabs(x[i]);
  const Fp8Matrix a = fp8::quantize_current(x, kRows, k, DType::kE4M3, kRows, k);
  const Fp8Matrix b = fp8::quantize_current(w, kCols, k, DType::kE4M3, kCols, k);
  const std::vector<double> exact = fp8::gemm_exact(a, b);
  AccumulationResult r;
  r.k = k;
  r.outputs = kRows * kCols;
  r.fp32_error = max_relative_error(fp8::gemm(a, b, {fp8::Accumulator::kFp32, 0}), exact);
  r.promoted_error = max_relative_error(
      fp8::gemm(a, b, {fp8::Accumulator::kTensorCore14, fp8::kPromotionInterval}), exact);
  r.unpromoted_error =
      max_relative_error(fp8::gemm(a, b, {fp8::Accumulator::kTensorCore14, 0}), exact);
  return r;
}

std::vector<Claim> accumulation_claims(const AccumulationResult& r) {
  const std::string claim =
      fmt("K=%lld sum in the 14-bit tensor-core accumulator: relative error", (long long)r.k);
  return {tolerance_claim(fmt("K=%lld, FP32 accumulator: relative error", (long long)r.k),
                          r.fp32_error, 1e-5),
          tolerance_claim(fmt("promoted to FP32 every %d: ", int(fp8::kPromotionInterval)) + claim,
                          r.promoted_error, 2e-3),
          broken_by("no-promotion", "14-bit alone",
                    tolerance_claim(claim, r.unpromoted_error, 2e-3))};
}

SpikeResult spike_lesson(int history, int spike_step, int steps) {
  constexpr std::int64_t kRows = 16, kCols = 256;
  SpikeResult r;
  r.history = history;
  r.spike_step = spike_step;
  fp8::DelayedScaler delayed(DType::kE4M3, history, 0);
  for (int s = 0; s < steps; ++s) {
    std::vector<float> x = normal(std::size_t(kRows * kCols), 100 + unsigned(s));
    if (s == spike_step) {
      for (std::int64_t c = 0; c < kCols; ++c) x[std::size_t(kSpikeRow * kCols + c)] *= kSpikeFactor;
    }
    SpikeStep st;
    st.delayed_scale = delayed.scale();
    st.history_max = *std::max_element(delayed.history().begin(), delayed.history().end());
    st.delayed = delayed.quantize(x, kRows, kCols).stats;
    const Fp8Matrix t = fp8::quantize_current(x, kRows, kCols, DType::kE4M3, kRows, kCols);
    st.tensorwise = t.stats;
    st.tensorwise_scale = t.scale[0];
    st.amax = t.stats.amax;
    delayed.update();
    r.steps.push_back(st);
  }
  const float before = r.steps[std::size_t(spike_step)].delayed_scale;
  for (int s = spike_step + 1; s < steps; ++s) {
    if (r.steps[std::size_t(s)].delayed_scale < before / 2) ++r.steps_scale_depressed;
  }
  return r;
}

std::vector<Claim> spike_claims(const SpikeResult& r) {
  const SpikeStep& s = r.steps[std::size_t(r.spike_step)];
  const std::string claim = fmt("activation spike 100x at step %d: values saturated", r.spike_step);
  const std::int64_t n = s.tensorwise.values;
  return {fraction_claim("tensorwise: " + claim, s.tensorwise.saturated, n, 0),
          broken_by("stale-amax", "delayed", fraction_claim(claim, s.delayed.saturated, n, 0)),
          {fmt("delayed: the spike's amax holds the scale down for the history's %d steps",
               r.history),
           fmt("%d steps", r.history), fmt("%d steps", r.steps_scale_depressed),
           r.steps_scale_depressed == r.history}};
}

GradFormatResult grad_format_lesson() {
  constexpr std::int64_t kRows = 64, kCols = 256;
  std::vector<float> g = normal(std::size_t(kRows * kCols), 7);
  std::mt19937 gen(8);
  std::uniform_real_distribution<float> decades(-6, 0);
  for (std::int64_t r = 0; r < kRows; ++r) {
    const float f = std::pow(10.0f, r == 0 ? 0.0f : decades(gen));
    for (std::int64_t c = 0; c < kCols; ++c) g[std::size_t(r * kCols + c)] *= f;
  }
  GradFormatResult out;
  out.e5m2 = fp8::quantize_current(g, kRows, kCols, DType::kE5M2, kRows, kCols).stats;
  out.e4m3 = fp8::quantize_current(g, kRows, kCols, DType::kE4M3, kRows, kCols).stats;
  return out;
}

std::vector<Claim> grad_format_claims(const GradFormatResult& r) {
  const std::string claim = "output gradient over 6 decades, one scale: values flushed to zero";
  return {fraction_claim("E5M2: " + claim, r.e5m2.flushed, r.e5m2.values, 0.001),
          broken_by("grads-e4m3", "E4M3",
                    fraction_claim(claim, r.e4m3.flushed, r.e4m3.values, 0.001))};
}

OutlierResult outlier_lesson() {
  constexpr std::int64_t kRows = 64, kCols = 512, kTile = 128;
  std::vector<float> x = normal(std::size_t(kRows * kCols), 11);
  const std::size_t at = std::size_t(5 * kCols + 300);
  x[at] = 100 * fp8::amax(x);
  const Fp8Matrix t = fp8::quantize_current(x, kRows, kCols, DType::kE4M3, kRows, kCols);
  const Fp8Matrix b = fp8::quantize_current(x, kRows, kCols, DType::kE4M3, 1, kTile);
  OutlierResult r;
  const std::int64_t outlier_tile = b.tile_index(5, 300);
  for (std::int64_t i = 0; i < kRows * kCols; ++i) {
    if (b.tile_index(i / kCols, i % kCols) == outlier_tile) continue;
    const std::size_t j = std::size_t(i);
    ++r.rest;
    r.tensorwise_underflow += underflowed(t, j, x[j]);
    r.blockwise_underflow += underflowed(b, j, x[j]);
    r.tensorwise_flushed += x[j] != 0 && (t.codes[j] & 0x7F) == 0;
    r.blockwise_flushed += x[j] != 0 && (b.codes[j] & 0x7F) == 0;
  }
  return r;
}

std::vector<Claim> outlier_claims(const OutlierResult& r) {
  const std::string claim = "one 100x outlier: values elsewhere that underflow (subnormal or 0)";
  return {fraction_claim("blockwise: " + claim, r.blockwise_underflow, r.rest, 0.001),
          broken_by("per-tensor-outlier", "tensorwise",
                    fraction_claim(claim, r.tensorwise_underflow, r.rest, 0.001))};
}

}  // namespace mixpar::ch03
