// --threads, the one option every demo and tool shares (ops/compute_threads.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "ops/compute_threads.h"
#include "util/cli.h"
#include "util/errors.h"

namespace mixpar::ops {
namespace {

ArgParser parsed(std::vector<std::string> args) {
  ArgParser a("demo", "a demo");
  add_threads_option(a);
  std::vector<char*> argv;
  static std::string prog = "demo";
  argv.push_back(prog.data());
  for (std::string& s : args) argv.push_back(s.data());
  a.parse(static_cast<int>(argv.size()), argv.data());
  return a;
}

TEST(ThreadsOption, SetsTheCallingThreadsTeam) {
#if defined(_OPENMP)
  const int before = omp_get_max_threads();
  apply_threads_option(parsed({"--threads", "3"}));
  EXPECT_EQ(omp_get_max_threads(), 3);
  apply_threads_option(parsed({}));  // 0: leaves the team as it is
  EXPECT_EQ(omp_get_max_threads(), 3);
  set_compute_threads(before);
#else
  GTEST_SKIP() << "built without OpenMP (the tsan preset): there is no team to size";
#endif
}

TEST(ThreadsOption, ANegativeCountIsAnInputErrorNamingTheFlag) {
  try {
    apply_threads_option(parsed({"--threads", "-1"}));
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--threads"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parsed({"--threads", "two"}).get_int("threads"), InputError);
}

}  // namespace
}  // namespace mixpar::ops
