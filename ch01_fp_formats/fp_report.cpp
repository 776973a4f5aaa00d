// fp_report: text and JSON renderings of bit_layout's results. Numbers are printed with
// the shortest text that reads back exactly, so a printed stored value hides no rounding.
#include "fp_report.h"

#include <cmath>

#include "report/format.h"
#include "report/text_table.h"
#include "util/json.h"

namespace mixpar::ch01 {

std::string fields_formula(const BitFields& f) {
  const std::string sign = f.sign ? "-" : "+";
  switch (f.value_class) {
    case ValueClass::kZero:
      return sign + "0";
    case ValueClass::kInfinity:
      return sign + "inf";
    case ValueClass::kNaN:
      return "nan";
    case ValueClass::kSubnormal:
    case ValueClass::kNormal:
      break;
  }
  std::string s =
      sign + exact_num(significand(f)) + " x 2^" + std::to_string(f.unbiased_exponent);
  if (f.value_class == ValueClass::kSubnormal) s += " (subnormal)";
  return s;
}

namespace {

std::string error_text(double e) {
  if (std::isnan(e)) return "-";
  if (e == 0) return "0";
  return fmt("%.2e", e);
}

std::vector<std::string> encoded_row(const std::string& label, const Encoded& e) {
  const BitFields f = decompose(e.dtype, e.bits);
  return {label,
          hex_bits(e.dtype, e.bits),
          std::to_string(f.sign),
          bit_string(f.exponent, f.exponent_bits),
          bit_string(f.mantissa, f.mantissa_bits),
          fields_formula(f),
          exact_num(e.stored),
          error_text(e.abs_error()),
          error_text(e.rel_error())};
}

bool is_fp8(DType t) { return t == DType::kE4M3 || t == DType::kE5M2; }

}  // namespace

std::string value_text(const InputValue& v) {
  TextTable table({"format", "bits", "s", "exponent", "mantissa", "= sign x significand x 2^E",
                   "stored", "abs error", "rel error"});
  for (DType t : kLessonFormats) {
    const Encoded sat = encode(t, v.value, Saturation::kSatFinite);
    table.add(encoded_row(std::string(format_key(t)), sat));
    if (!is_fp8(t)) continue;
    const Encoded nosat = encode(t, v.value, Saturation::kNoSat);
    if (nosat.bits != sat.bits) table.add(encoded_row("  nosat", nosat));
  }
  return v.text + " (as FP64: " + exact_num(v.value) + ")\n" + table.str();
}

namespace {
// "2^-14 = 6.103515625e-05" for powers of two, else the number alone.
std::string range_number(double v) {
  const std::string p = power_of_two(v);
  return p.empty() ? exact_num(v) : p + " = " + exact_num(v);
}
}  // namespace

std::string range_text() {
  TextTable table({"format", "s-e-m", "bias", "max", "min normal", "min subnormal", "epsilon",
                   "digits", "inf"});
  for (DType t : kLessonFormats) {
    const FormatInfo& fi = info(t);
    table.add({std::string(format_key(t)), fmt("1-%d-%d", fi.exponent_bits, fi.mantissa_bits),
               std::to_string(fi.bias), exact_num(fi.max), range_number(fi.min_normal),
               range_number(fi.min_subnormal), range_number(fi.epsilon),
               fmt("%.2f", fi.decimal_digits), fi.has_infinity ? "yes" : "no (NaN only)"});
  }
  return table.str();
}

namespace {

// JSON has no inf/NaN: non-finite values become the strings "inf", "-inf", "nan", so no
// information is lost (Json itself would write them as null).
Json json_number(double v) { return std::isfinite(v) ? Json(v) : Json(exact_num(v)); }

// An error that is undefined (input or stored value not finite) is null.
Json json_error(double e) { return std::isnan(e) ? Json() : Json(e); }

Json json_encoded(const Encoded& e, const Encoded& nosat) {
  const BitFields f = decompose(e.dtype, e.bits);
  const bool has_exponent =
      f.value_class == ValueClass::kNormal || f.value_class == ValueClass::kSubnormal;
  Json j = Json::object();
  j.set("bits", hex_bits(e.dtype, e.bits));
  j.set("sign", f.sign);
  j.set("exponent_field", bit_string(f.exponent, f.exponent_bits));
  j.set("mantissa_field", bit_string(f.mantissa, f.mantissa_bits));
  j.set("exponent", has_exponent ? Json(f.unbiased_exponent) : Json());
  j.set("class", class_name(f.value_class));
  j.set("value", json_number(e.stored));
  j.set("error", json_error(e.error()));
  j.set("abs_error", json_error(e.abs_error()));
  j.set("rel_error", json_error(e.rel_error()));
  if (nosat.bits != e.bits) {
    j.set("bits_nosat", hex_bits(e.dtype, nosat.bits));
    j.set("value_nosat", json_number(nosat.stored));
  }
  return j;
}

Json json_value(const InputValue& v) {
  Json j = Json::object();
  j.set("input", v.text);
  j.set("value", json_number(v.value));
  for (DType t : kLessonFormats) {
    const Encoded sat = encode(t, v.value, Saturation::kSatFinite);
    const Encoded nosat = is_fp8(t) ? encode(t, v.value, Saturation::kNoSat) : sat;
    j.set(format_key(t), json_encoded(sat, nosat));
  }
  return j;
}

Json json_format_info(const FormatInfo& fi) {
  Json j = Json::object();
  j.set("exponent_bits", fi.exponent_bits);
  j.set("mantissa_bits", fi.mantissa_bits);
  j.set("bias", fi.bias);
  j.set("has_infinity", fi.has_infinity);
  j.set("max", fi.max);
  j.set("min_normal", fi.min_normal);
  j.set("min_subnormal", fi.min_subnormal);
  j.set("epsilon", fi.epsilon);
  j.set("decimal_digits", fi.decimal_digits);
  return j;
}

}  // namespace

std::string json_report(const std::vector<InputValue>& values, bool with_table) {
  Json report = Json::object();
  if (!values.empty()) {
    Json list = Json::array();
    for (const InputValue& v : values) list.push_back(json_value(v));
    report.set("values", std::move(list));
  }
  if (with_table) {
    Json table = Json::object();
    for (DType t : kLessonFormats) table.set(format_key(t), json_format_info(info(t)));
    report.set("table", std::move(table));
  }
  return report.dump(2) + "\n";
}

}  // namespace mixpar::ch01
