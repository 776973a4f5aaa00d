// ch09_expert_parallel: a Mixture-of-Experts layer and expert parallelism. Without --bug (or
// with --bug all): the router's precision, the equalities (one expert = the dense MLP, the
// grouped GEMM = each expert alone, permute then unpermute = the identity, ep 1 = 2 = 4,
// all-to-all = all-gather), capacity, load balancing, the aux loss's scaling rule, and the
// failure modes; --bug NAME shows one failure mode alone, its broken claim FAIL (expected).
// A failed claim exits with 1, a bad flag with 2.
#include <cstdio>
#include <string>

#include "ch09_expert_parallel/moe_demo_flags.h"
#include "ch09_expert_parallel/moe_lesson.h"
#include "report/claim_table.h"
#include "util/errors.h"

namespace {

using namespace mixpar;
using namespace mixpar::ch09;

void print(const Section& s, ClaimTable& checks) {
  std::printf("\n== %s\n%s", s.title.c_str(), s.text.c_str());
  checks.add(s.claims);
}

int body(int argc, char** argv) {
  const MoeDemoFlags f = parse_moe_demo_flags(argc, argv);
  ClaimTable checks(f.bug);
  if (f.bug == "all" || f.bug == "none") {
    for (Section (*section)() : {router_precision, dense_equality, grouped_gemm_equality,
                                 permutation_identity, expert_parallel_equality,
                                 capacity_and_dropping, load_balancing, aux_loss_scaling}) {
      print(section(), checks);
    }
    // The failure modes that the sections above do not already measure.
    if (f.bug == "all") {
      for (const char* name : {"bias-counts-local", "expert-grads-wrong-group"}) {
        print(bug_section(name), checks);
      }
    }
  } else {
    print(bug_section(f.bug), checks);
  }
  return checks.print() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return mixpar::run_main(argc, argv, body); }
