#include "ch04_ddp/ddp_demo_flags.h"

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "ch04_ddp/ddp_scenarios.h"
#include "util/cli.h"
#include "util/errors.h"
#include "util/json_file.h"

namespace mixpar::ch04 {
namespace {

ArgParser make_parser() {
  ArgParser a("ch04_ddp",
              "Data parallel and the ring: reduce-scatter + all-gather by hand, DDP with\n"
              "gradient buckets, and what goes wrong when ranks stop agreeing.");
  a.option("bug", "all", "all | none | different-init | same-data | local-scaler | fp16-reduce")
      .option("ranks", "4", "data-parallel ranks (threads of this process), 2..8")
      .option("steps", "10", "training steps of each DDP run")
      .option("trace", "", "write a Chrome trace (JSON) of the timing run to this file")
      .option("json", "", "also write the figure's data (the ring's hops, the DDP timeline) here")
      .flag("overwrite",
            "replace an existing --trace or --json file (without it, an existing one is refused)");
  return a;
}

}  // namespace

DdpDemoFlags parse_ddp_demo_flags(int argc, char** argv) {
  ArgParser args = make_parser();
  args.parse(argc, argv);
  std::vector<std::string> choices = {"all", "none"};
  for (const std::string& b : bug_names()) choices.push_back(b);
  DdpDemoFlags f;
  f.bug = args.get_choice("bug", choices);
  f.ranks = static_cast<int>(args.get_int("ranks", 2, 8));
  f.steps = static_cast<int>(args.get_int("steps", 2, 1000));
  const bool overwrite = args.get_flag("overwrite");
  refuse_overwrite_without_output(overwrite, args.given("trace") || args.given("json"),
                                  "--trace or --json");
  f.trace_path =
      args.given("trace") ? checked_output_path("--trace", args.get("trace"), overwrite) : "";
  f.json_path = args.given("json") ? checked_output_path("--json", args.get("json"), overwrite) : "";
  // Two outputs on one file would destroy each other (one plan per run, as train_gpt's).
  std::error_code ec;
  if (!f.trace_path.empty() && !f.json_path.empty() &&
      std::filesystem::weakly_canonical(std::filesystem::absolute(f.trace_path), ec) ==
          std::filesystem::weakly_canonical(std::filesystem::absolute(f.json_path), ec)) {
    throw InputError("--trace " + f.trace_path + " and --json " + f.json_path +
                     " are the same file: each output needs its own");
  }
  return f;
}

}  // namespace mixpar::ch04
