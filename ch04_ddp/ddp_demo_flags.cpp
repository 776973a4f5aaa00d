#include "ch04_ddp/ddp_demo_flags.h"

#include <vector>

#include "ch04_ddp/ddp_scenarios.h"
#include "util/cli.h"
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
      .option("json", "", "also write the figure's data (the ring's hops, the DDP timeline) here");
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
  f.trace_path =
      args.given("trace") ? checked_output_path("--trace", args.get("trace")) : std::string();
  f.json_path =
      args.given("json") ? checked_output_path("--json", args.get("json")) : std::string();
  return f;
}

}  // namespace mixpar::ch04
