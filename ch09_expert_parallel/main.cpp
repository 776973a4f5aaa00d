// ch09_expert_parallel: a Mixture-of-Experts layer and expert parallelism. Without --bug (or
// with --bug all): the router's precision, the equalities (one expert = the dense MLP, the
// grouped GEMM = each expert alone, permute then unpermute = the identity, ep 1 = 2 = 4,
// all-to-all = all-gather), capacity, load balancing, the aux loss's scaling rule, and the
// failure modes; --bug NAME shows one failure mode alone, its broken claim FAIL (expected).
// --json FILE also writes the data of the chapter's figures (scripts/figures.py) from the
// sections that ran. A failed claim exits with 1, a bad flag with 2.
#include <cstdio>
#include <string>

#include "ch09_expert_parallel/moe_demo_flags.h"
#include "ch09_expert_parallel/moe_lesson.h"
#include "report/claim_table.h"
#include "util/errors.h"
#include "util/json_file.h"

namespace {

using namespace mixpar;
using namespace mixpar::ch09;

void print(const Section& s, ClaimTable& checks, Json& figures) {
  std::printf("\n== %s\n%s", s.title.c_str(), s.text.c_str());
  checks.add(s.claims);
  if (s.figure.is_object()) {
    for (const auto& [key, value] : s.figure.as_object()) figures.set(key, value);
  }
}

int body(int argc, char** argv) {
  const MoeDemoFlags f = parse_moe_demo_flags(argc, argv);
  ClaimTable checks(f.bug);
  Json figures = Json::object();
  figures.set("chapter", "ch09_expert_parallel");
  if (f.bug == "all" || f.bug == "none") {
    for (Section (*section)() : {router_precision, dense_equality, grouped_gemm_equality,
                                 permutation_identity, expert_parallel_equality,
                                 capacity_and_dropping, load_balancing, aux_loss_scaling}) {
      print(section(), checks, figures);
    }
    // The failure modes that the sections above do not already measure.
    if (f.bug == "all") {
      for (const char* name : {"bias-counts-local", "expert-grads-wrong-group"}) {
        print(bug_section(name), checks, figures);
      }
    }
  } else {
    print(bug_section(f.bug), checks, figures);
  }
  if (!f.json_path.empty()) write_json_file(f.json_path, figures);
  return checks.print() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return mixpar::run_main(argc, argv, body); }
