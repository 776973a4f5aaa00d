#include "ch09_expert_parallel/moe_demo_flags.h"

#include <vector>

#include "ch09_expert_parallel/moe_lesson.h"
#include "util/cli.h"
#include "util/json_file.h"

namespace mixpar::ch09 {

MoeDemoFlags parse_moe_demo_flags(int argc, char** argv) {
  std::vector<std::string> choices = {"all", "none"};
  std::string usage = "all | none";
  for (const std::string& b : bug_names()) choices.push_back(b), usage += " | " + b;
  ArgParser a("ch09_expert_parallel",
              "Expert parallelism: a Mixture-of-Experts layer, its equalities, its tokens\n"
              "dispatched over ranks, and the failure modes of routing and load balancing.");
  a.option("bug", "all", usage)
      .option("json", "",
              "also write the figures' data here: the tokens per expert step by step, the "
              "dropped tokens by capacity factor, the ep bytes by dispatch")
      .flag("overwrite", "replace an existing --json file (without it, an existing one is refused)");
  a.parse(argc, argv);
  MoeDemoFlags f;
  f.bug = a.get_choice("bug", choices);
  refuse_overwrite_without_output(a.get_flag("overwrite"), a.given("json"), "--json");
  f.json_path = a.given("json")
                    ? checked_output_path("--json", a.get("json"), a.get_flag("overwrite"))
                    : std::string();
  return f;
}

}  // namespace mixpar::ch09
