// fp8_lesson: the accumulation lesson and FP8's failure modes, each a correct configuration
// against its mistake on the same data, measured with fp8_scaling and fp8_gemm. The demo's
// --bug names (no-promotion, stale-amax, grads-e4m3, per-tensor-outlier) pick one; the claims
// follow the --bug convention (report/claim_table.h). Nothing here prints.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp8_scaling.h"
#include "report/claim_table.h"

namespace mixpar::ch03 {

// The FP8 mistakes the demo can show, in its order.
const std::vector<std::string>& fp8_bug_names();

// Accumulation: a K = 4096 GEMM of E4M3 inputs (tensorwise scales) summed by FP32, by the
// 14-bit tensor-core accumulator alone, and by it promoted to FP32 every 128 elements.
// Errors: max |C - C_exact| / max |C_exact| over the outputs.
struct AccumulationResult {
  std::int64_t k = 0, outputs = 0;
  double fp32_error = 0, promoted_error = 0, unpromoted_error = 0;
};
AccumulationResult accumulation_lesson(std::int64_t k = 4096);
std::vector<Claim> accumulation_claims(const AccumulationResult& r);

// A stale amax: an activation whose amax is ~4 until `spike_step`, one step where a row of
// the batch spikes 100x, then normal again; delayed scaling with an amax history of
// `history` steps against tensorwise (current) scaling on the same tensors, step by step.
struct SpikeStep {
  float amax = 0;              // the tensor's own amax this step
  float delayed_scale = 0;     // the scale delayed scaling cast it with (from the history)
  float history_max = 0;       // max of the amax history that scale came from
  float tensorwise_scale = 0;  // the scale current scaling cast it with
  fp8::CastStats delayed, tensorwise;
};
struct SpikeResult {
  int history = 0, spike_step = 0;
  std::vector<SpikeStep> steps;
  // Steps after the spike whose delayed scale is below half the scale before the spike.
  int steps_scale_depressed = 0;
};
SpikeResult spike_lesson(int history = 16, int spike_step = 20, int steps = 60);
std::vector<Claim> spike_claims(const SpikeResult& r);

// Gradients in E5M2 (the hybrid recipe) against E4M3, tensorwise scale: an output gradient
// whose rows (tokens) span six decades of magnitude.
struct GradFormatResult {
  fp8::CastStats e5m2, e4m3;
};
GradFormatResult grad_format_lesson();
std::vector<Claim> grad_format_claims(const GradFormatResult& r);

// One scale per tensor with a 100x outlier: an activation of N(0,1) values with one value
// 100x its amax, cast with one scale (tensorwise) and per 1x128 tile (blockwise). Counted
// outside the outlier's tile: values that underflow (flush to zero or turn subnormal, keeping
// fewer than E4M3's 3 mantissa bits) and that flush to zero.
struct OutlierResult {
  std::int64_t rest = 0;  // values outside the outlier's tile
  std::int64_t tensorwise_underflow = 0, blockwise_underflow = 0;
  std::int64_t tensorwise_flushed = 0, blockwise_flushed = 0;
};
OutlierResult outlier_lesson();
std::vector<Claim> outlier_claims(const OutlierResult& r);

}  // namespace mixpar::ch03
