// fp_lessons: overflow, underflow, swamping, accumulation, FP8 range and memory, computed.
// The inputs of each table are chosen here (they are the lesson's questions); every answer
// comes from rounding through the numerics library.
#include "fp_lessons.h"

#include <cmath>
#include <stdexcept>

namespace mixpar::ch01 {

const Encoded& FormatRow::at(DType t) const {
  for (const Encoded& e : encoded) {
    if (e.dtype == t) return e;
  }
  throw std::invalid_argument("FormatRow: no such format");
}

FormatRow round_everywhere(double x, Saturation sat) {
  FormatRow row{x, {}};
  for (std::size_t i = 0; i < std::size(kLessonFormats); ++i) {
    row.encoded[i] = encode(kLessonFormats[i], x, sat);
  }
  return row;
}

double round_sum(DType t, double acc, double x) { return encode(t, acc + x).stored; }

double add_in(DType t, double a, double b) {
  return round_sum(t, encode(t, a).stored, encode(t, b).stored);
}

namespace {
std::vector<FormatRow> rows_for(std::initializer_list<double> inputs) {
  std::vector<FormatRow> rows;
  for (double x : inputs) rows.push_back(round_everywhere(x));
  return rows;
}
}  // namespace

std::vector<FormatRow> overflow_rows() {
  // FP16's max, the last value that still rounds down to it, the first that rounds to inf
  // (the midpoint to the next binade rounds to even = inf), then the lesson's 70000.
  return rows_for({65504.0, 65519.0, 65520.0, 70000.0, 1e5, 1e38});
}

std::vector<FormatRow> underflow_rows() {
  // From FP16's smallest normal down through its subnormals: 3e-8 lies just above half of
  // the smallest subnormal 2^-24 (so it rounds up to it), 2.98e-8 just below (so to zero).
  return rows_for({1e-4, std::ldexp(1.0, -14), 1e-5, 1e-7, 6e-8, 3e-8, 2.98e-8, 1e-8, 1e-40});
}

double vanishing_threshold(DType t, double w) {
  int e = 0;
  std::frexp(std::fabs(w), &e);  // |w| = f * 2^e with f in [0.5, 1): w's binade is 2^(e-1)
  const double ulp = std::ldexp(info(t).epsilon, e - 1);
  return ulp / 2;
}

const SwampingResult& SwampingLesson::at(DType t) const {
  for (const SwampingResult& r : results) {
    if (r.dtype == t) return r;
  }
  throw std::invalid_argument("SwampingLesson: no such format");
}

SwampingLesson swamping_lesson(double weight, double update, double repeated_update, int steps) {
  SwampingLesson lesson{weight, update, repeated_update, steps, weight + steps * repeated_update,
                        {}};
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    SwampingResult r{t, add_in(t, weight, update), encode(t, weight).stored,
                     vanishing_threshold(t, weight)};
    for (int i = 0; i < steps; ++i) r.after_steps = add_in(t, r.after_steps, repeated_update);
    lesson.results.push_back(r);
  }
  return lesson;
}

double predicted_stall(DType accumulator, double value) {
  // The sum stalls at the first power of two P whose half-ulp P * 2^-(m+1) is >= value.
  const double target = std::ldexp(std::fabs(value), info(accumulator).mantissa_bits + 1);
  int e = 0;
  const double f = std::frexp(target, &e);
  return f == 0.5 ? target : std::ldexp(1.0, e);
}

const AccumulatorRun& AccumulationLesson::at(DType t) const {
  for (const AccumulatorRun& r : runs) {
    if (r.accumulator == t) return r;
  }
  throw std::invalid_argument("AccumulationLesson: no such accumulator");
}

namespace {
AccumulatorRun run_accumulator(DType t, double addend, int count) {
  AccumulatorRun run{t, 0.0, -1, NAN, predicted_stall(t, addend)};
  for (int i = 1; i <= count; ++i) {
    const double next = round_sum(t, run.sum, addend);
    if (next == run.sum && run.stall_step < 0) {
      run.stall_step = i;
      run.stall_value = run.sum;
    }
    run.sum = next;
  }
  return run;
}
}  // namespace

AccumulationLesson accumulation_lesson(double value, int count) {
  const double stored = encode(DType::kF16, value).stored;
  // count * stored is exact in FP64 here: stored has 11 significant bits, count < 2^31.
  AccumulationLesson lesson{value, stored, count, count * stored, {}};
  for (DType t : {DType::kF16, DType::kBF16, DType::kF32}) {
    lesson.runs.push_back(run_accumulator(t, stored, count));
  }
  return lesson;
}

Fp8Lesson fp8_lesson() {
  Fp8Lesson lesson{4.3e1, info(DType::kE4M3).max, info(DType::kE5M2).max, {}};
  // The article's 43; values between the E4M3 and E5M2 maxima; E5M2's max, a value that
  // still rounds down to it, the halfway point to 2^16 (ties to even: up, out of range).
  for (double x : {43.0, 100.0, 240.0, 448.0, 500.0, 1000.0, 57344.0, 60000.0, 61440.0, 1e5,
                   double(INFINITY)}) {
    lesson.casts.push_back(Fp8Cast{x, encode(DType::kE4M3, x, Saturation::kSatFinite),
                                   encode(DType::kE4M3, x, Saturation::kNoSat),
                                   encode(DType::kE5M2, x, Saturation::kSatFinite),
                                   encode(DType::kE5M2, x, Saturation::kNoSat)});
  }
  return lesson;
}

MemoryLesson memory_lesson(double params) {
  MemoryLesson m{};
  m.params = params;
  m.components = {{"parameters (fp16)", DType::kF16, 0},
                  {"gradients (fp16)", DType::kF16, 0},
                  {"master weights (fp32)", DType::kF32, 0},
                  {"Adam m (fp32)", DType::kF32, 0},
                  {"Adam v (fp32)", DType::kF32, 0}};
  for (MemoryComponent& c : m.components) {
    c.bytes_per_param = static_cast<double>(dtype_size(c.dtype));
    m.bytes_per_param += c.bytes_per_param;
  }
  m.fp16_param_bytes = params * static_cast<double>(dtype_size(DType::kF16));
  m.total_bytes = params * m.bytes_per_param;
  // Article A's figures for 7B (docs/SOURCES.md), quoted to be corrected: it took FP16 as 1
  // byte per parameter (7 GB) and so arrived at 7 + 7 + 84 = 98 GB.
  m.article_param_bytes = 7e9;
  m.article_total_bytes = 98e9;
  return m;
}

}  // namespace mixpar::ch01
