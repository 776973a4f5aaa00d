// ch01_fp_formats: where the bits go. Prints the lesson's tables -- ranges, overflow,
// underflow, swamping, 3.14159 in every format, accumulation, a GEMM with FP16 vs FP32
// accumulation, the FP8 range and the 7B memory bill -- all computed, never typed in.
// Every claim is checked (expected vs measured); any failure makes the exit code 1.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "fp_formats_demo_flags.h"
#include "fp_lessons.h"
#include "fp_report.h"
#include "gemm_lesson.h"
#include "report/format.h"
#include "report/text_table.h"
#include "util/errors.h"
#include "util/json_file.h"

namespace {

using namespace mixpar;
using namespace mixpar::ch01;

// The claims of one section: printed as a table of expected vs measured under its numbers.
class Checks {
 public:
  void expect(const std::string& claim, const std::string& expected, const std::string& measured,
              bool ok) {
    table_.add({ok ? "ok" : "FAIL", claim, expected, measured});
    failures_ += ok ? 0 : 1;
    ++count_;
  }
  // Prints the section's claims and starts a new section.
  void flush() {
    std::printf("\n%s", table_.str().c_str());
    table_ = TextTable({"check", "claim", "expected", "measured"});
  }
  int failures() const { return failures_; }
  int count() const { return count_; }

