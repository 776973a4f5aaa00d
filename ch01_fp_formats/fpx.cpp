// fpx: what a number becomes in FP32, FP16, BF16, FP8 E4M3 and FP8 E5M2 -- its sign,
// exponent and mantissa bits, the stored value and the rounding error -- and (--table) the
// range of each format, computed by the implementation. --json prints the same as JSON.
// Bad input is one line on stderr and exit code 2.
#include <cstdio>
#include <string>
#include <vector>

#include "fp_report.h"
#include "util/cli.h"
#include "util/errors.h"

namespace {

int fpx_main(int argc, char** argv) {
  mixpar::ArgParser args(
      "fpx",
      "Shows where the bits go: each value rounded (to nearest, ties to even) into FP32,\n"
      "FP16, BF16, FP8 E4M3 and FP8 E5M2. FP8 uses the saturating cast; the non-saturating\n"
      "result is shown beside it where it differs. Negative values: fpx -2.5 or fpx -- -2.5.");
  args.flag("table", "print max, min normal, min subnormal, epsilon and decimal digits")
      .flag("json", "print the values and/or the table as JSON")
      .positional("value", "numbers to show (e.g. 3.14159, 70000, 1e-8, -2.5, inf, nan)", false,
                  true);
  args.parse(argc, argv);

  std::vector<mixpar::ch01::InputValue> values;
  for (const std::string& text : args.positionals()) {
    values.push_back({text, mixpar::parse_double("value", text)});
  }
  const bool table = args.get_flag("table");
  if (values.empty() && !table) {
    throw mixpar::InputError("give one or more numbers, or --table (see --help)");
  }
  if (args.get_flag("json")) {
    std::fputs(mixpar::ch01::json_report(values, table).c_str(), stdout);
    return 0;
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::printf("%s%s", i ? "\n" : "", mixpar::ch01::value_text(values[i]).c_str());
  }
  if (table) std::printf("%s%s", values.empty() ? "" : "\n", mixpar::ch01::range_text().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return mixpar::run_main(argc, argv, fpx_main); }
