// fpx: what a number becomes in FP32, FP16, BF16, FP8 E4M3 and FP8 E5M2 -- its sign,
// exponent and mantissa bits, the stored value and the rounding error -- and (--table) the
// range of each format, computed by the implementation. --json prints the same as JSON.
// Bad input is one line on stderr and exit code 2 (the flags are fpx_flags.cpp's).
#include <cstdio>

#include "fp_report.h"
#include "fpx_flags.h"
#include "util/errors.h"

namespace {

int fpx_main(int argc, char** argv) {
  const mixpar::ch01::FpxFlags f = mixpar::ch01::parse_fpx_flags(argc, argv);
  if (f.json) {
    std::fputs(mixpar::ch01::json_report(f.values, f.table).c_str(), stdout);
    return 0;
  }
  for (std::size_t i = 0; i < f.values.size(); ++i) {
    std::printf("%s%s", i ? "\n" : "", mixpar::ch01::value_text(f.values[i]).c_str());
  }
  if (f.table) std::printf("%s%s", f.values.empty() ? "" : "\n", mixpar::ch01::range_text().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return mixpar::run_main(argc, argv, fpx_main); }
