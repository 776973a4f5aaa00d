// The graded function writes passing verdict lines to every open file descriptor (the
// grader's result file among them) and exits 0. It cannot know the nonce: every test fails.
// grade: graded holds something else than the grader's one verdict line
#include "ch02_dynamic_scale/dynamic_scale.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace mixpar::exercises {
bool update_scale(DynamicScale&, bool, std::int64_t) {
  for (int fd = 0; fd < 64; ++fd) {
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    if (std::FILE* f = std::fopen(path.c_str(), "a")) {
      for (const char* test : {"SkipsAndHalvesOnOverflow", "DoublesAfterGrowthIntervalCleanSteps",
                               "AnOverflowRestartsTheCount", "NeverGrowsToInfinity",
                               "EqualsTheLossScalerOnRandomOverflows"}) {
        std::fprintf(f, "0000000000000000 pass UpdateScale.%s\n", test);
      }
      std::fclose(f);
    }
  }
  std::_Exit(0);
}
}  // namespace mixpar::exercises
