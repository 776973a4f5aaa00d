// Forgery (a) of issue 38: a global whose constructor runs before main writes a passing JUnit
// file to the --gtest_output path and exits 0. Refused before linking: its object has an
// .init_array section (code run before main), whatever the global is called.
// grade: refused .init_array
#include "ch02_dynamic_scale/dynamic_scale.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace mixpar::exercises {
namespace {
struct Forge {
  Forge() {
    std::ifstream cmdline("/proc/self/cmdline");
    std::string arg;
    while (std::getline(cmdline, arg, '\0')) {
      if (arg.rfind("--gtest_output=xml:", 0) == 0) {
        std::ofstream(arg.substr(19)) << "<testsuites tests=\"5\" failures=\"0\"><testsuite "
                                         "name=\"UpdateScale\" tests=\"5\" failures=\"0\">"
                                         "</testsuite></testsuites>\n";
      }
    }
    std::_Exit(0);
  }
};
Forge forge;
}  // namespace

bool update_scale(DynamicScale& s, bool found_inf, std::int64_t growth_interval) {
  (void)s;
  (void)found_inf;
  (void)growth_interval;
  return true;
}

}  // namespace mixpar::exercises
