#include "ch09_expert_parallel/moe_demo_flags.h"

#include <vector>

#include "ch09_expert_parallel/moe_lesson.h"
#include "util/cli.h"

namespace mixpar::ch09 {

MoeDemoFlags parse_moe_demo_flags(int argc, char** argv) {
  std::vector<std::string> choices = {"all", "none"};
  std::string usage = "all | none";
  for (const std::string& b : bug_names()) choices.push_back(b), usage += " | " + b;
  ArgParser a("ch09_expert_parallel",
              "Expert parallelism: a Mixture-of-Experts layer, its equalities, its tokens\n"
              "dispatched over ranks, and the failure modes of routing and load balancing.");
  a.option("bug", "all", usage);
  a.parse(argc, argv);
  MoeDemoFlags f;
  f.bug = a.get_choice("bug", choices);
  return f;
}

}  // namespace mixpar::ch09
