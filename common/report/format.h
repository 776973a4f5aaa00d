// Numbers as text, for the tables and messages of every demo and tool: printf into a string,
// a number with a given count of significant digits, an integer exactly, a double exactly
// (the shortest text that reads back as the same double) and a fraction as a percentage.
#pragma once

#include <concepts>
#include <string>

namespace mixpar {

// printf into a std::string: fmt("%.2f%%", 12.5) == "12.50%".
std::string fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));

// printf's %.<digits>g: num(0.000123456) == "0.000123456", num(3.14159, 4) == "3.142",
// num(1e-5) == "1e-05".
std::string num(double v, int digits = 6);
// An integer exactly: num(std::int64_t{50257}) == "50257".
template <std::integral T> std::string num(T v) { return std::to_string(v); }

// The shortest decimal text that reads back as exactly v ("3.140625", "5.960464477539063e-08"),
// or "inf", "-inf", "nan". A stored value printed this way hides no rounding error.
std::string exact_num(double v);

// A fraction as a percentage with 3 significant digits: pct(0.125) == "12.5%"; NaN is "-".
std::string pct(double fraction);

}  // namespace mixpar
