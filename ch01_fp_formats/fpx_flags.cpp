#include "fpx_flags.h"

#include <string>

#include "util/cli.h"
#include "util/errors.h"

namespace mixpar::ch01 {

FpxFlags parse_fpx_flags(int argc, char** argv) {
  ArgParser args(
      "fpx",
      "Shows where the bits go: each value rounded (to nearest, ties to even) into FP32,\n"
      "FP16, BF16, FP8 E4M3 and FP8 E5M2. FP8 uses the saturating cast; the non-saturating\n"
      "result is shown beside it where it differs. Negative values: fpx -2.5 or fpx -- -2.5.");
  args.flag("table", "print max, min normal, min subnormal, epsilon and decimal digits")
      .flag("json", "print the values and/or the table as JSON")
      .positional("value", "numbers to show (e.g. 3.14159, 70000, 1e-8, -2.5, inf, nan)", false,
                  true);
  args.parse(argc, argv);
  FpxFlags f;
  for (const std::string& text : args.positionals()) {
    f.values.push_back({text, parse_double("value", text)});
  }
  f.table = args.get_flag("table");
  if (f.values.empty() && !f.table) {
    throw InputError("give one or more numbers, or --table (see --help)");
  }
  f.json = args.get_flag("json");
  return f;
}

}  // namespace mixpar::ch01
