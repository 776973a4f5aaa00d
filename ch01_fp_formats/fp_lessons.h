// fp_lessons: the computations behind every table the ch01 demo prints, as functions that
// return plain structs, so the tests assert exactly what the demo shows. Nothing here prints
// and no result is typed in: each number is produced by rounding through the formats.
// Arithmetic "in format T" means: operands stored in T, exact result rounded once to T.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "bit_layout.h"

namespace mixpar::ch01 {

// One value rounded into all five lesson formats (one row of a lesson table).
struct FormatRow {
  double input;
  std::array<Encoded, std::size(kLessonFormats)> encoded;  // in kLessonFormats order
  const Encoded& at(DType t) const;
};
FormatRow round_everywhere(double x, Saturation sat = Saturation::kSatFinite);

// acc + x rounded once into format t: an accumulator of format t receiving addend x.
// The sum is formed in FP64, where it is exact for operands of at most 24 significant bits
// whose exponents are less than 29 apart (every sum in this lesson), then rounded once to
// t: the correctly rounded result of an adder that keeps t's precision.
double round_sum(DType t, double acc, double x);
// a + b with both operands first stored in t, then the sum rounded to t.
double add_in(DType t, double a, double b);

// Overflow: values around FP16's max (65504) and far above it, in every format.
std::vector<FormatRow> overflow_rows();
// Underflow: values from FP16's smallest normal (2^-14) down past its smallest subnormal.
std::vector<FormatRow> underflow_rows();

// Swamping: a small update added to a larger weight disappears when it is below half the
// weight's ulp. This is the reason mixed precision keeps FP32 master weights.
struct SwampingResult {
  DType dtype;
  double one_step;     // weight + update, once
  double after_steps;  // weight + repeated_update, `steps` times in this format
  double threshold;    // updates of at most this size leave the weight unchanged
};
struct SwampingLesson {
  double weight;
  double update;           // the one-step update
  double repeated_update;  // the update of the training-loop experiment
  int steps;
  double exact_after_steps;
  std::vector<SwampingResult> results;  // FP32, FP16, BF16
  const SwampingResult& at(DType t) const;
};
SwampingLesson swamping_lesson(double weight = 0.5, double update = 1e-7,
                               double repeated_update = 1e-5, int steps = 10000);

// The largest update that vanishes when added to w in format t: half of w's ulp (a tie
// rounds to even, so exactly half an ulp also vanishes when w's mantissa is even).
double vanishing_threshold(DType t, double w);

// Accumulation: `count` copies of one FP16 value summed with accumulators of different
// formats. A short accumulator stops growing once the value is at most half its ulp.
struct AccumulatorRun {
  DType accumulator;
  double sum;
  int stall_step;          // first step that left the sum unchanged; -1 if none
  double stall_value;      // the sum when it stalled (NaN if it never did)
  double predicted_stall;  // smallest power of two P with value <= P * 2^-(mantissa+1)
};
struct AccumulationLesson {
  double value;         // as requested
  double stored_value;  // the addend after rounding to FP16 (the inputs are FP16)
  int count;
  double exact;                      // count * stored_value, in FP64
  std::vector<AccumulatorRun> runs;  // FP16, BF16, FP32 accumulators
  const AccumulatorRun& at(DType t) const;
};
AccumulationLesson accumulation_lesson(double value = 0.1, int count = 10000);
double predicted_stall(DType accumulator, double value);

// FP8 range: source article C's (docs/SOURCES.md) "±4.3e1" against the implementation's
// maxima, and what saturating and non-saturating casts do with values beyond them.
struct Fp8Cast {
  double input;
  Encoded e4m3_sat, e4m3_nosat, e5m2_sat, e5m2_nosat;
};
struct Fp8Lesson {
  double article_claimed_max;  // 4.3e1, as printed in article C
  double e4m3_max, e5m2_max;   // from format_info
  std::vector<Fp8Cast> casts;
};
Fp8Lesson fp8_lesson();

// Memory: bytes for a model's parameters in FP16 and for mixed-precision Adam, from the
// element sizes of each stored tensor, against article A's figures (docs/SOURCES.md).
struct MemoryComponent {
  std::string name;
  DType dtype;
  double bytes_per_param;
};
struct MemoryLesson {
  double params;
  std::vector<MemoryComponent> components;  // fp16 params, fp16 grads, fp32 master, m, v
  double fp16_param_bytes;
  double bytes_per_param;  // sum over components
  double total_bytes;
  double article_param_bytes;  // article A: "7B with FP16 params = 7 GB"
  double article_total_bytes;  // article A: 98 GB for mixed-precision Adam
};
MemoryLesson memory_lesson(double params = 7e9);

}  // namespace mixpar::ch01
