// Numbers as text: vsnprintf measures, then writes; std::to_chars gives the shortest exact text.
#include "report/format.h"

#include <charconv>
#include <cmath>
#include <cstdarg>
#include <cstdio>

namespace mixpar {

std::string fmt(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, args);
  va_end(args);
  return out;
}

std::string num(double v, int digits) { return fmt("%.*g", digits, v); }

std::string exact_num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, result.ptr);
}

std::string pct(double fraction) {
  return std::isnan(fraction) ? "-" : fmt("%.3g%%", 100 * fraction);
}

}  // namespace mixpar
