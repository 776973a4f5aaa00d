#include "master_weights_demo_flags.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "fp8_lesson.h"

#include "util/cli.h"
#include "util/errors.h"
#include "util/json_file.h"

namespace mixpar::ch03 {
namespace {

ArgParser make_parser() {
  ArgParser a("ch03_master_weights",
              "FP32 master weights: the correct order unscale -> check -> clip -> step -> re-cast\n"
              "against each mistake, and the memory bill measured by the ledger.");
  a.option("bug", "all",
           "all | clip-before-unscale | no-unscale | fp16-weights | FP8 (implies --fp8): "
           "no-promotion | stale-amax | grads-e4m3 | per-tensor-outlier")
      .flag("fp8", "the FP8 part instead: accumulation with and without promotion, and the "
                   "scaling recipes' failure modes")
      .option("steps", "100", "training steps per run")
      .option("json", "", "also write the memory bill and each run's losses to this file")
      .flag("overwrite", "replace an existing --json file (without it, an existing one is refused)");
  return a;
}

constexpr std::int64_t kMinSteps = 25;

}  // namespace

MasterWeightsDemoFlags parse_master_weights_demo_flags(int argc, char** argv) {
  ArgParser args = make_parser();
  args.parse(argc, argv);
  MasterWeightsDemoFlags f;
  std::vector<std::string> bugs = {"all", "clip-before-unscale", "no-unscale", "fp16-weights"};
  const std::vector<std::string>& fp8_bugs = fp8_bug_names();
  bugs.insert(bugs.end(), fp8_bugs.begin(), fp8_bugs.end());
  f.bug = args.get_choice("bug", bugs);
  const bool fp8_bug = std::find(fp8_bugs.begin(), fp8_bugs.end(), f.bug) != fp8_bugs.end();
  f.fp8 = args.get_flag("fp8") || fp8_bug;
  if (f.fp8 && f.bug != "all" && !fp8_bug) {
    throw InputError("--bug " + f.bug + " is a mistake of the FP32 ledger, not of --fp8");
  }
  f.lesson.steps = args.get_int("steps");
  // Below 25 steps the lesson cannot hold: the FP32 masters of the fp16-weights scenario have
  // not yet gathered enough updates to move most of the FP16 working copy (lr 1e-5), nor SGD
  // halved the loss; the claims would fail for want of training, not of a bug.
  if (f.lesson.steps < kMinSteps || f.lesson.steps > 100000) {
    throw InputError("--steps must be in [" + std::to_string(kMinSteps) +
                     ", 100000] (fewer steps are too few for the lesson's claims), got " +
                     args.get("steps"));
  }
  refuse_overwrite_without_output(args.get_flag("overwrite"), args.given("json"), "--json");
  f.json_path = args.given("json")
                    ? checked_output_path("--json", args.get("json"), args.get_flag("overwrite"))
                    : std::string();
  return f;
}

}  // namespace mixpar::ch03
