#include "fp_formats_demo_flags.h"

#include <cmath>
#include <cstdint>

#include "bit_layout.h"
#include "util/cli.h"
#include "util/errors.h"
#include "util/json_file.h"

namespace mixpar::ch01 {
namespace {

struct GemmShape {
  int m, n, k;
};

GemmShape parse_gemm_shape(const std::string& text) {
  const auto x1 = text.find('x'), x2 = text.find('x', x1 == std::string::npos ? x1 : x1 + 1);
  if (x1 == std::string::npos || x2 == std::string::npos) {
    throw InputError("--gemm: '" + text + "' is not MxNxK (e.g. 256x256x4096)");
  }
  const auto dim = [&](std::size_t begin, std::size_t end) {
    const std::int64_t v = parse_int("--gemm", text.substr(begin, end - begin));
    if (v < 1 || v > 65536) throw InputError("--gemm: each of M, N, K must be in 1..65536");
    return static_cast<int>(v);
  };
  return {dim(0, x1), dim(x1 + 1, x2), dim(x2 + 1, text.size())};
}

}  // namespace

FpFormatsDemoFlags parse_fp_formats_demo_flags(int argc, char** argv) {
  ArgParser args("ch01_fp_formats",
                 "Where the bits go: the number formats of mixed-precision training, their\n"
                 "ranges and failure modes, each claim checked (exit code 1 if one fails).");
  args.option("update", "1e-7", "the small update added to the weight 0.5 in section 5")
      .option("acc-value", "0.1", "the value summed in section 6 (stored in FP16)")
      .option("acc-count", "10000", "how many times it is summed")
      .option("gemm", "256x256x4096", "the GEMM of section 7, MxNxK")
      .option("gemm-inputs", "positive", "positive ([0,1)) or signed ([-1,1)) GEMM inputs")
      .option("json", "", "also write the figure's data (formats, FP8 values) to this file")
      .flag("overwrite", "replace an existing --json file (without it, an existing one is refused)");
  args.parse(argc, argv);
  FpFormatsDemoFlags f;
  refuse_overwrite_without_output(args.get_flag("overwrite"), args.given("json"), "--json");
  f.json_path = args.given("json")
                    ? checked_output_path("--json", args.get("json"), args.get_flag("overwrite"))
                    : std::string();
  f.update = args.get_double("update");
  if (!std::isfinite(f.update) || !(f.update > 0)) {
    throw InputError("--update must be a positive finite number, got '" + args.get("update") + "'");
  }
  f.acc_value = args.get_double("acc-value");
  const double acc_stored = encode(DType::kF16, f.acc_value).stored;
  if (!std::isfinite(f.acc_value) || !(f.acc_value > 0) || !std::isfinite(acc_stored) ||
      acc_stored == 0) {
    throw InputError("--acc-value must be a positive number that FP16 holds as a finite, "
                     "nonzero value (2^-24 .. 65504), got '" + args.get("acc-value") + "'");
  }
  const std::int64_t count = args.get_int("acc-count");
  if (count < 1 || count > 100000000) throw InputError("--acc-count must be in 1..1e8");
  f.acc_count = static_cast<int>(count);
  const GemmShape g = parse_gemm_shape(args.get("gemm"));
  // The FP16-accumulating loop is scalar: 2^30 multiply-adds take a few seconds.
  if (double(g.m) * double(g.n) * double(g.k) > std::ldexp(1.0, 30)) {
    throw InputError("--gemm: M x N x K must be at most 2^30 (the default is 2^28), got '" +
                     args.get("gemm") + "'");
  }
  f.gemm_m = g.m;
  f.gemm_n = g.n;
  f.gemm_k = g.k;
  f.gemm_inputs = args.get_choice("gemm-inputs", {"positive", "signed"}) == "signed"
                      ? GemmInputs::kSigned
                      : GemmInputs::kPositive;
  return f;
}

}  // namespace mixpar::ch01