 private:
  TextTable table_{{"check", "claim", "expected", "measured"}};
  int failures_ = 0;
  int count_ = 0;
};

std::string sci(double v) { return fmt("%.2e", v); }
std::string gb(double bytes) { return fmt("%g GB", bytes / 1e9); }

void heading(const char* title) { std::printf("\n== %s\n", title); }

void section_formats(Checks& checks) {
  heading("1. The formats: ranges computed by format_info (the same table as fpx --table)");
  std::printf("%s", range_text().c_str());
  const FormatInfo &f16 = info(DType::kF16), &bf16 = info(DType::kBF16);
  checks.expect("FP16 max", "65504", exact_num(f16.max), f16.max == 65504);
  checks.expect("BF16 has FP32's range (same min normal)", exact_num(info(DType::kF32).min_normal),
                exact_num(bf16.min_normal), bf16.min_normal == info(DType::kF32).min_normal);
  checks.expect("BF16 keeps fewer digits than FP16", "eps 2^-7 > 2^-10",
                power_of_two(bf16.epsilon) + " vs " + power_of_two(f16.epsilon),
                bf16.epsilon > f16.epsilon);
  checks.flush();
}

void section_overflow(Checks& checks) {
  heading("2. Overflow: FP16 runs out of exponent at 65504, BF16 does not");
  TextTable t({"x", "fp32", "fp16", "bf16", "bf16 rel error"});
  const std::vector<FormatRow> rows = overflow_rows();
  for (const FormatRow& r : rows) {
    t.add({exact_num(r.input), exact_num(r.at(DType::kF32).stored),
           exact_num(r.at(DType::kF16).stored), exact_num(r.at(DType::kBF16).stored),
           pct(r.at(DType::kBF16).rel_error())});
  }
  std::printf("%s", t.str().c_str());
  const FormatRow big = round_everywhere(70000);
  checks.expect("70000 in FP16", "inf", exact_num(big.at(DType::kF16).stored),
                std::isinf(big.at(DType::kF16).stored));
  const Encoded b = big.at(DType::kBF16);
  checks.expect("70000 in BF16: finite, within 1%", "finite, < 1%",
                exact_num(b.stored) + ", " + pct(b.rel_error()),
                std::isfinite(b.stored) && b.rel_error() < 0.01);
  const double below = round_everywhere(65519).at(DType::kF16).stored;
  const double tie = round_everywhere(65520).at(DType::kF16).stored;
  checks.expect("65519 in FP16 rounds down to max", "65504", exact_num(below), below == 65504);
  checks.expect("65520 (halfway to 2^16) in FP16", "inf", exact_num(tie), std::isinf(tie));
  checks.flush();
}

void section_underflow(Checks& checks) {
  heading("3. Underflow: below 2^-14 FP16 goes subnormal, losing digits, then zero");
  TextTable t({"x", "fp16", "fp16 class", "fp16 rel error", "bf16", "bf16 rel error"});
  for (const FormatRow& r : underflow_rows()) {
    const Encoded h = r.at(DType::kF16), b = r.at(DType::kBF16);
    t.add({exact_num(r.input), exact_num(h.stored),
           std::string(class_name(decompose(h.dtype, h.bits).value_class)), pct(h.rel_error()),
           exact_num(b.stored), pct(b.rel_error())});
  }
  std::printf("%s", t.str().c_str());
  const FormatInfo& f16 = info(DType::kF16);
  const double tiny = encode(DType::kF16, 1e-8).stored, six = encode(DType::kF16, 6e-8).stored;
  checks.expect("1e-8 in FP16", "0", exact_num(tiny), tiny == 0);
  checks.expect("6e-8 in FP16 is the smallest subnormal", "2^-24",
                power_of_two(six) + " = " + exact_num(six),
                six == f16.min_subnormal && six == std::ldexp(1.0, -24));
  const std::string range =
      std::string("[") + power_of_two(f16.min_subnormal) + ", " + power_of_two(f16.min_normal);
  checks.expect("FP16 subnormal range", "[2^-24, 2^-14)", range + ")",
                f16.min_subnormal == std::ldexp(1.0, -24) && f16.min_normal == std::ldexp(1.0, -14));
  const Encoded sub = encode(DType::kF16, 1e-7);
  checks.expect("1e-7 in FP16 (subnormal) loses > 1%", "> 1%", pct(sub.rel_error()),
                sub.rel_error() > 0.01);
  const Encoded b = encode(DType::kBF16, 1e-8);
  checks.expect("1e-8 in BF16 stays within 1%", "< 1%", pct(b.rel_error()), b.rel_error() < 0.01);
  checks.flush();
}

void section_pi(Checks& checks) {
  heading("4. Where the bits go: 3.14159 in every format (fpx 3.14159)");
  std::printf("%s", value_text({"3.14159", 3.14159}).c_str());
  const double h = encode(DType::kF16, 3.14159).stored, b = encode(DType::kBF16, 3.14159).stored;
  checks.expect("3.14159 in FP16", "3.140625", exact_num(h), h == 3.140625);
  checks.expect("3.14159 in BF16", "3.140625", exact_num(b), b == 3.140625);
  const Encoded f = encode(DType::kF32, 3.14159);
  checks.expect("FP32 rel error <= eps/2", "<= " + sci(info(DType::kF32).epsilon / 2),
                sci(f.rel_error()), f.rel_error() <= info(DType::kF32).epsilon / 2);
  checks.flush();
}

void section_swamping(Checks& checks, double update) {
  heading("5. Swamping: small updates vanish next to a large weight (why master weights exist)");
  const SwampingLesson s = swamping_lesson(0.5, update);
  TextTable t({"format", fmt("0.5 + %s", exact_num(update).c_str()), "updates <= this vanish",
               fmt("0.5 + %d x %s", s.steps, exact_num(s.repeated_update).c_str()), "exact"});
  for (const SwampingResult& r : s.results) {
    t.add({std::string(format_key(r.dtype)), exact_num(r.one_step), exact_num(r.threshold),
           exact_num(r.after_steps), exact_num(s.exact_after_steps)});
  }
  std::printf("%s", t.str().c_str());
  for (DType d : {DType::kF16, DType::kBF16}) {
    checks.expect(fmt("0.5 + %s in %s", exact_num(update).c_str(), format_key(d).data()), "0.5",
                  exact_num(s.at(d).one_step), s.at(d).one_step == 0.5);
  }
  const double f32 = s.at(DType::kF32).one_step;
  checks.expect(fmt("0.5 + %s in fp32", exact_num(update).c_str()), "> 0.5", exact_num(f32),
                f32 > 0.5);
  const double w16 = s.at(DType::kF16).after_steps, w32 = s.at(DType::kF32).after_steps;
  checks.expect("FP16 weight after the training loop", "0.5 (never moved)", exact_num(w16),
                w16 == 0.5);
  const double rel32 = std::fabs(w32 - s.exact_after_steps) / s.exact_after_steps;
  checks.expect("FP32 master weight after the loop", "within 0.1% of exact", pct(rel32),
                rel32 < 1e-3);
  checks.flush();
}

void section_accumulation(Checks& checks, double value, int count) {
  heading("6. Accumulation: a short accumulator stops growing");
  const AccumulationLesson a = accumulation_lesson(value, count);
  std::printf("  %d x %s (stored in FP16 as %s); exact sum of the FP16 inputs: %s\n", a.count,
              exact_num(a.value).c_str(), exact_num(a.stored_value).c_str(),
              exact_num(a.exact).c_str());
  TextTable t(
      {"accumulator", "sum", "rel error", "stalled at step", "stalled at", "predicted stall"});
  for (const AccumulatorRun& r : a.runs) {
    t.add({std::string(format_key(r.accumulator)), exact_num(r.sum),
           pct(std::fabs(r.sum - a.exact) / a.exact),
           r.stall_step < 0 ? "never" : std::to_string(r.stall_step),
           r.stall_step < 0 ? "-" : exact_num(r.stall_value), exact_num(r.predicted_stall)});
  }
  std::printf("%s", t.str().c_str());
  const AccumulatorRun &h = a.at(DType::kF16), &f = a.at(DType::kF32);
  checks.expect("FP16 accumulator stalls where predicted", exact_num(h.predicted_stall),
                exact_num(h.sum), h.stall_step > 0 && h.sum == h.predicted_stall);
  const double rel32 = std::fabs(f.sum - a.exact) / a.exact;
  checks.expect("FP32 accumulator never stalls, error < 0.01%", "never, < 0.01%",
                (f.stall_step < 0 ? "never, " : "stalled, ") + pct(rel32),
                f.stall_step < 0 && rel32 < 1e-4);
  checks.flush();
}

void section_gemm(Checks& checks, int m, int n, int k, GemmInputs inputs) {
  heading("7. A GEMM on FP16 inputs: FP16 vs FP32 accumulation against FP64");
  const GemmLesson g = gemm_lesson(m, n, k, inputs);
  std::printf(
      "  C[%d,%d] = A[%d,%d] x B[%d,%d], inputs uniform in %s, rounded to FP16;\n"
      "  error of each element relative to |A| x |B| (= |C| for positive inputs)\n",
      m, n, m, k, k, n, inputs == GemmInputs::kPositive ? "[0, 1)" : "[-1, 1)");
  TextTable t({"accumulator", "max rel error", "mean rel error"});
  t.add({"fp16", sci(g.fp16_acc.max_rel), sci(g.fp16_acc.mean_rel)});
  t.add({"fp32", sci(g.fp32_acc.max_rel), sci(g.fp32_acc.mean_rel)});
  std::printf("%s", t.str().c_str());
  checks.expect("FP16 accumulation error / FP32's (mean)", ">= 100x", fmt("%.0fx", g.mean_ratio()),
                g.mean_ratio() >= 100);
  checks.expect("FP32 accumulation mean rel error", "< 1e-5", sci(g.fp32_acc.mean_rel),
                g.fp32_acc.mean_rel < 1e-5);
  checks.flush();
}

void section_fp8(Checks& checks) {
  heading("8. FP8: the range article C got wrong; saturating vs non-saturating casts");
  const Fp8Lesson f = fp8_lesson();
  TextTable t({"x", "e4m3 (sat)", "e4m3 (nosat)", "e5m2 (sat)", "e5m2 (nosat)"});
  for (const Fp8Cast& c : f.casts) {
    t.add({exact_num(c.input), exact_num(c.e4m3_sat.stored), exact_num(c.e4m3_nosat.stored),
           exact_num(c.e5m2_sat.stored), exact_num(c.e5m2_nosat.stored)});
  }
  std::printf("%s", t.str().c_str());
  checks.expect("E4M3 max (article C: +-4.3e1)", "448", exact_num(f.e4m3_max), f.e4m3_max == 448);
  checks.expect("E5M2 max (article C: +-4.3e1)", "57344", exact_num(f.e5m2_max),
                f.e5m2_max == 57344);
  const double hundred = encode(DType::kE4M3, 100).stored;
  checks.expect("100 > 43 is a finite E4M3 value", "finite", exact_num(hundred),
                std::isfinite(hundred) && hundred > f.article_claimed_max);
  const Encoded sat = encode(DType::kE4M3, 500),
                nosat = encode(DType::kE4M3, 500, Saturation::kNoSat);
  checks.expect("500 -> E4M3 saturating / non-saturating", "448 / nan",
                exact_num(sat.stored) + " / " + exact_num(nosat.stored),
                sat.stored == 448 && std::isnan(nosat.stored));
  // 61440 is halfway from 57344 (mantissa 11, odd) to 2^16 (even): the tie rounds to 2^16,
  // which E5M2 cannot hold, so the non-saturating cast gives inf; 60000 still rounds down.
  const Encoded below = encode(DType::kE5M2, 60000, Saturation::kNoSat);
  const Encoded tie = encode(DType::kE5M2, 61440, Saturation::kNoSat);
  checks.expect("60000 / 61440 -> E5M2 non-saturating", "57344 / inf",
                exact_num(below.stored) + " / " + exact_num(tie.stored),
                below.stored == 57344 && std::isinf(tie.stored));
  checks.flush();
}

void section_memory(Checks& checks) {
  heading("9. Memory for 7B parameters: article A's 7 GB and 98 GB, recomputed");
  const MemoryLesson m = memory_lesson(7e9);
  TextTable t({"tensor", "bytes/param", "for 7e9 params"});
  for (const MemoryComponent& c : m.components) {
    t.add({c.name, exact_num(c.bytes_per_param), gb(c.bytes_per_param * m.params)});
  }
  t.add({"total (mixed-precision Adam)", exact_num(m.bytes_per_param), gb(m.total_bytes)});
  std::printf("%s", t.str().c_str());
  checks.expect("7B params in FP16 (article A: 7 GB)", "14 GB", gb(m.fp16_param_bytes),
                m.fp16_param_bytes == 14e9 && m.fp16_param_bytes != m.article_param_bytes);
  checks.expect("mixed-precision Adam bytes/param", "16", exact_num(m.bytes_per_param),
                m.bytes_per_param == 16);
  checks.expect("7B with mixed-precision Adam (article A: 98 GB)", "112 GB", gb(m.total_bytes),
                m.total_bytes == 112e9 && m.total_bytes != m.article_total_bytes);
  checks.flush();
}

// The figure's data (scripts/figures.py draws each format on a log number line): every
// format's edges, all positive finite FP8 values, and the accumulation stall of section 6.
Json figure_data(const AccumulationLesson& acc) {
  Json formats = Json::array();
  for (DType t : kLessonFormats) {
    const FormatInfo& f = info(t);
    Json j = Json::object();
    j.set("name", std::string(f.name));
    j.set("exponent_bits", f.exponent_bits);
    j.set("mantissa_bits", f.mantissa_bits);
    j.set("bias", f.bias);
    j.set("max", f.max);
    j.set("min_normal", f.min_normal);
    j.set("min_subnormal", f.min_subnormal);
    j.set("epsilon", f.epsilon);
    j.set("has_infinity", f.has_infinity);
    if (t == DType::kE4M3 || t == DType::kE5M2) {
      Json values = Json::array();
      for (std::uint32_t bits = 1; bits < 0x80; ++bits) {  // sign 0, every pattern but +0
        const double v = decode(t, bits);
        if (std::isfinite(v)) values.push_back(v);
      }
      j.set("values", std::move(values));
    }
    formats.push_back(std::move(j));
  }
  Json stalls = Json::array();
  for (const AccumulatorRun& r : acc.runs) {
    Json j = Json::object();
    j.set("accumulator", std::string(format_key(r.accumulator)));
    j.set("sum", r.sum);
    j.set("stall_step", r.stall_step);
    j.set("predicted_stall", r.predicted_stall);
    stalls.push_back(std::move(j));
  }
  Json accumulation = Json::object();
  accumulation.set("value", acc.value);
  accumulation.set("count", acc.count);
  accumulation.set("exact", acc.exact);
  accumulation.set("runs", std::move(stalls));
  Json out = Json::object();
  out.set("chapter", "ch01_fp_formats");
  out.set("formats", std::move(formats));
  out.set("accumulation", std::move(accumulation));
  return out;
}

int demo_main(int argc, char** argv) {
  // Every flag is read and checked before the first line of the lesson is printed.
  const FpFormatsDemoFlags f = parse_fp_formats_demo_flags(argc, argv);
  std::printf("ch01_fp_formats: where the bits go\n");
  Checks checks;
  section_formats(checks);
  section_overflow(checks);
  section_underflow(checks);
  section_pi(checks);
  section_swamping(checks, f.update);
  section_accumulation(checks, f.acc_value, f.acc_count);
  section_gemm(checks, f.gemm_m, f.gemm_n, f.gemm_k, f.gemm_inputs);
  section_fp8(checks);
  section_memory(checks);
  std::printf("\n%d of %d claims hold%s\n", checks.count() - checks.failures(), checks.count(),
              checks.failures() ? ": see FAIL above" : "");
  if (!f.json_path.empty()) {
    write_json_file(f.json_path, figure_data(accumulation_lesson(f.acc_value, f.acc_count)));
  }
  return checks.failures() ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return mixpar::run_main(argc, argv, demo_main); }
