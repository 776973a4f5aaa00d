#include "ch05_zero/zero_demo_flags.h"

#include "util/cli.h"

namespace mixpar::ch05 {
namespace {

ArgParser make_parser() {
  ArgParser a("ch05_zero",
              "ZeRO stages 1, 2 and 3: the FP32 masters and Adam moments (stage 2: and the\n"
              "gradients; stage 3: and the parameters) sharded over the data-parallel ranks,\n"
              "gradients reduce-scattered, parameters all-gathered: DDP's result, bit for bit,\n"
              "in 1/N of the memory.");
  a.option("bug", "all",
           "all | none | local-norm | unshared-overflow | released-gradients | "
           "forgotten-tied-weight | prefetch-order")
      .option("ranks", "2", "ranks of the failure modes (threads of this process), 2..8");
  return a;
}

}  // namespace

ZeroDemoFlags parse_zero_demo_flags(int argc, char** argv) {
  ArgParser args = make_parser();
  args.parse(argc, argv);
  ZeroDemoFlags f;
  f.bug = args.get_choice(
      "bug", {"all", "none", "local-norm", "unshared-overflow", "released-gradients",
              "forgotten-tied-weight", "prefetch-order"});
  f.ranks = static_cast<int>(args.get_int("ranks", 2, 8));
  return f;
}

}  // namespace mixpar::ch05
