#include "ch06_tensor_parallel/tp_demo_flags.h"

#include "util/cli.h"
#include "util/json_file.h"

namespace mixpar::ch06 {
namespace {

ArgParser make_parser() {
  ArgParser a("ch06_tensor_parallel",
              "Tensor parallelism: one GPT-2's layers split over tp ranks (threads), equal to\n"
              "the unsplit model; its traffic, its activation memory, and its failure modes.\n"
              "Context parallelism: causal attention split by sequence over cp ranks (ring and\n"
              "all-to-all), equal to one device; its traffic, work balance, memory, failures.");
  std::string bugs = "all | none";
  for (const std::string& b : tp_demo_bugs()) bugs += " | " + b;
  a.option("bug", "all", bugs).option("steps", "10", "training steps of each run");
  a.option("json", "",
           "also write the sharding map of block 0 at tp 2 and the cp work and traffic (the "
           "figures' data)");
  a.flag("overwrite", "replace an existing --json file (without it, an existing one is refused)");
  return a;
}

}  // namespace

const std::vector<std::string>& tp_demo_bugs() {
  static const std::vector<std::string> bugs = {"no-f-backward", "norm-counts-replicas",
                                                "unmasked-padding", "unsummed-layernorm",
                                                "heads-not-dividing", "unmasked-diagonal",
                                                "skipped-lse-merge", "unsummed-cp-gradients",
                                                "contiguous-positions"};
  return bugs;
}

TpDemoFlags parse_tp_demo_flags(int argc, char** argv) {
  ArgParser args = make_parser();
  args.parse(argc, argv);
  std::vector<std::string> choices = {"all", "none"};
  for (const std::string& b : tp_demo_bugs()) choices.push_back(b);
  TpDemoFlags f;
  f.bug = args.get_choice("bug", choices);
  f.steps = static_cast<int>(args.get_int("steps", 2, 200));
  refuse_overwrite_without_output(args.get_flag("overwrite"), args.given("json"), "--json");
  f.json_path = args.given("json")
                    ? checked_output_path("--json", args.get("json"), args.get_flag("overwrite"))
                    : std::string();
  return f;
}

}  // namespace mixpar::ch06
