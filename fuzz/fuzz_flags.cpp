// The flag parser (common/util/cli.h) that every tool's command line goes through: the input
// is split at newlines into argv, parsed against options, flags and positionals like
// train_gpt's, and every value read back as an integer, a double, a byte size and a choice.
// Any outcome but success or an InputError is a finding. ("--help" prints and exits, by
// design: such arguments are dropped.)
#include <string>

#include "fuzz_util.h"
#include "util/cli.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mixpar;
  fuzz::CommandLine cl("fuzz_flags", fuzz::text(data, size));
  ArgParser p("fuzz_flags", "flags like train_gpt's");
  p.option("batch", "32", "an integer").option("lr", "1e-3", "a double")
      .option("device-memory", "", "a byte size").option("dtype", "fp32", "a choice")
      .option("data", "", "a path").flag("resume", "a flag")
      .positional("value", "a positional", false, true);
  fuzz::expect_only_input_errors([&] {
    p.parse(cl.argc(), cl.argv());
    (void)p.get_int("batch");
  });
  fuzz::expect_only_input_errors([&] { (void)p.get_int("batch", 1, 4096); });  // a ranged one
  fuzz::expect_only_input_errors([&] { (void)p.get_double("lr"); });
  fuzz::expect_only_input_errors([&] {
    if (p.given("device-memory")) (void)parse_bytes("--device-memory", p.get("device-memory"));
  });
  fuzz::expect_only_input_errors([&] { (void)p.get_choice("dtype", {"fp32", "bf16", "fp16"}); });
  for (const std::string& v : p.positionals()) {
    fuzz::expect_only_input_errors([&] { (void)parse_int("value", v); });
    fuzz::expect_only_input_errors([&] { (void)parse_double("value", v); });
    fuzz::expect_only_input_errors([&] { (void)parse_bytes("value", v); });
  }
  return 0;
}
