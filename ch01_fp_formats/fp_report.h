// fp_report: what fpx prints, as strings (so the demo and the tests reuse it): one value in
// every lesson format with its sign / exponent / mantissa fields, stored value and rounding
// error; the range table computed by format_info; and both as JSON. FP8 rows use the
// saturating cast and add the non-saturating result where it differs.
#pragma once

#include <string>
#include <vector>

#include "bit_layout.h"

namespace mixpar::ch01 {

// A value as the user typed it and as parsed.
struct InputValue {
  std::string text;
  double value;
};

// "+1.5703125 x 2^1", "+0.25 x 2^-14 (subnormal)", "-0", "+inf", "nan": the stored value
// rebuilt from its fields.
std::string fields_formula(const BitFields& f);

// One block of aligned rows for one value: format, bits, s, exponent, mantissa, formula,
// stored value, absolute and relative error.
std::string value_text(const InputValue& v);

// The range table: s-e-m, bias, max, min normal, min subnormal, epsilon, decimal digits.
std::string range_text();

// {"values": [{"input": ..., "value": ..., "fp32": {...}, ...}], "table": {"fp32": {...}}},
// indented by 2: "values" present when values is non-empty, "table" when with_table.
// Non-finite numbers are the strings "inf", "-inf", "nan"; undefined errors are null.
std::string json_report(const std::vector<InputValue>& values, bool with_table);

}  // namespace mixpar::ch01
